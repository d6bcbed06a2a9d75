"""The inventory options: the node's GPUs (every command that describes a node) and the NVIDIA device plugin
config (only the commands that read it: ``plugin``, ``demo``, ``devices``, ``labels``, ``nvidia-smi`` and
``virtual-nodes``, whose device-plugin mode advertises what the config makes of the GPUs).

The DRA commands (``dra``, ``slices``) publish the node's devices as they are, so they take the node group
only: a device-plugin flag there would be accepted and then ignored."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping

from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.sharing.plugin_flags import PLUGIN_FLAGS


def add_inventory_options(parser: argparse.ArgumentParser, config_applies: str = "") -> None:
    """The node's GPUs and the NVIDIA device plugin config: what the device-plugin face advertises;
    ``config_applies`` says when the config matters, for a command where it does not always."""
    add_node_inventory_options(parser)
    add_plugin_config_options(parser, config_applies)


def add_node_inventory_options(parser: argparse.ArgumentParser) -> None:
    """The node's GPUs, MIG layout and name."""
    group = parser.add_argument_group("the node's GPUs")
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
    group.add_argument(
        "--nvlink-clique",
        metavar="UUID.ID",
        help="the node's multi-node NVLink clique (GB200/GB300 NVL72) as <cluster UUID>.<clique ID>, as NVIDIA's "
        "GPU Feature Discovery writes it in nvidia.com/gpu.clique; for nodes without a node spec (a spec says it "
        "with fabric:)",
    )


def add_plugin_config_options(parser: argparse.ArgumentParser, applies: str = "") -> None:
    """NVIDIA's device plugin config file and flags: the MIG strategy, sharing, device IDs and list strategy."""
    group = parser.add_argument_group(
        "NVIDIA device plugin config: resources, sharing and device IDs (flag > env > config file)"
        + (f"; {applies}" if applies else "")
    )
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
    for spec in PLUGIN_FLAGS:
        env = ", ".join(spec.env)
        default = ",".join(str(v) for v in spec.default) if isinstance(spec.default, tuple) else spec.default
        help_text = f"{spec.help} (env {env}; default {default!s})"
        names = (spec.cli, *spec.aliases)
        if spec.kind == "bool":
            group.add_argument(
                *names, dest=spec.key, nargs="?", const="true", default=None, metavar="BOOL", help=help_text
            )
        else:
            group.add_argument(*names, dest=spec.key, default=None, metavar="VALUE", help=help_text)


def default_node_name(env: Mapping[str, str]) -> str:
    return env.get("NODE_NAME") or socket.gethostname()


def inventory_inputs(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> InventoryInputs:
    """The inputs the command line gives; a command without the config options reads no config flags."""
    environ = dict(os.environ if env is None else env)
    return InventoryInputs(
        node_name=args.node_name if args.node_name is not None else default_node_name(environ),
        node_spec=args.node_spec,
        gpus=tuple(args.gpus),
        mig_config=args.mig_config,
        mig_layout=args.mig_layout,
        nvlink_clique=getattr(args, "nvlink_clique", None),
        config_file=getattr(args, "config_file", None),
        cli_flags={spec.key: getattr(args, spec.key, None) for spec in PLUGIN_FLAGS},
        env=environ,
        honor_custom_resources=getattr(args, "experimental_honor_resources", False),
        honor_sharing_rename_devices=getattr(args, "experimental_honor_sharing_rename", False),
    )
