"""The options of the daemons ``fakegpu demo``, ``plugin`` and ``dra`` (one ``add_*`` each).

Loaded only when one of them is on the command line (``fakegpu.cli.main``): the telemetry options load grpc
and prometheus_client. ``dra`` takes the node's GPUs but not the NVIDIA device plugin config, which it does
not read (``fakegpu.cli.inventory_options``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fakegpu.cli.consumable_shares_option import add_consumable_shares_option
from fakegpu.cli.inventory_options import add_inventory_options, add_node_inventory_options
from fakegpu.cli.kubelet_socket_option import add_kubelet_socket_option
from fakegpu.cli.node_options import add_node_options
from fakegpu.cli.nvidia_smi_command import add_inject_options
from fakegpu.cli.seconds_argument import seconds_from_zero
from fakegpu.cli.slice_commands import add_feature_gates_option, add_slice_options
from fakegpu.control.socket_paths import DEFAULT_DRA_SOCKET, DEFAULT_PLUGIN_SOCKET
from fakegpu.kube.client import KUBECONFIG_HELP
from fakegpu.runtime.boot_id import BOOT_ID_PATH
from fakegpu.runtime.kubelet_paths import DEFAULT_ROOT
from fakegpu.sharing.bug_modes import BUG_MODES
from fakegpu.telemetry.dcgm.endpoint import add_dcgm_options
from fakegpu.telemetry.health_endpoint import add_health_address_option
from fakegpu.telemetry.http_endpoint import add_metrics_address_option


def add_cdi_root_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--cdi-root``: where a daemon writes its CDI specs; a container runtime reads /var/run/cdi."""
    parser.add_argument(
        "--cdi-root", type=Path, default=Path("/var/run/cdi"), help=f"where {what} go (default %(default)s)"
    )


def add_admin_socket_option(parser: argparse.ArgumentParser, conventional: str) -> None:
    parser.add_argument(
        "--admin-socket",
        type=Path,
        default=None,
        metavar="PATH",
        help="serve an owner-only admin socket here for 'fakegpu ctl' (off unless given; "
        f"conventionally {conventional})",
    )


def add_telemetry_options(parser: argparse.ArgumentParser) -> None:
    add_metrics_address_option(parser)
    add_dcgm_options(parser)
    add_health_address_option(parser)


# --- one builder per command: it adds the command's options to its (already created) parser ------------


def add_demo(demo: argparse.ArgumentParser) -> None:
    add_inventory_options(demo)


def add_plugin(plugin: argparse.ArgumentParser) -> None:
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
    add_admin_socket_option(plugin, str(DEFAULT_PLUGIN_SOCKET))
    add_cdi_root_option(plugin, "the plugin's CDI specs (with a CDI deviceListStrategy)")
    plugin.add_argument(
        "--bug-compat",
        action="append",
        default=[],
        metavar="MODE",
        help="reproduce a known bug on purpose (repeatable): " + ", ".join(BUG_MODES),
    )
    add_node_options(plugin)
    add_telemetry_options(plugin)
    add_inject_options(plugin, "plugin")


def add_dra(dra: argparse.ArgumentParser) -> None:
    add_node_inventory_options(dra)
    add_slice_options(
        dra,
        api_version_default="discovered from the API server",
        server_version_default=None,
        version_from="the node's kubelet version",
    )
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
    dra.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
    dra.add_argument(
        "--boot-id-file",
        type=Path,
        default=BOOT_ID_PATH,
        help="the node's boot ID: prepared claims of an earlier boot are forgotten at start, as NVIDIA's "
        "checkpoint does; give a fake node a boot of its own here (default %(default)s)",
    )
    add_cdi_root_option(dra, "the claims' CDI specs")
    add_admin_socket_option(dra, str(DEFAULT_DRA_SOCKET))
    add_feature_gates_option(dra)
    dra.add_argument(
        "--additional-xids-to-ignore",
        default=None,
        metavar="XID,...",
        help="XIDs to treat as non-fatal besides 13, 31, 43, 45, 68 and 109 (env ADDITIONAL_XIDS_TO_IGNORE): with "
        "NVMLDeviceHealthCheck they taint a device with effect None instead of NoSchedule",
    )
    add_consumable_shares_option(dra)
    add_telemetry_options(dra)
    add_inject_options(dra, "dra")
    add_compute_domain_options(dra)


def add_compute_domain_options(dra: argparse.ArgumentParser) -> None:
    """NVIDIA's compute-domain kubelet plugin beside the GPU one (``fakegpu.dra.compute_domain``)."""
    group = dra.add_argument_group("compute domains (multi-node NVLink, IMEX)")
    group.add_argument(
        "--compute-domains",
        action="store_true",
        help="also run the compute-domain.nvidia.com kubelet plugin (IMEX channels for NVIDIA's ComputeDomains) "
        "and act as the node's IMEX daemon",
    )
    group.add_argument(
        "--namespace",
        default="fakegpu",
        help="the driver's namespace, where the ComputeDomainCliques live; the compute-domain controller's "
        "--namespace must match (default %(default)s)",
    )
    group.add_argument(
        "--imex-daemon-start-delay",
        type=seconds_from_zero,
        default=1.0,
        metavar="SECONDS",
        help="seconds from a node joining a ComputeDomain to its emulated IMEX daemon being Ready "
        "(default %(default)s)",
    )
    group.add_argument(
        "--gpu-clique-label-enabled",
        action="store_true",
        default=None,
        help="set the nvidia.com/gpu.clique node label (<cluster UUID>.<clique ID>) as NVIDIA's compute-domain "
        "plugin does with this flag (env GPU_CLIQUE_LABEL_ENABLED), refreshed every 10 minutes and removed on "
        "stop; off by default, where GPU Feature Discovery writes it",
    )
    group.add_argument(
        "--imex-mode",
        default=os.environ.get("IMEX_MODE", "driverManaged"),
        help="driverManaged (default: an emulated IMEX daemon per ComputeDomain) or hostManaged (env IMEX_MODE; "
        "needs --feature-gates HostManagedIMEXDaemon=true): no daemons, no node label, channel claims ask the "
        "host nvidia-imex daemon's socket whether it is READY",
    )
    group.add_argument(
        "--imex-isolation",
        default=os.environ.get("IMEX_ISOLATION", "domain"),
        help="IMEX isolation (env IMEX_ISOLATION): domain (default); channel is refused as NVIDIA refuses it",
    )
    group.add_argument(
        "--imex-host-socket-path",
        type=Path,
        default=Path(os.environ.get("IMEX_HOST_SOCKET_PATH", "/etc/nvidia-imex/imex_ctrl.sock")),
        help="the host nvidia-imex command socket the hostManaged readiness check queries (env "
        "IMEX_HOST_SOCKET_PATH, default %(default)s); fakegpu serves an emulated host daemon there",
    )
    group.add_argument(
        "--no-host-imex-daemon",
        action="store_true",
        help="in hostManaged mode, do not serve the emulated host daemon's socket (something else does)",
    )
