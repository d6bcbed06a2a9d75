"""The ``fakegpu`` command: one subcommand per process shape of the design."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fakegpu.catalog_output import render_catalog
from fakegpu.inventory_options import add_inventory_options, inventory_inputs
from fakegpu.inventory_output import render_inventory, render_labels
from sharing.errors import SpecError
from sharing.expansion import build_inventory
from sharing.inputs import load_config, load_node
from sharing.labels import gfd_labels

EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fakegpu", description="Fake NVIDIA GPUs for Kubernetes.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    devices = sub.add_parser("devices", help="print the resources and devices a node would advertise")
    add_inventory_options(devices)
    devices.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")

    labels = sub.add_parser("labels", help="print the GPU Feature Discovery labels a node would carry")
    add_inventory_options(labels)
    labels.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    labels.add_argument(
        "--timestamp", type=int, default=None, help="add nvidia.com/gfd.timestamp with this value (omitted by default)"
    )

    catalog = sub.add_parser("catalog", help="list the GPU models fakegpu emulates")
    catalog.add_argument("-v", "--verbose", action="store_true", help="show MIG profiles and unverified numbers")
    return parser


def _warn(warnings: Sequence[str]) -> None:
    for w in warnings:
        print(f"fakegpu: warning: {w}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "catalog":
            sys.stdout.write(render_catalog(args.verbose))
            return 0
        inputs = inventory_inputs(args)
        node = load_node(inputs)
        config = load_config(inputs)
        if args.command == "labels":
            _warn(config.warnings)
            sys.stdout.write(render_labels(gfd_labels(node, config, args.timestamp), args.output))
            return 0
        inventory = build_inventory(node, config)
        _warn(inventory.warnings)
        sys.stdout.write(render_inventory(inventory, gfd_labels(node, config), args.output))
        return 0
    except SpecError as exc:
        print(f"fakegpu: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
