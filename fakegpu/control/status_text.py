"""``fakegpu ctl status`` as text: the status answer of a device plugin, DRA or kubelet emulator daemon, as tables."""

from __future__ import annotations

from typing import Any

from fakegpu.control.pods_text import render_pods
from fakegpu.sharing.faults import FaultSpec


def _health(healthy: bool, xid: int | None, cause: str | None = None) -> str:
    """``Unhealthy (lost, XID 63)``: the cause first, then the last XID."""
    if healthy:
        return "Healthy"
    why = [w for w in (cause, None if xid is None else f"XID {xid}") if w]
    return "Unhealthy" + (f" ({', '.join(why)})" if why else "")


def _faults(faults: dict[str, Any]) -> list[str]:
    lines = []
    pending = faults.get("pending", [])
    if not pending:
        lines.append("Faults: none planned")
    else:
        lines.append("Faults planned:")
        for f in pending:
            scope = f" ({f['resource']})" if f["resource"] else ""
            passing = f" after {f['after']} more call(s)" if f.get("after") else ""
            effect = FaultSpec.shown(f).effect(f["message"])
            lines.append(f"  {f['method']}{scope} x{f['remaining']}{passing}: {effect}")
    fired = faults.get("fired", [])
    if fired:
        lines.append(f"Faults fired: {len(fired)}")
        for f in fired[-10:]:
            lines.append(f"  {f['method']}: {f['what']}")
    return lines


def _gpus(gpus: list[dict[str, Any]]) -> list[str]:
    lines = [f"{'GPU':<4} {'UUID':<42} {'MODEL':<28} HEALTH"]
    for g in gpus:
        health = _health(g["healthy"], g["xid"], g.get("cause"))
        lines.append(f"{g['index']:<4} {g['uuid']:<42} {g['model']:<28} {health}")
    return lines


def _gpu_faults(status: dict[str, Any]) -> list[str]:
    """Each faulted GPU's faults and readings, and the faults still armed (none: no lines)."""
    faults = status.get("gpu_faults") or {}
    lines = []
    for c in faults.get("conditions", ()):
        kinds = ", ".join(c["kinds"]) or "none"
        xids = ", ".join(f"{x['xid']} {x['class']}" for x in c.get("xids", ()))
        lines.append(f"GPU {c['index']}: faults {kinds}; {c['summary']}" + (f"; XIDs {xids}" if xids else ""))
    for a in faults.get("armed", ()):
        lines.append(f"GPU {a['index']} armed: {a['fault']}: strikes when {a['calls_left']} more call(s) use it")
    return lines


def render_status(status: dict[str, Any]) -> str:
    """The ``status`` answer of either daemon as the tables ``fakegpu ctl status`` prints (no final newline)."""
    if status.get("kind") == "dra":
        return _render_dra(status)
    if status.get("kind") == "kubelet":
        return _render_kubelet(status)
    return _render_plugin(status)


def _plugin_state(r: dict[str, Any], grace_period: float) -> str:
    if r["registered"]:
        return "registered"
    if r["gone_for"] is None:
        return "not registered"
    return f"gone {r['gone_for']:.0f}s (dropped after {grace_period:g}s)"


def _render_kubelet(status: dict[str, Any]) -> str:
    state = "running" if status["running"] else "stopped"
    lines = [f"Kubelet emulator in {status['root']}: {state}, started {status['starts']} time(s)", ""]
    if not status["resources"]:
        lines.append("No extended resources: no device plugin has registered")
    else:
        lines.append(f"{'RESOURCE':<34} {'CAPACITY':>8} {'ALLOCATABLE':>11} {'IN USE':>6}  PLUGIN")
        for r in status["resources"]:
            lines.append(
                f"{r['name']:<34} {r['capacity']:>8} {r['allocatable']:>11} {r['in_use']:>6}  "
                f"{_plugin_state(r, status['grace_period'])}"
            )
    for driver, plugins in status.get("dra_drivers", {}).items():
        lines.extend(f"DRA driver {driver}: {p['service']} at {p['endpoint']}" for p in plugins)
    for c in status.get("claims", ()):
        users = f"{len(c['pods'])} pod(s)" if c["pods"] else "no pods, to unprepare"
        state = "prepared" if c["prepared"] else "not prepared"
        lines.append(f"claim {c['namespace']}/{c['name']} ({c['uid']}): {state}, {users}")
    if status.get("unprepare_error"):
        lines.append(f"unprepare failed, retrying: {status['unprepare_error']}")
    lines.append("")
    lines.append(render_pods(status["pods"]))
    return "\n".join(lines)


def _render_plugin(status: dict[str, Any]) -> str:
    state = "running" if status["running"] else "stopped"
    lines = [f"Node {status['node']}: device plugin daemon, plugin servers {state}", ""]
    lines.append(f"{'RESOURCE':<34} {'CAPACITY':>8} {'HEALTHY':>8}  {'REGISTERED':<10} {'STREAMS':>7}")
    for r in status["resources"]:
        registered = "yes" if r["registered"] else ("no" if r["serving"] else "not served")
        lines.append(f"{r['name']:<34} {r['capacity']:>8} {r['healthy']:>8}  {registered:<10} {r['streams']:>7}")
    lines.append("")
    lines.extend(_gpus(status["gpus"]))
    lines.extend(_gpu_faults(status))
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
        lines.append(f"Allocate calls received (last {len(allocations)}):")
        for a in allocations:
            lines.append(f"  {a['resource']}: {', '.join(a['ids'])}")
    stats = status["stats"]
    lines.append(
        f"Registrations {stats['registrations']}, failures {stats['registration_failures']}, "
        f"restarts {stats['restarts']}, reloads {stats['reloads']}"
    )
    if stats["reload_errors"]:
        lines.append(f"Last reload error: {stats['reload_errors'][-1]}")
    return "\n".join(lines)


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
    lines.extend(_gpu_faults(status))
    lines.append("")
    if status.get("health_published") is False:
        lines.append("Device health: NVMLDeviceHealthCheck is off, so no taints and no health stream are published")
    lines.append(f"{'DEVICE':<34} {'HEALTH':<10} MESSAGE")
    for d in status["devices"]:
        health = d.get("health", "Healthy" if d["healthy"] else "Unhealthy")
        lines.append(f"{d['name']:<34} {health:<10} {d['message']}".rstrip())
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
    return "\n".join(lines)
