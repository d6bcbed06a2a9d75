"""``fakegpu ctl``: talk to a running daemon's admin socket (health, XIDs, faults, plugin servers, status).

The socket is ``--socket PATH``, else ``$FAKEGPU_ADMIN_SOCKET``, else the conventional path for the
daemon (``/var/run/fakegpu/plugin.sock``, or ``/var/run/fakegpu/dra.sock`` with ``--dra``); a daemon
serves it only when started with ``--admin-socket PATH``. The subcommands are the admin ops of
``fakegpu.control.operations``. Exit status: 0 done, 1 the daemon refused (or no daemon listens), 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from fakegpu.control.client import admin_request
from fakegpu.control.operations import BY_NAME, OPERATIONS
from fakegpu.control.protocol import AdminError
from fakegpu.dra.admin_ops import DRA_FAULTS
from fakegpu.fakeplugin.admin_ops import DEVICE_PLUGIN_FAULTS

DEFAULT_PLUGIN_SOCKET = Path("/var/run/fakegpu/plugin.sock")
DEFAULT_DRA_SOCKET = Path("/var/run/fakegpu/dra.sock")
SOCKET_ENV = "FAKEGPU_ADMIN_SOCKET"
EXIT_REFUSED = 1

_EPILOG = """examples:
  fakegpu ctl status
  fakegpu ctl health 3 --unhealthy --xid 79     (device ID, GPU/MIG UUID or GPU index)
  fakegpu ctl health GPU-... --healthy
  fakegpu ctl xid 3 79                          (honours ignored XIDs and DP_* variables)
  fakegpu ctl off-bus 3
  fakegpu ctl fault Allocate --times 2 --code INVALID_ARGUMENT --message "..."
  fakegpu ctl clear-faults
  fakegpu ctl end-streams --resource nvidia.com/gpu
  fakegpu ctl plugins restart
  fakegpu ctl reload
  fakegpu ctl reconfigure --gpus 4xh100-80gb --mig-layout all-1g.10gb --mig-strategy mixed
  fakegpu ctl reconfigure --new-ids
  fakegpu ctl --dra status"""


def _faultable_rpcs() -> str:
    """The RPCs ``fault`` can name, per face."""
    return "; ".join(f"{f.face.removeprefix('the ')}: {', '.join(f.rpcs)}" for f in (DEVICE_PLUGIN_FAULTS, DRA_FAULTS))


def add_ctl_parser(sub: Any) -> None:
    """Add ``ctl`` to the ``fakegpu`` subcommands (``sub`` is the subparsers action)."""
    ctl = sub.add_parser(
        "ctl",
        help="talk to a running daemon's admin socket: health, faults, status",
        description="Talk to a running fakegpu daemon through its admin socket (daemons serve one when "
        "started with --admin-socket PATH).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ctl.add_argument(
        "--socket",
        metavar="PATH",
        default=None,
        help=f"the daemon's admin socket (default: ${SOCKET_ENV}, then {DEFAULT_PLUGIN_SOCKET}, "
        f"or {DEFAULT_DRA_SOCKET} with --dra)",
    )
    ctl.add_argument("--dra", action="store_true", help=f"talk to the DRA daemon's default socket {DEFAULT_DRA_SOCKET}")
    ctl.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the daemon (default %(default)s)")
    ops = ctl.add_subparsers(dest="op", required=True, metavar="OP")
    help_values = {"faultable_rpcs": _faultable_rpcs()}
    for operation in OPERATIONS:
        operation.add_to(ops, help_values)


def socket_path(args: argparse.Namespace, env: dict[str, str] | None = None) -> Path:
    environ = os.environ if env is None else env
    if args.socket:
        return Path(args.socket)
    if environ.get(SOCKET_ENV):
        return Path(environ[SOCKET_ENV])
    return DEFAULT_DRA_SOCKET if args.dra else DEFAULT_PLUGIN_SOCKET


def run_ctl(args: argparse.Namespace) -> int:
    operation = BY_NAME[args.op]
    request = operation.request(args)
    try:
        result = asyncio.run(admin_request(socket_path(args), request, timeout=args.timeout))
    except AdminError as exc:
        print(f"fakegpu: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if args.output == "json":
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        sys.stdout.write(operation.summary(request, result) + "\n")
    return 0
