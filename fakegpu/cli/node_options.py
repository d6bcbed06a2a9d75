"""``fakegpu plugin`` flags for its Node: GFD labels (``--label-node``) and per-node config selection.

The selection flags and their environment variables are those of NVIDIA's config-manager sidecar, so a
DaemonSet written for NVIDIA's chart maps onto ``fakegpu plugin`` one to one.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from fakegpu.fakeplugin.cleanup_policy import ENV as CLEANUP_ENV
from fakegpu.fakeplugin.cleanup_policy import CleanupOnExit
from fakegpu.fakeplugin.daemon import NodeSettings
from fakegpu.fakeplugin.node_sync import ConfigSelection
from fakegpu.kube.client import KUBECONFIG_HELP
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.named_configs import (
    DEFAULT_CONFIG_LABEL,
    DEFAULT_FALLBACKS,
    available_configs,
    parse_fallback_strategies,
)
from fakegpu.sharing.node_feature import DEFAULT_NAMESPACE
from fakegpu.sharing.plugin_config import parse_go_bool

log = logging.getLogger(__name__)


def add_node_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the node object (needs an API server: in-cluster config or --kubeconfig)")
    group.add_argument(
        "--kubeconfig",
        default=None,
        help=KUBECONFIG_HELP,
    )
    group.add_argument(
        "--label-node",
        action="store_true",
        help="write the GPU Feature Discovery labels to this node and keep them current; only labels "
        "fakegpu wrote are ever removed (they are listed in the fakegpu.io/managed-labels annotation)",
    )
    group.add_argument(
        "--cleanup-on-exit",
        default=None,
        metavar="POLICY",
        help="with --label-node, whether a stop signal takes fakegpu's labels and their annotation off the node: "
        "always (default; as GFD's features file goes on every exit), never, or unless-node-label:KEY[=VALUE] "
        "(keep them while the node carries that label, i.e. while a DaemonSet selecting on it will restart the "
        f"plugin here; deploy/overlays/device-plugin sets this); env {CLEANUP_ENV}",
    )
    group.add_argument(
        "--no-timestamp",
        action="store_true",
        default=None,
        help="with --label-node, leave out nvidia.com/gfd.timestamp, as GFD's --no-timestamp does "
        "(env GFD_NO_TIMESTAMP)",
    )
    group.add_argument(
        "--namespace",
        default=None,
        help="with --label-node and useNodeFeatureAPI, the namespace of the node's NodeFeature, as GFD's "
        f"--namespace (env NAMESPACE, default {DEFAULT_NAMESPACE}; NVIDIA's chart passes the pod's)",
    )
    group.add_argument(
        "--pod-name",
        default=None,
        help="the plugin's own pod, whose DaemonSet owns the NodeFeature, as GFD reads it (env POD_NAME; "
        "none: the NodeFeature gets no owner references)",
    )
    group.add_argument(
        "--config-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="directory of named NVIDIA config files (a ConfigMap mounted as a directory); the node label "
        "--config-label picks one, live (env CONFIG_FILE_SRCDIR)",
    )
    group.add_argument(
        "--config-label",
        default=None,
        metavar="KEY",
        help=f"node label that names the config (env NODE_LABEL, default {DEFAULT_CONFIG_LABEL})",
    )
    group.add_argument(
        "--default-config",
        default=None,
        metavar="NAME",
        help="config to use when the node has no label (env DEFAULT_CONFIG)",
    )
    group.add_argument(
        "--fallback-strategies",
        default=None,
        metavar="LIST",
        help="with no label and no default: comma-separated named (a config called 'default'), single (the only "
        f"config), empty (built-in defaults); env FALLBACK_STRATEGIES, default {','.join(DEFAULT_FALLBACKS)}",
    )


def no_timestamp(args: argparse.Namespace, env: Mapping[str, str]) -> bool:
    """``--no-timestamp``, else ``GFD_NO_TIMESTAMP`` read as GFD's urfave/cli reads a bool (Go's ParseBool)."""
    if args.no_timestamp is not None:
        return bool(args.no_timestamp)
    raw = env.get("GFD_NO_TIMESTAMP")
    return raw is not None and parse_go_bool(raw, "GFD_NO_TIMESTAMP")


def cleanup_on_exit(args: argparse.Namespace, env: Mapping[str, str]) -> CleanupOnExit:
    """``--cleanup-on-exit``, else ``FAKEGPU_CLEANUP_ON_EXIT``, else ``always``."""
    if args.cleanup_on_exit is not None:
        return CleanupOnExit.parse(args.cleanup_on_exit)
    if env.get(CLEANUP_ENV):
        return CleanupOnExit.parse(env[CLEANUP_ENV], CLEANUP_ENV)
    return CleanupOnExit()


def node_settings(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> NodeSettings:
    env = os.environ if env is None else env
    directory, source = args.config_dir, "--config-dir"
    if directory is None and env.get("CONFIG_FILE_SRCDIR"):
        directory, source = Path(env["CONFIG_FILE_SRCDIR"]), "CONFIG_FILE_SRCDIR"
    selection = None
    if directory is not None:
        if args.config_file:
            raise SpecError(source, "cannot be combined with --config-file; the node label picks the file")
        if not directory.is_dir():
            raise SpecError(source, f"{directory} is not a directory")
        if env.get("CONFIG_FILE"):
            log.warning(
                "CONFIG_FILE=%s is ignored: %s=%s selects the config by node label",
                env["CONFIG_FILE"],
                source,
                directory,
            )
        label = args.config_label or env.get("NODE_LABEL") or DEFAULT_CONFIG_LABEL
        fallbacks_text = args.fallback_strategies
        source = "--fallback-strategies"
        if fallbacks_text is None and env.get("FALLBACK_STRATEGIES") is not None:
            fallbacks_text, source = env["FALLBACK_STRATEGIES"], "FALLBACK_STRATEGIES"
        fallbacks = DEFAULT_FALLBACKS if fallbacks_text is None else parse_fallback_strategies(fallbacks_text, source)
        default_config = args.default_config or env.get("DEFAULT_CONFIG", "")
        names = available_configs(directory)
        if default_config and default_config not in names:
            flag = "--default-config" if args.default_config else "DEFAULT_CONFIG"
            raise SpecError(flag, f"specified config {default_config} does not exist (available: {', '.join(names)})")
        selection = ConfigSelection(
            directory=directory, label=label, default_config=default_config, fallbacks=fallbacks
        )
    else:
        for flag in ("config_label", "default_config", "fallback_strategies"):
            if getattr(args, flag) is not None:
                raise SpecError("--" + flag.replace("_", "-"), "only applies with --config-dir")
    return NodeSettings(
        label_node=args.label_node,
        selection=selection,
        kubeconfig=args.kubeconfig,
        timestamp=not no_timestamp(args, env),
        cleanup_on_exit=cleanup_on_exit(args, env),
        namespace=args.namespace or env.get("NAMESPACE") or DEFAULT_NAMESPACE,
        pod_name=args.pod_name or env.get("POD_NAME", ""),
    )
