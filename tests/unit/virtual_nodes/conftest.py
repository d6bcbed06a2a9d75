"""Shared helpers for the virtual node unit tests."""

from __future__ import annotations

import argparse

import pytest

from fakegpu.cli.virtual_nodes_command import add_virtual_nodes_parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fakegpu")
    add_virtual_nodes_parser(parser.add_subparsers(dest="command"))
    return parser


@pytest.fixture
def parse():
    parser = build_parser()

    def run(*argv: str) -> argparse.Namespace:
        return parser.parse_args(["virtual-nodes", *argv])

    return run
