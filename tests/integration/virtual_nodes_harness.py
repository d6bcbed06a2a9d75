"""What the virtual-nodes integration tests share: the command's flags parsed as the CLI parses them, a run's
outcome, a runner of the command on a client, and a tests' API server that fails the test if the tool sent
anything it rejected."""

from __future__ import annotations

import argparse
import io
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from lightkube import AsyncClient

from fakegpu.cli.virtual_nodes_command import add_virtual_nodes_parser, run_virtual_nodes
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


def command_runner(client: AsyncClient, **options: Any) -> Callable[..., Awaitable[Run]]:
    """A ``run`` fixture's value: ``await run(*argv)`` runs ``fakegpu virtual-nodes ARGV`` once on ``client``
    (retrying after 10 ms, ``options`` passed on to ``run_virtual_nodes``) and returns what it printed."""

    async def go(*argv: str) -> Run:
        out, err = io.StringIO(), io.StringIO()
        code = await run_virtual_nodes(parse(*argv), client=client, out=out, err=err, retry_pause=0.01, **options)
        return Run(code, out.getvalue(), err.getvalue())

    return go


def strict_apiserver(version: str = "1.36") -> Iterator[FakeApiServer]:
    """A fixture's body: ``tests.apiserver.serving``'s server, and no rejection at all afterwards, not even of a
    request without a body (the CLI is never cut off mid-request, as a stopping driver can be)."""
    with serving(version=version) as api:
        yield api
    assert api.rejections == [], "the tool sent an object the API server rejected"
