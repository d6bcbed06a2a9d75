"""What the long-running ``fakegpu`` commands do once parsed: ``demo``, ``plugin``, ``dra`` (``kubelet`` has
its own module, ``fakegpu.cli.kubelet_command``).

Loaded only when one of them runs (``fakegpu.cli.main``), so nothing else pays for grpc and lightkube.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping
from dataclasses import replace

from fakegpu.cli.consumable_shares_option import consumable_shares
from fakegpu.cli.demo_command import run_demo
from fakegpu.cli.inventory_options import inventory_inputs
from fakegpu.cli.kubelet_socket_option import kubelet_target
from fakegpu.cli.node_options import node_settings
from fakegpu.cli.nvidia_smi_command import apply_inject_flags
from fakegpu.cli.slice_commands import check_api_version_served, dra_feature_gates
from fakegpu.dra.compute_domain.fabric_clique import FabricError
from fakegpu.dra.compute_domain.host_imex import validate_imex_config
from fakegpu.dra.compute_domain.kubelet_plugin import ComputeDomainSettings
from fakegpu.dra.daemon import DraSettings, run_dra_daemon
from fakegpu.fakeplugin.daemon import run_plugin_daemon
from fakegpu.runtime.bounded_run import run_bounded
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.bug_modes import parse_bug_modes
from fakegpu.sharing.plugin_config import parse_go_bool
from fakegpu.telemetry.dcgm.endpoint import dcgm_address
from fakegpu.telemetry.health_endpoint import health_address
from fakegpu.telemetry.http_endpoint import metrics_address
from fakegpu.telemetry.telemetry_settings import TelemetrySettings


def telemetry_settings(args: argparse.Namespace) -> TelemetrySettings:
    """The five telemetry flags ``plugin`` and ``dra`` share (``add_telemetry_options``)."""
    return TelemetrySettings(
        metrics_address(args),
        dcgm_address(args),
        args.dcgm_kubernetes_virtual_gpus,
        args.dcgm_seed,
        health_address=health_address(args),
    )


def run_demo_command(args: argparse.Namespace) -> int:
    return asyncio.run(run_demo(inventory_inputs(args), sys.stdout))


def run_plugin(args: argparse.Namespace) -> int:
    inputs = apply_inject_flags(args, inventory_inputs(args))
    paths, registration = kubelet_target(args.kubelet_socket, args.kubelet_dir, args.registration, os.environ)
    return run_bounded(
        run_plugin_daemon(
            inputs,
            paths,
            registration=registration,
            pre_start_required=args.pre_start_required,
            bug_modes=parse_bug_modes(args.bug_compat),
            admin_socket=args.admin_socket,
            telemetry=telemetry_settings(args),
            node=node_settings(args),
            cdi_root=args.cdi_root,
        )
    )


def gpu_clique_label(args: argparse.Namespace, env: Mapping[str, str]) -> bool:
    """``--gpu-clique-label-enabled``, else ``GPU_CLIQUE_LABEL_ENABLED`` read as NVIDIA's urfave/cli reads a bool
    (Go's ``strconv.ParseBool``: a value it does not know is an error, not false)."""
    if args.gpu_clique_label_enabled is not None:
        return bool(args.gpu_clique_label_enabled)
    raw = env.get("GPU_CLIQUE_LABEL_ENABLED")
    return raw is not None and parse_go_bool(raw, "GPU_CLIQUE_LABEL_ENABLED")


def run_dra(args: argparse.Namespace) -> int:
    inputs = apply_inject_flags(args, inventory_inputs(args))
    if args.additional_xids_to_ignore is not None:  # NVIDIA's flag wins over its environment variable
        inputs = replace(inputs, env={**inputs.env, "ADDITIONAL_XIDS_TO_IGNORE": args.additional_xids_to_ignore})
    gates, mig_mode = dra_feature_gates(args, os.environ)
    shares = consumable_shares(args, os.environ, gates)
    if args.server_version is not None and args.resource_api_version is not None:
        check_api_version_served(args.resource_api_version, args.server_version, given=True)
    if args.compute_domains:  # NVIDIA's compute-domain plugin checks these first thing; before any client here too
        validate_imex_config(args.imex_mode, args.imex_isolation, gates.enabled("HostManagedIMEXDaemon"))
    settings = DraSettings(
        driver=args.driver_name,
        mig_mode=mig_mode,
        feature_gates=gates,
        consumable_shares=shares,
        cdi_root=args.cdi_root,
        boot_id_file=args.boot_id_file,
        kubeconfig=args.kubeconfig,
        server_minor=args.server_version,
        api_version=args.resource_api_version,
        compute_domains=ComputeDomainSettings(
            args.namespace,
            args.imex_daemon_start_delay,
            gpu_clique_label=gpu_clique_label(args, os.environ),
            imex_mode=args.imex_mode,
            imex_isolation=args.imex_isolation,
            imex_host_socket=args.imex_host_socket_path,
            serve_host_imex=not args.no_host_imex_daemon,
        )
        if args.compute_domains
        else None,
    )
    paths = KubeletPaths(args.kubelet_dir, registry_dir=args.plugins_registry_dir, plugins_dir=args.plugins_dir)
    try:
        return run_bounded(
            run_dra_daemon(inputs, paths, settings, admin_socket=args.admin_socket, telemetry=telemetry_settings(args))
        )
    except FabricError as exc:  # NVIDIA's compute-domain plugin exits 1 with this line (CrashOnNVLinkFabricErrors)
        print(f"Error: {exc}", file=sys.stderr)
        return 1
