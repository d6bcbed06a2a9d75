"""The options of the commands that print what a node would show: ``slices``, ``deviceclasses``, ``devices``,
``labels``, ``catalog`` (one ``add_*`` each), and the one ``-o`` every printing command uses.

``-o`` is ``table|json|yaml`` where a table makes sense (``labels -o text`` is kept as an alias of its
table); ``slices`` and ``deviceclasses`` print API objects, as YAML documents or a JSON ``List``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from fakegpu.cli.consumable_shares_option import add_consumable_shares_option
from fakegpu.cli.inventory_options import add_inventory_options, add_node_inventory_options
from fakegpu.cli.inventory_output import LABEL_FORMATS, OUTPUT_FORMATS
from fakegpu.cli.slice_commands import API_VERSIONS, SLICE_OUTPUT_FORMATS, add_feature_gates_option, add_slice_options
from fakegpu.dra.device_classes import EXTENDED_RESOURCE_NAME
from fakegpu.sharing.node_feature import DEFAULT_NAMESPACE


def add_output_option(parser: argparse.ArgumentParser, choices: Sequence[str], default: str) -> None:
    """``-o``: one spelling and help for every command that prints a result."""
    parser.add_argument(
        "-o", "--output", choices=choices, default=default, help=f"{', '.join(choices)} (default %(default)s)"
    )


def add_slices(slices: argparse.ArgumentParser) -> None:
    add_node_inventory_options(slices)
    add_slice_options(slices, api_version_default="resource.k8s.io/v1", server_version_default=36, version_from="1.36")
    add_feature_gates_option(slices)
    add_consumable_shares_option(slices)
    slices.add_argument("--node-uid", default=None, help="add the Node owner reference with this UID")
    add_output_option(slices, SLICE_OUTPUT_FORMATS, "yaml")


def add_deviceclasses(classes: argparse.ArgumentParser) -> None:
    classes.add_argument(
        "--driver-name",
        default="gpu.nvidia.com",
        help="DRA driver whose devices the classes select; it names the classes too: gpu.<domain> and "
        "mig.<domain> (default %(default)s: gpu.nvidia.com and mig.nvidia.com, as NVIDIA's chart)",
    )
    classes.add_argument(
        "--resource-api-version",
        choices=API_VERSIONS,
        default="resource.k8s.io/v1",
        help="resource.k8s.io version of the objects (default %(default)s)",
    )
    classes.add_argument(
        "--extended-resource-name",
        default=EXTENDED_RESOURCE_NAME,
        help="the extended resource the gpu class serves (resource.k8s.io/v1 only, as NVIDIA's chart does; "
        "'' for none; default %(default)s)",
    )
    classes.add_argument(
        "--compute-domains",
        action="store_true",
        help="also print NVIDIA's ComputeDomain classes compute-domain-daemon.nvidia.com and "
        "compute-domain-default-channel.nvidia.com (driver compute-domain.nvidia.com)",
    )
    add_output_option(classes, SLICE_OUTPUT_FORMATS, "yaml")


def add_devices(devices: argparse.ArgumentParser) -> None:
    add_inventory_options(devices)
    add_output_option(devices, OUTPUT_FORMATS, "table")


def add_labels(labels: argparse.ArgumentParser) -> None:
    add_inventory_options(labels)
    labels.add_argument(
        "-o",
        "--output",
        choices=LABEL_FORMATS,
        default=None,
        help=f"{', '.join(LABEL_FORMATS)} (default table; with --use-node-feature-api the NodeFeature: yaml or json, "
        "default yaml)",
    )
    labels.add_argument(
        "--timestamp", type=int, default=None, help="add nvidia.com/gfd.timestamp with this value (omitted by default)"
    )
    labels.add_argument(
        "--namespace",
        default=None,
        help="with --use-node-feature-api, the NodeFeature's namespace (env NAMESPACE, default "
        f"{DEFAULT_NAMESPACE}, as GFD's --namespace)",
    )


def add_catalog(catalog: argparse.ArgumentParser) -> None:
    shape = catalog.add_mutually_exclusive_group()
    shape.add_argument("-v", "--verbose", action="store_true", help="show MIG profiles and unverified numbers")
    shape.add_argument(
        "--markdown", action="store_true", help="print the README's Boards table (a test checks the README has it)"
    )
