"""``fakegpu ctl``: talk to a running daemon's admin socket (health, XIDs, faults, plugin servers, status,
and the kubelet emulator's pods, restarts and clock).

Which socket: ``--socket PATH``; else for the kubelet emulator (``--kubelet``, ``--kubelet-dir DIR``, or an
op only it serves: ``run-pod``, ``pods``, ...) ``DIR/fakegpu-kubelet.sock``, which ``fakegpu kubelet
--kubelet-dir DIR`` serves by default; else ``$FAKEGPU_ADMIN_SOCKET``, else the device plugin's
``/var/run/fakegpu/plugin.sock`` (``/var/run/fakegpu/dra.sock`` with ``--dra``), which ``fakegpu plugin``
and ``fakegpu dra`` serve only when started with ``--admin-socket PATH``. The subcommands are the admin ops
of ``fakegpu.control.operations``. Exit status: 0 done, 1 the daemon refused, 2 bad usage, 3 no daemon
listens (``EXIT_NO_DAEMON``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fakegpu.cli.yaml_output import dump_yaml
from fakegpu.control.client import EXIT_NO_DAEMON, NoDaemonError, admin_request
from fakegpu.control.operations import BY_NAME, OPERATIONS, Operation
from fakegpu.control.protocol import AdminError
from fakegpu.control.socket_paths import DEFAULT_DRA_SOCKET, DEFAULT_PLUGIN_SOCKET
from fakegpu.dra.admin_ops import DRA_FAULTS
from fakegpu.fakeplugin.admin_ops import DEVICE_PLUGIN_FAULTS
from fakegpu.kubelet.admin_socket import KUBELET_ADMIN_SOCKET, default_admin_socket
from fakegpu.runtime.kubelet_paths import DEFAULT_ROOT

SOCKET_ENV = "FAKEGPU_ADMIN_SOCKET"
EXIT_REFUSED = 1
EXIT_USAGE = 2

_EPILOG = f"""examples:
  fakegpu ctl status
  fakegpu ctl health 3 --unhealthy --xid 79     (device ID, GPU/MIG UUID or GPU index)
  fakegpu ctl health GPU-... --healthy
  fakegpu ctl xid 3 79                          (honours ignored XIDs and DP_* variables)
  fakegpu ctl off-bus 3
  fakegpu ctl gpu-fault ecc-uncorrectable --gpu 3 --count 2 (XID 94, 63: devices unhealthy, taints)
  fakegpu ctl gpu-fault xid --gpu 3 --xid 13                  (an application XID: class shown)
  fakegpu ctl gpu-fault thermal --gpu 0 --temperature 95 --after-calls 2
  fakegpu ctl recover --gpu 0 thermal                         (thermal, power, fabric or reset)
  fakegpu ctl fault Allocate --times 2 --code INVALID_ARGUMENT --message "..."
  fakegpu ctl fault NodePrepareResources --after 3 --code UNAVAILABLE
  fakegpu ctl clear-faults
  fakegpu ctl end-streams --resource nvidia.com/gpu
  fakegpu ctl plugins restart
  fakegpu ctl reload
  fakegpu ctl reconfigure --gpus 4xh100-80gb --mig-layout all-1g.10gb --mig-strategy mixed
  fakegpu ctl reconfigure --new-ids
  fakegpu ctl --dra status

the kubelet emulator (fakegpu kubelet --kubelet-dir DIR serves DIR/{KUBELET_ADMIN_SOCKET}):
  fakegpu ctl --kubelet-dir DIR run-pod train --request nvidia.com/gpu=2
  fakegpu ctl --kubelet-dir DIR run-pod job --init-request nvidia.com/gpu=1 --request nvidia.com/gpu=1
  fakegpu ctl --kubelet-dir DIR run-pod infer --claim default/gpu-claim/UID=gpu.nvidia.com
  fakegpu ctl --kubelet-dir DIR pods -o yaml
  fakegpu ctl --kubelet-dir DIR status
  fakegpu ctl --kubelet-dir DIR restart-kubelet
  fakegpu ctl --kubelet-dir DIR advance-clock 300
  fakegpu ctl --kubelet-dir DIR delete-pod train

exit status: 0 done, 1 the daemon refused, 2 bad usage, {EXIT_NO_DAEMON} no daemon listens"""


def _faultable_rpcs() -> str:
    """The RPCs ``fault`` can name, per face."""
    return "; ".join(f"{f.face.removeprefix('the ')}: {', '.join(f.rpcs)}" for f in (DEVICE_PLUGIN_FAULTS, DRA_FAULTS))


def add_ctl_parser(sub: Any) -> None:
    """Add ``ctl`` to the ``fakegpu`` subcommands (``sub`` is the subparsers action)."""
    ctl = sub.add_parser(
        "ctl",
        help="talk to a running daemon's admin socket: health, faults, status, the kubelet emulator's pods",
        description="Talk to a running fakegpu daemon through its admin socket (fakegpu plugin and fakegpu dra "
        f"serve one when started with --admin-socket PATH; fakegpu kubelet serves KUBELET_DIR/{KUBELET_ADMIN_SOCKET}).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ctl.add_argument(
        "--socket",
        metavar="PATH",
        default=None,
        help=f"the daemon's admin socket (default: the kubelet's with --kubelet/--kubelet-dir or a kubelet op, "
        f"else ${SOCKET_ENV}, then {DEFAULT_PLUGIN_SOCKET}, or {DEFAULT_DRA_SOCKET} with --dra)",
    )
    target = ctl.add_mutually_exclusive_group()
    target.add_argument(
        "--dra", action="store_true", help=f"talk to the DRA daemon's default socket {DEFAULT_DRA_SOCKET}"
    )
    target.add_argument(
        "--kubelet",
        action="store_true",
        help=f"talk to the kubelet emulator's default socket {default_admin_socket(DEFAULT_ROOT)}",
    )
    target.add_argument(
        "--kubelet-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"talk to the kubelet emulator serving DIR: its socket DIR/{KUBELET_ADMIN_SOCKET}",
    )
    ctl.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the daemon (default %(default)s)")
    ops = ctl.add_subparsers(dest="op", required=True, metavar="OP")
    help_values = {"faultable_rpcs": _faultable_rpcs()}
    for operation in OPERATIONS:
        operation.add_to(ops, help_values)


def _wants_kubelet(args: argparse.Namespace) -> bool:
    return bool(args.kubelet or args.kubelet_dir is not None or BY_NAME[args.op].kubelet)


def socket_path(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if env is None else env
    if args.socket:
        return Path(args.socket)
    if _wants_kubelet(args):
        return default_admin_socket(args.kubelet_dir or DEFAULT_ROOT)
    if environ.get(SOCKET_ENV):
        return Path(environ[SOCKET_ENV])
    return DEFAULT_DRA_SOCKET if args.dra else DEFAULT_PLUGIN_SOCKET


def how_to_start(args: argparse.Namespace, path: Path) -> str:
    """The command that serves an admin socket at ``path`` for the daemon ``args`` aim at."""
    if _wants_kubelet(args):
        if path.name == KUBELET_ADMIN_SOCKET:
            return f"fakegpu kubelet --kubelet-dir {path.parent}"
        return f"fakegpu kubelet --kubelet-dir DIR --admin-socket {path}"
    return f"fakegpu {'dra' if args.dra else 'plugin'} --admin-socket {path}"


def _print(operation: Operation, request: dict[str, Any], result: Any, output: str) -> None:
    if output == "json":
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    elif output == "yaml":
        sys.stdout.write(dump_yaml(result))
    else:
        sys.stdout.write(operation.summary(request, result) + "\n")


def run_ctl(args: argparse.Namespace) -> int:
    operation = BY_NAME[args.op]
    request = operation.request(args)
    if operation.check is not None:
        try:
            operation.check(request)
        except ValueError as exc:
            print(f"fakegpu: error: {operation.name}: {exc}", file=sys.stderr)
            return EXIT_USAGE
    path = socket_path(args)
    try:
        result = asyncio.run(admin_request(path, request, timeout=args.timeout))
    except NoDaemonError as exc:
        print(f"fakegpu: error: {exc}; start one with an admin socket: {how_to_start(args, path)}", file=sys.stderr)
        return EXIT_NO_DAEMON
    except AdminError as exc:
        print(f"fakegpu: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    _print(operation, request, result, args.output)
    return 0
