"""The ``fakegpu`` command: one subcommand per process shape of the design."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from fakegpu.cli.catalog_command import render_catalog
from fakegpu.cli.cleanup_command import add_cleanup_parser, run_cleanup_command
from fakegpu.cli.ctl_command import add_ctl_parser, run_ctl
from fakegpu.cli.demo_command import run_demo
from fakegpu.cli.inventory_options import add_inventory_options, inventory_inputs
from fakegpu.cli.inventory_output import render_inventory, render_labels
from fakegpu.cli.kubelet_command import add_kubelet_parser, run_kubelet_command
from fakegpu.cli.kubelet_socket_option import add_kubelet_socket_option, kubelet_target
from fakegpu.cli.node_options import add_node_options, node_settings
from fakegpu.cli.nvidia_smi_command import (
    add_inject_options,
    add_nvidia_smi_parser,
    apply_inject_flags,
    run_nvidia_smi_command,
)
from fakegpu.cli.scenario_command import add_scenario_parser, run_scenario_command
from fakegpu.cli.slice_commands import (
    API_VERSIONS,
    KNOWN_VERSIONS,
    add_feature_gates_option,
    add_slice_options,
    dra_feature_gates,
    render_device_classes,
    render_slices,
    server_minor,
    slice_options,
)
from fakegpu.cli.version import version_line
from fakegpu.cli.virtual_nodes_command import add_virtual_nodes_parser, run_virtual_nodes_command
from fakegpu.dra.daemon import DraSettings, run_dra_daemon
from fakegpu.dra.device_classes import EXTENDED_RESOURCE_NAME
from fakegpu.fakeplugin.daemon import run_plugin_daemon
from fakegpu.kube.client import KUBECONFIG_HELP
from fakegpu.kube.discovery import NEWEST_LAYOUT, OLDEST_MINOR
from fakegpu.runtime.bounded_run import run_bounded
from fakegpu.runtime.kubelet_paths import DEFAULT_ROOT, KubeletPaths
from fakegpu.runtime.unix_socket import SocketPathError
from fakegpu.sharing.bug_modes import BUG_MODES, BugModeError, parse_bug_modes
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.expansion import build_inventory
from fakegpu.sharing.inputs import load_config, load_node
from fakegpu.sharing.labels import gfd_labels
from fakegpu.telemetry.dcgm.endpoint import add_dcgm_options, dcgm_address
from fakegpu.telemetry.health_endpoint import add_health_address_option, health_address
from fakegpu.telemetry.http_endpoint import add_metrics_address_option, metrics_address
from fakegpu.telemetry.log_format import LOG_FORMATS, configure_logging
from fakegpu.telemetry.telemetry_settings import TelemetrySettings

EXIT_USAGE = 2


def add_cdi_root_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--cdi-root``: where a daemon writes its CDI specs; a container runtime reads /var/run/cdi."""
    parser.add_argument(
        "--cdi-root", type=Path, default=Path("/var/run/cdi"), help=f"where {what} go (default %(default)s)"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fakegpu", description="Fake NVIDIA GPUs for Kubernetes.")
    parser.add_argument(
        "-V", "--version", action="version", version=version_line(), help="print the version and the emulated driver"
    )
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    parser.add_argument(
        "--log-format", default="text", choices=LOG_FORMATS, help="text, or JSON with one object per line"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="run the kubelet emulator and the device plugins together and show the node")
    add_inventory_options(demo)

    plugin = sub.add_parser("plugin", help="run the device plugin daemon next to a kubelet")
    add_inventory_options(plugin)
    plugin.add_argument(
        "--kubelet-dir",
        type=Path,
        default=DEFAULT_ROOT,
        help="the kubelet's root dir holding device-plugins/ and plugins_registry/ (default %(default)s)",
    )
    plugin.add_argument(
        "--registration",
        choices=("kubelet", "plugins-registry"),
        default="kubelet",
        help="register by calling kubelet.sock (NVIDIA's way) or through the plugin watcher",
    )
    add_kubelet_socket_option(plugin)
    plugin.add_argument(
        "--pre-start-required",
        action="store_true",
        help="ask the kubelet to call PreStartContainer before each container start",
    )
    plugin.add_argument(
        "--admin-socket",
        type=Path,
        default=None,
        metavar="PATH",
        help="serve an owner-only admin socket here for 'fakegpu ctl' (off unless given; "
        "conventionally /var/run/fakegpu/plugin.sock)",
    )
    add_cdi_root_option(plugin, "the plugin's CDI specs (with a CDI deviceListStrategy)")
    plugin.add_argument(
        "--bug-compat",
        action="append",
        default=[],
        metavar="MODE",
        help="reproduce a known bug on purpose (repeatable): " + ", ".join(BUG_MODES),
    )
    add_node_options(plugin)
    add_metrics_address_option(plugin)
    add_dcgm_options(plugin)
    add_health_address_option(plugin)

    add_kubelet_parser(sub)

    dra = sub.add_parser("dra", help="run the DRA driver: publish ResourceSlices and serve the kubelet DRA plugin")
    add_inventory_options(dra)
    add_slice_options(dra)
    dra.add_argument(
        "--kubelet-dir",
        type=Path,
        default=DEFAULT_ROOT,
        help="the kubelet's root dir holding plugins/ and plugins_registry/ (default %(default)s)",
    )
    dra.add_argument(
        "--plugins-registry-dir",
        type=Path,
        default=None,
        help="where the kubelet watches for registration sockets (default KUBELET_DIR/plugins_registry)",
    )
    dra.add_argument(
        "--plugins-dir",
        type=Path,
        default=None,
        help="where the DRA socket and the claim checkpoint go (default KUBELET_DIR/plugins)",
    )
    dra.add_argument(
        "--kubeconfig",
        default=None,
        help=KUBECONFIG_HELP,
    )
    add_cdi_root_option(dra, "the claims' CDI specs")
    dra.add_argument(
        "--server-version",
        type=server_minor,
        default=None,
        help=f"Kubernetes version of the cluster, {KNOWN_VERSIONS} (default: the node's kubelet version)",
    )
    dra.add_argument(
        "--admin-socket",
        type=Path,
        default=None,
        metavar="PATH",
        help="serve an owner-only admin socket here for 'fakegpu ctl' (off unless given; "
        "conventionally /var/run/fakegpu/dra.sock)",
    )
    add_feature_gates_option(dra)
    add_metrics_address_option(dra)
    add_dcgm_options(dra)
    add_health_address_option(dra)

    add_inject_options(plugin, "plugin")
    add_inject_options(dra, "dra")
    add_nvidia_smi_parser(sub)
    add_virtual_nodes_parser(sub)

    slices = sub.add_parser("slices", help="print the ResourceSlices the DRA driver would publish")
    add_inventory_options(slices)
    add_slice_options(slices)
    slices.add_argument(
        "--server-version",
        type=server_minor,
        default=36,
        help=f"Kubernetes version whose slice layout to use, 1.{OLDEST_MINOR}-1.{NEWEST_LAYOUT} (default 1.36)",
    )
    slices.add_argument("--node-uid", default=None, help="add the Node owner reference with this UID")

    classes = sub.add_parser("deviceclasses", help="print the DeviceClasses for the DRA driver")
    classes.add_argument("--driver-name", default="gpu.nvidia.com")
    classes.add_argument("--resource-api-version", choices=API_VERSIONS, default="resource.k8s.io/v1")
    classes.add_argument(
        "--extended-resource-name",
        default=EXTENDED_RESOURCE_NAME,
        help="the extended resource the gpu class serves (resource.k8s.io/v1 only, as NVIDIA's chart does; "
        "'' for none; default %(default)s)",
    )

    devices = sub.add_parser("devices", help="print the resources and devices a node would advertise")
    add_inventory_options(devices)
    devices.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")

    labels = sub.add_parser("labels", help="print the GPU Feature Discovery labels a node would carry")
    add_inventory_options(labels)
    labels.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    labels.add_argument(
        "--timestamp", type=int, default=None, help="add nvidia.com/gfd.timestamp with this value (omitted by default)"
    )

    add_ctl_parser(sub)

    catalog = sub.add_parser("catalog", help="list the GPU models fakegpu emulates")
    catalog.add_argument("-v", "--verbose", action="store_true", help="show MIG profiles and unverified numbers")
    add_scenario_parser(sub)
    add_cleanup_parser(sub)
    return parser


def _warn(warnings: Sequence[str]) -> None:
    for w in warnings:
        print(f"fakegpu: warning: {w}", file=sys.stderr)


def _telemetry_settings(args: argparse.Namespace) -> TelemetrySettings:
    """The five telemetry flags ``plugin`` and ``dra`` share (``add_metrics_address_option``, ``add_dcgm_options``,
    ``add_health_address_option``)."""
    return TelemetrySettings(
        metrics_address(args),
        dcgm_address(args),
        args.dcgm_kubernetes_virtual_gpus,
        args.dcgm_seed,
        health_address=health_address(args),
    )


def _run(args: argparse.Namespace) -> int:
    if args.command == "catalog":
        sys.stdout.write(render_catalog(args.verbose))
        return 0
    if args.command == "ctl":
        return run_ctl(args)
    if args.command == "kubelet":
        return run_kubelet_command(args)
    if args.command == "scenario":
        return run_scenario_command(args)
    if args.command == "virtual-nodes":
        return run_virtual_nodes_command(args)
    if args.command == "cleanup":
        return run_cleanup_command(args)
    if args.command == "nvidia-smi":
        return run_nvidia_smi_command(args)
    if args.command == "deviceclasses":
        sys.stdout.write(
            render_device_classes(args.driver_name, args.resource_api_version, args.extended_resource_name or None)
        )
        return 0
    inputs = apply_inject_flags(args, inventory_inputs(args))
    if args.command == "demo":
        return asyncio.run(run_demo(inputs, sys.stdout))
    if args.command == "plugin":
        paths, registration = kubelet_target(args.kubelet_socket, args.kubelet_dir, args.registration, os.environ)
        return run_bounded(
            run_plugin_daemon(
                inputs,
                paths,
                registration=registration,
                pre_start_required=args.pre_start_required,
                bug_modes=parse_bug_modes(args.bug_compat),
                admin_socket=args.admin_socket,
                telemetry=_telemetry_settings(args),
                node=node_settings(args),
                cdi_root=args.cdi_root,
            )
        )
    if args.command == "dra":
        gates, mig_mode = dra_feature_gates(args, os.environ)
        settings = DraSettings(
            driver=args.driver_name,
            mig_mode=mig_mode,
            feature_gates=gates,
            cdi_root=args.cdi_root,
            kubeconfig=args.kubeconfig,
            server_minor=args.server_version,
            api_version=args.resource_api_version,
        )
        paths = KubeletPaths(args.kubelet_dir, registry_dir=args.plugins_registry_dir, plugins_dir=args.plugins_dir)
        return run_bounded(
            run_dra_daemon(
                inputs,
                paths,
                settings,
                admin_socket=args.admin_socket,
                telemetry=_telemetry_settings(args),
            )
        )
    node = load_node(inputs)
    if args.command == "slices":
        sys.stdout.write(render_slices(node, slice_options(args, args.server_version), {}, args.node_uid))
        return 0
    config = load_config(inputs)
    if args.command == "labels":
        _warn(config.warnings)
        sys.stdout.write(render_labels(gfd_labels(node, config, args.timestamp), args.output))
        return 0
    inventory = build_inventory(node, config)
    _warn(inventory.warnings)
    sys.stdout.write(render_inventory(inventory, gfd_labels(node, config), args.output))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    if args.command in ("devices", "labels", "catalog", "demo", "slices", "deviceclasses", "ctl", "nvidia-smi"):
        logging.getLogger().setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        return _run(args)
    except SpecError as exc:
        print(f"fakegpu: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (SocketPathError, BugModeError, ValueError) as exc:
        print(f"fakegpu: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (NotADirectoryError, PermissionError, FileExistsError) as exc:
        # A kubelet dir that is a file, or one we may not write: say which path and why.
        where = exc.filename or ""
        print(f"fakegpu: error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``fakegpu devices | head``): stop quietly, as other CLI tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
