"""The inventory options every command shares (node spec, MIG layout, NVIDIA config and flags)."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping

from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.sharing.plugin_flags import PLUGIN_FLAGS


def add_inventory_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("node and inventory")
    group.add_argument("--node-spec", metavar="FILE", help="YAML node spec describing the node's GPUs")
    group.add_argument(
        "--gpus",
        metavar="SPEC",
        action="append",
        default=[],
        help="shorthand for the GPUs, e.g. 8xh100-80gb (repeatable for mixed models); default 8xh100-80gb",
    )
    group.add_argument("--mig-config", metavar="FILE", help="mig-parted config file (version v1, mig-configs)")
    group.add_argument(
        "--mig-layout",
        metavar="NAME",
        help="layout from --mig-config, or a generated one: all-disabled, all-enabled, all-balanced, all-<profile>",
    )
    group.add_argument("--node-name", metavar="NAME", help="node name (default: $NODE_NAME, then the host name)")
    group.add_argument("--config-file", metavar="FILE", help="NVIDIA device plugin config file (env CONFIG_FILE)")
    group.add_argument(
        "--experimental-honor-resources",
        action="store_true",
        help="honour the config's 'resources' patterns, which NVIDIA v0.20 ignores with a warning",
    )
    group.add_argument(
        "--experimental-honor-sharing-rename",
        action="store_true",
        help="honour sharing.*.resources[].rename and .devices, which NVIDIA v0.20 overrides with a warning",
    )
    flags = parser.add_argument_group("NVIDIA device plugin flags (flag > env > config file)")
    for spec in PLUGIN_FLAGS:
        env = ", ".join(spec.env)
        default = ",".join(str(v) for v in spec.default) if isinstance(spec.default, tuple) else spec.default
        help_text = f"{spec.help} (env {env}; default {default!s})"
        names = (spec.cli, *spec.aliases)
        if spec.kind == "bool":
            flags.add_argument(
                *names, dest=spec.key, nargs="?", const="true", default=None, metavar="BOOL", help=help_text
            )
        else:
            flags.add_argument(*names, dest=spec.key, default=None, metavar="VALUE", help=help_text)


def default_node_name(env: Mapping[str, str]) -> str:
    return env.get("NODE_NAME") or socket.gethostname()


def inventory_inputs(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> InventoryInputs:
    environ = dict(os.environ if env is None else env)
    return InventoryInputs(
        node_name=args.node_name if args.node_name is not None else default_node_name(environ),
        node_spec=args.node_spec,
        gpus=tuple(args.gpus),
        mig_config=args.mig_config,
        mig_layout=args.mig_layout,
        config_file=args.config_file,
        cli_flags={spec.key: getattr(args, spec.key) for spec in PLUGIN_FLAGS},
        env=environ,
        honor_custom_resources=args.experimental_honor_resources,
        honor_sharing_rename_devices=args.experimental_honor_sharing_rename,
    )
