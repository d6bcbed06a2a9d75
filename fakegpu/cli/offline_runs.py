"""What the ``fakegpu`` commands that print a node's objects do once parsed: ``catalog``, ``devices``,
``labels``, ``slices``, ``deviceclasses``. No daemon, no API server."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace

from fakegpu.cli.catalog_command import render_boards_table, render_catalog
from fakegpu.cli.consumable_shares_option import consumable_shares
from fakegpu.cli.inventory_options import inventory_inputs
from fakegpu.cli.inventory_output import render_inventory, render_labels
from fakegpu.cli.slice_commands import (
    dra_feature_gates,
    given_feature_gates,
    render_device_classes,
    render_slices,
    slice_gate_lines,
    slice_options,
)
from fakegpu.cli.yaml_output import dump_yaml
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.expansion import build_inventory
from fakegpu.sharing.health import XidPolicy
from fakegpu.sharing.inputs import InventoryInputs, load_config, load_node
from fakegpu.sharing.labels import gfd_labels
from fakegpu.sharing.node_feature import DEFAULT_NAMESPACE, check_node_feature, node_feature


def _warn(warnings: Sequence[str]) -> None:
    for w in warnings:
        print(f"fakegpu: warning: {w}", file=sys.stderr)


def run_catalog(args: argparse.Namespace) -> int:
    sys.stdout.write(render_boards_table() if args.markdown else render_catalog(args.verbose))
    return 0


def run_slices(args: argparse.Namespace) -> int:
    """The slices as ``fakegpu dra`` would publish them with the same gates; with gates given, first one line
    per gate on stderr saying what it changes (stdout stays objects ``kubectl apply`` reads)."""
    gates, args.mig_mode = dra_feature_gates(args, os.environ)
    node = load_node(inventory_inputs(args))
    options = replace(
        slice_options(args, args.server_version, gates), shares=consumable_shares(args, os.environ, gates)
    )
    for line in slice_gate_lines(given_feature_gates(args, os.environ), options):
        print(f"{node.name}: {line}", file=sys.stderr)
    policy = XidPolicy.for_dra_driver(os.environ)
    sys.stdout.write(render_slices(node, options, args.node_uid, args.output, policy))
    return 0


def run_deviceclasses(args: argparse.Namespace) -> int:
    sys.stdout.write(
        render_device_classes(
            args.driver_name,
            args.resource_api_version,
            args.extended_resource_name or None,
            args.output,
            compute_domains=args.compute_domains,
        )
    )
    return 0


def run_labels(args: argparse.Namespace) -> int:
    inputs = inventory_inputs(args)
    node, config = load_node(inputs), load_config(inputs)
    _warn(config.warnings)
    labels = gfd_labels(node, config, args.timestamp)
    if config.use_node_feature_api:
        # As GFD with useNodeFeatureAPI: the labels inside the node's NodeFeature (no pod here: no owners).
        obj = _node_feature(args, inputs, node.name, labels)
        sys.stdout.write(json.dumps(obj, indent=2) + "\n" if args.output == "json" else dump_yaml(obj, sort_keys=False))
        return 0
    sys.stdout.write(render_labels(labels, args.output or "table"))
    return 0


def _node_feature(
    args: argparse.Namespace, inputs: InventoryInputs, node_name: str, labels: dict[str, str]
) -> dict[str, object]:
    """The NodeFeature ``labels`` prints, refused in one line where the API server would refuse it."""
    if args.output not in (None, "yaml", "json"):
        raise SpecError(f"-o {args.output}", "a NodeFeature (--use-node-feature-api) prints as yaml or json")
    namespace = args.namespace or inputs.env.get("NAMESPACE") or DEFAULT_NAMESPACE
    named = "NODE_NAME" if inputs.env.get("NODE_NAME") else "host name"
    node_from = "--node-name" if args.node_name is not None else named
    namespace_from = "--namespace" if args.namespace else "NAMESPACE"
    check_node_feature(node_name, namespace, node_from=node_from, namespace_from=namespace_from)
    return node_feature(node_name, namespace, labels)


def run_devices(args: argparse.Namespace) -> int:
    inputs = inventory_inputs(args)
    node, config = load_node(inputs), load_config(inputs)
    inventory = build_inventory(node, config)
    _warn(inventory.warnings)
    sys.stdout.write(render_inventory(inventory, gfd_labels(node, config), args.output))
    return 0
