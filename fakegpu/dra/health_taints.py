"""Device health as NVIDIA's DRA driver publishes it: taints on the ResourceSlice devices, and the health the
DRA resource health stream reports, both from the same NVML events.

kubernetes-sigs/dra-driver-nvidia-gpu (``cmd/gpu-kubelet-plugin/device_health.go``, ``allocatable.go``,
``driver.go``; ``device_health_status.go`` on main), behind its ``NVMLDeviceHealthCheck`` gate (off: no
taints, no health stream):

- an XID on a GPU or MIG device taints it ``gpu.nvidia.com/xid=<XID>``: effect ``None`` for the XIDs the
  driver skips as application errors (13, 31, 43, 45, 68, 109 and ``ADDITIONAL_XIDS_TO_IGNORE``),
  ``NoSchedule`` for any other;
- ``ERROR_GPU_IS_LOST`` taints every device of the node ``gpu.nvidia.com/gpu-lost:NoSchedule`` (no value);
- a GPU whose events cannot be registered taints its devices ``gpu.nvidia.com/unmonitored:None``;
- one taint per key and device (``AddOrUpdateTaint``): a later event of the same key replaces the value and
  effect, except that a ``NoSchedule`` taint stays until the driver restarts (fakegpu: until ``fakegpu ctl
  health ... --healthy``). NVIDIA leaves ``timeAdded`` unset, so the API server stamps it.

A GPU fault (``fakegpu ctl gpu-fault``, ``fakegpu.sharing.gpu_faults``) reaches these rules only through the
health events it records: its XIDs (ECC errors as 94/95/48 and 63 or 92, NVLink as 74, off the bus as 79) and
``gpu-lost``. NVIDIA registers the ECC event types too but processes only XID critical errors, and reads no
temperature, power or fabric state here, so those kinds taint nothing; a recovery (``recover``, a GPU reset
included) removes no taint.

fakegpu keys its health by GPU and MIG UUID, so an XID on a GPU reaches its MIG devices too, and a dynamic
MIG device (no UUID until prepared) carries its GPU's taints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, Literal

from fakegpu.sharing.health import HealthEvent, XidPolicy
from fakegpu.sharing.live_inventory import LiveInventory, node_spec_events
from fakegpu.sharing.node import Node

TAINT_KEY_XID: Final = "gpu.nvidia.com/xid"
TAINT_KEY_GPU_LOST: Final = "gpu.nvidia.com/gpu-lost"
TAINT_KEY_UNMONITORED: Final = "gpu.nvidia.com/unmonitored"
UNKNOWN_XID: Final = "unknown"
"""The value of the XID taint of a device marked unhealthy without an XID (``fakegpu ctl health``)."""

Taint = dict[str, str]
"""A DeviceTaint as the API takes it: ``key``, ``value`` (left out when empty) and ``effect``."""
DeviceTaints = Mapping[str, tuple[Taint, ...]]
"""The taints of each GPU or MIG UUID that has any, in the order they were added."""
Health = Literal["Healthy", "Unhealthy", "Unknown"]


def event_taint(event: HealthEvent, policy: XidPolicy) -> Taint:
    """NVIDIA's ``healthEventToTaint``."""
    if event.kind == "gpu-lost":
        return {"key": TAINT_KEY_GPU_LOST, "effect": "NoSchedule"}
    if event.kind == "unmonitored":
        return {"key": TAINT_KEY_UNMONITORED, "effect": "None"}
    value = UNKNOWN_XID if event.xid is None else str(event.xid)
    fatal = event.forced or event.xid is None or policy.is_critical(event.xid)
    return {"key": TAINT_KEY_XID, "value": value, "effect": "NoSchedule" if fatal else "None"}


def taint_text(taint: Taint) -> str:
    """A taint as kubectl writes one: ``gpu.nvidia.com/xid=94:NoSchedule`` (no ``=`` without a value)."""
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint['key']}{value}:{taint['effect']}"


def add_or_update(taints: list[Taint], taint: Taint) -> None:
    """NVIDIA's ``AddOrUpdateTaint``: one taint per key; a ``NoSchedule`` one is never replaced."""
    for i, existing in enumerate(taints):
        if existing["key"] != taint["key"]:
            continue
        if existing.get("effect") != "NoSchedule":
            taints[i] = taint
        return
    taints.append(taint)


def folded_taints(events: Iterable[HealthEvent], policy: XidPolicy) -> tuple[Taint, ...]:
    """The taints a device ends up with after ``events``, oldest first."""
    taints: list[Taint] = []
    for event in events:
        add_or_update(taints, event_taint(event, policy))
    return tuple(taints)


def device_taints(events: Mapping[str, Iterable[HealthEvent]], policy: XidPolicy) -> dict[str, tuple[Taint, ...]]:
    """Every UUID's taints, for :func:`fakegpu.dra.resource_slices.build_slice_specs`."""
    out = {uuid: folded_taints(evs, policy) for uuid, evs in events.items()}
    return {uuid: taints for uuid, taints in out.items() if taints}


def device_health(events: Iterable[HealthEvent], policy: XidPolicy) -> tuple[Health, str]:
    """The health NVIDIA's driver streams for a device after ``events`` (``updateDeviceHealth``): a critical
    event makes it Unhealthy for good, a non-fatal XID Healthy with a message, an unmonitored GPU Unknown."""
    health: Health = "Healthy"
    message = ""
    for event in events:
        taint = event_taint(event, policy)
        if taint["effect"] == "NoSchedule":
            new: tuple[Health, str] = ("Unhealthy", _critical_message(event))
        elif event.kind == "xid":
            new = ("Healthy", f"non-fatal XID {event.xid} reported by NVML")
        else:
            new = ("Unknown", "device health is not monitored")
        if health != "Unhealthy":
            health, message = new
    return health, message


def _critical_message(event: HealthEvent) -> str:
    if event.kind == "gpu-lost":
        return "GPU is lost"
    if event.xid is None:
        return "marked unhealthy"
    return f"critical XID {event.xid} reported by NVML"


def published_taints(live: LiveInventory) -> dict[str, tuple[Taint, ...]]:
    """Every device's taints now, under the live XID policy (the slice builder publishes them only with the
    ``NVMLDeviceHealthCheck`` gate, ``SliceOptions.health_taints``)."""
    return device_taints(live.health_events(), live.xid_policy)


def node_spec_taints(node: Node, policy: XidPolicy) -> dict[str, tuple[Taint, ...]]:
    """The taints of a node spec's GPUs that start with an XID or unhealthy (``fakegpu slices``)."""
    return device_taints(node_spec_events(node), policy)
