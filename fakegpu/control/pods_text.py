"""The kubelet emulator's pods as ``fakegpu ctl pods`` prints them: per pod and container, the devices
and what the plugins answered in Allocate (envs, mounts, device nodes, CDI devices), and the health the
kubelet shows in the container's ``allocatedResourcesStatus`` (one line per resource ID: entry, ID, health,
the driver's message); per ResourceClaim the CDI devices its drivers prepared, and why the claims could not
be prepared yet."""

from __future__ import annotations

from typing import Any


def _requests(requests: dict[str, int]) -> str:
    return ", ".join(f"{r}={n}" for r, n in sorted(requests.items())) or "no devices"


def _health_lines(statuses: Any) -> list[str]:
    """``health   <entry> <resource ID>: <health> (<message>)`` per resource of ``allocatedResourcesStatus``."""
    lines = []
    for entry in statuses:
        for r in entry.get("resources") or []:
            message = f" ({r['message']})" if r.get("message") else ""
            lines.append(f"    health   {entry['name']} {r['resourceID']}: {r['health']}{message}")
    return lines


def render_pod(pod: dict[str, Any]) -> str:
    """One pod: a heading line, then each container's devices and what it gets (no final newline)."""
    state = pod["phase"] + (f" ({pod['reason']}: {pod['message']})" if pod["reason"] else "")
    restored = ", restored after a restart" if pod["restored"] else ""
    lines = [f"pod {pod['namespace']}/{pod['name']}  {state}  uid {pod['uid']}{restored}"]
    for c in pod["containers"]:
        lines.append(f"  {c['name']} ({c['kind']}): {_requests(c['requests'])}")
        unhealthy = set(c.get("unhealthy", ()))
        for resource, ids in sorted(c["devices"].items()):
            shown = [i + (" (unhealthy)" if i in unhealthy else "") for i in ids]
            lines.append(f"    devices  {resource}: {', '.join(shown)}")
        lines.extend(f"    env      {k}={v}" for k, v in c["envs"].items())
        for m in c["mounts"]:
            lines.append(f"    mount    {m['host_path']} -> {m['container_path']}{' (ro)' if m['read_only'] else ''}")
        for d in c["device_nodes"]:
            lines.append(f"    device   {d['host_path']} -> {d['container_path']} ({d['permissions']})")
        lines.extend(f"    cdi      {name}" for name in c["cdi_devices"])
        lines.extend(_health_lines(c.get("allocatedResourcesStatus", ())))
    for claim in pod.get("claims", ()):
        done = "prepared" if claim["prepared"] else "not prepared"
        drivers = ", ".join(claim["drivers"]) or "drivers from the API server"
        uid = claim["uid"] or "uid from the API server"
        lines.append(f"  claim {claim['namespace']}/{claim['name']} ({uid}): {drivers}, {done}")
        lines.extend(f"    cdi      {name}" for name in claim["cdi_devices"])
    if pod.get("prepare_error"):
        attempts = pod.get("prepare_attempts", 0)
        lines.append(f"  FailedPrepareDynamicResources (attempt {attempts}): {pod['prepare_error']}")
    return "\n".join(lines)


def render_pods(pods: list[dict[str, Any]]) -> str:
    """Every pod, blank lines between them; one line when there is none."""
    if not pods:
        return "no pods (fakegpu ctl run-pod NAME --request nvidia.com/gpu=1 runs one)"
    return "\n\n".join(render_pod(p) for p in pods)
