"""``fakegpu ctl``: talk to a running daemon's admin socket (health, XIDs, faults, plugin servers, status).

The socket is ``--socket PATH``, else ``$FAKEGPU_ADMIN_SOCKET``, else the conventional path for the
daemon (``/var/run/fakegpu/plugin.sock``, or ``/var/run/fakegpu/dra.sock`` with ``--dra``); a daemon
serves it only when started with ``--admin-socket PATH``. Exit status: 0 done, 1 the daemon refused
(or no daemon listens), 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from fakegpu.control.admin_socket import AdminError, admin_request

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

    def op(name: str, help_text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = ops.add_parser(name, help=help_text, description=help_text)
        parser.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
        return parser

    op("status", "resources, devices, health, faults and allocations of the daemon")

    health = op("health", "set a device's health directly, and recover it again")
    health.add_argument("target", help="device ID, GPU or MIG UUID, GPU index (or DRA device name)")
    state = health.add_mutually_exclusive_group(required=True)
    state.add_argument("--healthy", dest="healthy", action="store_const", const=True, help="mark healthy")
    state.add_argument("--unhealthy", dest="healthy", action="store_const", const=False, help="mark unhealthy")
    health.add_argument("--xid", type=int, default=None, help="the XID that made it unhealthy (with --unhealthy)")

    xid = op("xid", "an XID event on a device, honouring ignored XIDs and DP_* variables")
    xid.add_argument("target", help="device ID, GPU or MIG UUID, GPU index (or DRA device name)")
    xid.add_argument("xid", type=int, help="XID code, e.g. 79 (fallen off the bus) or 48 (double-bit ECC)")

    off = op("off-bus", "make a GPU fall off the bus (XID 79): it, its replicas and MIG devices unhealthy")
    off.add_argument("gpu", help="GPU index or UUID")

    fault = op("fault", "make the next calls of an RPC fail with a gRPC status, or take longer")
    fault.add_argument(
        "method",
        help="Allocate, GetPreferredAllocation, PreStartContainer, ListAndWatch, "
        "GetDevicePluginOptions, NodePrepareResources, NodeUnprepareResources",
    )
    fault.add_argument("--times", type=int, default=1, help="how many calls (default %(default)s)")
    fault.add_argument("--code", type=str.upper, default=None, help="gRPC status code name, e.g. INVALID_ARGUMENT")
    fault.add_argument("--message", default="", help="the status message")
    fault.add_argument("--delay", type=float, default=0.0, help="seconds each call takes first")
    fault.add_argument("--resource", default=None, help="only calls for this resource (DRA: driver name)")

    clear = op("clear-faults", "drop planned faults (all, or those of one RPC)")
    clear.add_argument("method", nargs="?", default=None)

    end = op("end-streams", "end the open ListAndWatch streams (the kubelet sees them end)")
    end.add_argument("--resource", default=None, help="only this resource's streams")

    plugins = op("plugins", "stop, start or restart the device plugin servers")
    plugins.add_argument("action", choices=("stop", "start", "restart"))

    op("reload", "rebuild the inventory from the daemon's input files")

    reconf = op("reconfigure", "change the GPUs, the MIG layout or the device IDs of the running daemon")
    reconf.add_argument("--gpus", default=None, help="the node's GPUs from now on, e.g. 4xh100-80gb")
    reconf.add_argument("--mig-layout", default=None, help="re-partition MIG: all-1g.10gb, all-balanced, ...")
    reconf.add_argument("--mig-strategy", default=None, choices=("none", "single", "mixed"))
    reconf.add_argument("--new-ids", action="store_true", help="restart the plugins with fresh device IDs")


def socket_path(args: argparse.Namespace, env: dict[str, str] | None = None) -> Path:
    environ = os.environ if env is None else env
    if args.socket:
        return Path(args.socket)
    if environ.get(SOCKET_ENV):
        return Path(environ[SOCKET_ENV])
    return DEFAULT_DRA_SOCKET if args.dra else DEFAULT_PLUGIN_SOCKET


def request_for(args: argparse.Namespace) -> dict[str, Any]:
    """The admin request for the parsed command line; optional fields only when given."""
    op: str = args.op
    request: dict[str, Any] = {"op": op}
    if op == "health":
        request.update(target=args.target, healthy=args.healthy)
        if args.xid is not None:
            request["xid"] = args.xid
    elif op == "xid":
        request.update(target=args.target, xid=args.xid)
    elif op == "off-bus":
        request["gpu"] = args.gpu
    elif op == "fault":
        request.update(method=args.method, times=args.times, message=args.message, delay=args.delay)
        if args.code is not None:
            request["code"] = args.code
        if args.resource is not None:
            request["resource"] = args.resource
    elif op == "clear-faults":
        if args.method is not None:
            request["method"] = args.method
    elif op == "end-streams":
        if args.resource is not None:
            request["resource"] = args.resource
    elif op == "plugins":
        request["action"] = args.action
    elif op == "reconfigure":
        for key in ("gpus", "mig_layout", "mig_strategy"):
            if getattr(args, key) is not None:
                request[key] = getattr(args, key)
        if args.new_ids:
            request["new_ids"] = True
    return request


def run_ctl(args: argparse.Namespace) -> int:
    path = socket_path(args)
    try:
        result = asyncio.run(admin_request(path, request_for(args), timeout=args.timeout))
    except AdminError as exc:
        print(f"fakegpu: error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if args.output == "json":
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    elif args.op == "status":
        sys.stdout.write(render_status(result))
    else:
        sys.stdout.write(summary(args, result) + "\n")
    return 0


# --- rendering ------------------------------------------------------------------------------------------


def _list(ids: list[str], limit: int = 8) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def summary(args: argparse.Namespace, result: Any) -> str:
    op = args.op
    if op == "health":
        if not result:
            return f"no device changed: {args.target} was already {'healthy' if args.healthy else 'unhealthy'}"
        how = "healthy" if args.healthy else "unhealthy" + (f" (XID {args.xid})" if args.xid is not None else "")
        return f"marked {len(result)} device(s) {how}: {_list(result)}"
    if op == "xid":
        if not result:
            return (
                f"no device changed: XID {args.xid} is ignored by the daemon's health policy "
                "(or the devices were already unhealthy)"
            )
        return f"XID {args.xid} on {args.target}: {len(result)} device(s) unhealthy: {_list(result)}"
    if op == "off-bus":
        if not result:
            return (
                "no device changed: XID 79 is ignored by the daemon's health policy (or the GPU was already unhealthy)"
            )
        return f"GPU {args.gpu} fell off the bus (XID 79): {len(result)} device(s) unhealthy: {_list(result)}"
    if op == "fault":
        parts = [f"take {result['delay']:g}s"] if result["delay"] else []
        if result["code"]:
            parts.append(f"fail with {result['code']}: {result['message']}")
        scope = f" for {result['resource']}" if result["resource"] else ""
        return f"planned: the next {result['times']} {result['method']} call(s){scope} {' then '.join(parts)}"
    if op == "clear-faults":
        return f"cleared {result} planned fault(s)"
    if op == "end-streams":
        return f"ended {result} ListAndWatch stream(s)"
    if op == "plugins":
        done = {"stop": "stopped", "start": "started", "restart": "restarted"}[args.action]
        serving = ", ".join(result["serving"]) or "nothing"
        return f"plugins {done}; serving {serving}" if args.action != "stop" else "plugins stopped"
    if op == "reload":
        return f"reloaded; serving {', '.join(result['serving']) or 'nothing'}"
    if op == "reconfigure":
        return f"reconfigured: {result['gpus']} GPU(s); serving {', '.join(result['serving']) or 'nothing'}"
    return json.dumps(result)


def _health(healthy: bool, xid: int | None) -> str:
    if healthy:
        return "Healthy"
    return "Unhealthy" + (f" (XID {xid})" if xid is not None else "")


def _faults(faults: dict[str, Any]) -> list[str]:
    lines = []
    pending = faults.get("pending", [])
    if not pending:
        lines.append("Faults: none planned")
    else:
        lines.append("Faults planned:")
        for f in pending:
            what = f"fail with {f['code']}: {f['message']}" if f["code"] else ""
            delay = f"take {f['delay']:g}s" if f["delay"] else ""
            scope = f" ({f['resource']})" if f["resource"] else ""
            lines.append(f"  {f['method']}{scope} x{f['remaining']}: {' then '.join(p for p in (delay, what) if p)}")
    fired = faults.get("fired", [])
    if fired:
        lines.append(f"Faults fired: {len(fired)}")
        for f in fired[-10:]:
            lines.append(f"  {f['method']}: {f['what']}")
    return lines


def _gpus(gpus: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'GPU':<4} {'UUID':<42} {'MODEL':<28} HEALTH"]
    for g in gpus:
        lines.append(f"{g['index']:<4} {g['uuid']:<42} {g['model']:<28} {_health(g['healthy'], g['xid'])}")
    return lines


def render_status(status: dict[str, Any]) -> str:
    if status.get("kind") == "dra":
        return _render_dra(status)
    return _render_plugin(status)


def _render_plugin(status: dict[str, Any]) -> str:
    state = "running" if status["running"] else "stopped"
    lines = [f"Node {status['node']}: device plugin daemon, plugin servers {state}", ""]
    lines.append(f"{'RESOURCE':<34} {'CAPACITY':>8} {'HEALTHY':>8}  {'REGISTERED':<10} {'STREAMS':>7}")
    for r in status["resources"]:
        registered = "yes" if r["registered"] else ("no" if r["serving"] else "not served")
        lines.append(f"{r['name']:<34} {r['capacity']:>8} {r['healthy']:>8}  {registered:<10} {r['streams']:>7}")
    lines.append("")
    lines.extend(_gpus(status["gpus"]))
    for r in status["resources"]:
        lines.append("")
        lines.append(f"{r['name']}:")
        lines.append(f"  {'ID':<48} HEALTH")
        for d in r["devices"]:
            lines.append(f"  {d['id']:<48} {d['health']}")
    lines.append("")
    lines.extend(_faults(status["faults"]))
    allocations = status.get("allocations", [])
    if allocations:
        lines.append(f"Allocations seen (last {len(allocations)}):")
        for a in allocations:
            lines.append(f"  {a['resource']}: {', '.join(a['ids'])}")
    stats = status["stats"]
    lines.append(
        f"Registrations {stats['registrations']}, failures {stats['registration_failures']}, "
        f"restarts {stats['restarts']}, reloads {stats['reloads']}"
    )
    if stats["reload_errors"]:
        lines.append(f"Last reload error: {stats['reload_errors'][-1]}")
    return "\n".join(lines) + "\n"


def _render_dra(status: dict[str, Any]) -> str:
    slices = status["slices"]
    lines = [
        f"Node {status['node']}: DRA driver {status['driver']} ({status['mig_mode']} MIG)",
        f"ResourceSlices: {slices['count']} published, pool generation {slices['generation']}, "
        f"{slices['publishes']} publish(es)",
    ]
    lines.extend(f"  error: {e}" for e in slices["errors"])
    lines.append("")
    lines.extend(_gpus(status["gpus"]))
    lines.append("")
    lines.append(f"{'DEVICE':<34} {'HEALTH':<10} MESSAGE")
    for d in status["devices"]:
        lines.append(f"{d['name']:<34} {'Healthy' if d['healthy'] else 'Unhealthy':<10} {d['message']}".rstrip())
    lines.append("")
    if status["checkpoint_error"]:
        lines.append(f"Checkpoint unreadable: {status['checkpoint_error']}")
    if not status["prepared"]:
        lines.append("Prepared claims: none")
    else:
        lines.append(f"{'CLAIM':<40} {'UID':<38} {'STATE':<16} DEVICES")
        for c in status["prepared"]:
            claim = f"{c['namespace']}/{c['name']}"
            lines.append(f"{claim:<40} {c['uid']:<38} {c['state']:<16} {', '.join(c['devices'])}")
    lines.append(f"Prepares {status['prepares']}, unprepares {status['unprepares']}")
    lines.extend(_faults(status["faults"]))
    return "\n".join(lines) + "\n"
