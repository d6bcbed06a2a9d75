"""What the virtual-nodes integration tests share: the command's flags parsed as the CLI parses them, a run's
outcome, and a tests' API server that fails the test if the tool sent anything it rejected."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass

from fakegpu.cli.virtual_nodes_command import add_virtual_nodes_parser
from tests.apiserver import FakeApiServer, serving


@dataclass
class Run:
    code: int
    out: str
    err: str


def parse(*argv: str) -> argparse.Namespace:
    """``fakegpu virtual-nodes ARGV`` as the command line parses it."""
    parser = argparse.ArgumentParser(prog="fakegpu")
    add_virtual_nodes_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["virtual-nodes", *argv])


def strict_apiserver(version: str = "1.36") -> Iterator[FakeApiServer]:
    """A fixture's body: ``tests.apiserver.serving``'s server, and no rejection at all afterwards, not even of a
    request without a body (the CLI is never cut off mid-request, as a stopping driver can be)."""
    with serving(version=version) as api:
        yield api
    assert api.rejections == [], "the tool sent an object the API server rejected"
