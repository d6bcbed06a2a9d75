"""What a node-problem reporter would say about a GPU fault: the notices fakegpu turns into Node Events.

The live inventory keeps what faults did (``LiveInventory.conditions()``: each GPU's condition and the kinds
still on it; ``health_events()``: what NVML told the drivers, oldest first). Two snapshots of those, taken
before and after a change, give the notices: a kind that appeared on a GPU is a fault (a Warning), a kind
that went away is a recovery (Normal), and a health event that came without a new kind (a second XID, the
node-wide ``gpu-lost``, a GPU marked unhealthy by ``fakegpu ctl health``) is a fault of its own. Because the
notices come from the inventory's state and not from the command that changed it, a fault reported by any
path (``fakegpu ctl``, a scenario step, an ``after_calls`` trigger, a reload) is reported alike.

Reasons follow NVIDIA NVSentinel's platform connector (``platform-connectors/pkg/connectors/kubernetes/
process_node_events.go`` at commit 033cd49, ``updateHealthEventReason``): the name of the check that saw the
problem followed by ``IsNotHealthy`` or ``IsHealthy``. The check names are NVSentinel's where it has one:
``GpuXidError`` (its XID check, as its connector tests name it), and the DCGM health watches of its GPU
health monitor, ``GpuMemWatch`` (ECC), ``GpuThermalWatch``, ``GpuPowerWatch``, ``GpuNvlinkWatch``. NVSentinel
reads a GPU off the bus from the kernel log (its syslog monitor's ``SysLogsGPUFallenOff`` check) and has no
check for a lost GPU, an unmonitored one or the NVLink fabric registration; fakegpu names those
``GpuFallenOffBus``, ``GpuLost``, ``GpuUnmonitored`` and ``GpuFabricWatch`` in the same pattern.

Pure: no Kubernetes client here (``fakegpu.kube.node_events`` posts the notices).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from fakegpu.sharing.bug_modes import OFF_THE_BUS_XID
from fakegpu.sharing.gpu_condition import HEALTHY_CONDITION, RESET_ENDS, GpuCondition
from fakegpu.sharing.gpu_faults import (
    CONTAINED_ECC_XID,
    DBE_XID,
    NVLINK_XID,
    ROW_REMAP_EVENT_XID,
    SBE_STORM_XID,
    UNCONTAINED_ECC_XID,
)
from fakegpu.sharing.health import HealthEvent
from fakegpu.sharing.node import Node, PhysicalGpu

CHECKS: Final[dict[str, str]] = {
    "xid": "GpuXidError",
    "off-bus": "GpuFallenOffBus",
    "gpu-lost": "GpuLost",
    "unmonitored": "GpuUnmonitored",
    "ecc-uncorrectable": "GpuMemWatch",
    "ecc-correctable": "GpuMemWatch",
    "thermal": "GpuThermalWatch",
    "power": "GpuPowerWatch",
    "nvlink": "GpuNvlinkWatch",
    "fabric": "GpuFabricWatch",
}
"""Fault kind (and health-event kind) -> the check whose name starts the Event's reason."""
NOT_HEALTHY: Final = "IsNotHealthy"
HEALTHY: Final = "IsHealthy"
XID_KINDS: Final[dict[int, str]] = {
    OFF_THE_BUS_XID: "off-bus",
    DBE_XID: "ecc-uncorrectable",
    ROW_REMAP_EVENT_XID: "ecc-uncorrectable",
    CONTAINED_ECC_XID: "ecc-uncorrectable",
    UNCONTAINED_ECC_XID: "ecc-uncorrectable",
    SBE_STORM_XID: "ecc-correctable",
    NVLINK_XID: "nvlink",
}
"""The kind an XID belongs to while that kind is on its GPU (``fakegpu.sharing.gpu_condition.strike``)."""


@dataclass(frozen=True)
class FaultSnapshot:
    """The fault state of a node at one moment: per physical GPU its condition, per GPU or MIG UUID its
    health events."""

    conditions: Mapping[str, GpuCondition]
    events: Mapping[str, tuple[HealthEvent, ...]]


EMPTY_SNAPSHOT: Final = FaultSnapshot({}, {})
"""Before anything happened: a daemon starting on a GPU that is already faulted reports it once, as a
problem detector scanning the kernel log from boot does."""


@dataclass(frozen=True)
class FaultNotice:
    """One thing to tell about one GPU: a fault (``warning``) or its recovery."""

    gpu_index: int
    gpu_uuid: str
    kind: str
    warning: bool
    xids: tuple[int, ...] = ()
    change: str = ""

    @property
    def reason(self) -> str:
        return CHECKS[self.kind] + (NOT_HEALTHY if self.warning else HEALTHY)

    @property
    def message(self) -> str:
        """``GPU 0 (GPU-...): ecc-uncorrectable, XIDs 94, 63: 1 uncorrectable ECC error(s), a row remap pending``.

        Only deltas, never running totals, so the same fault struck again reads the same and is counted on
        one Event instead of making another."""
        xids = ""
        if self.xids:
            xids = f", XID{'s' if len(self.xids) > 1 else ''} {', '.join(map(str, self.xids))}"
        what = self.kind if self.warning else f"{self.kind} recovered"
        return f"GPU {self.gpu_index} ({self.gpu_uuid}): {what}{xids}: {self.change}"


def _new_events(before: tuple[HealthEvent, ...], after: tuple[HealthEvent, ...]) -> tuple[HealthEvent, ...]:
    """The events ``after`` has beyond what it shares with ``before`` (a list cleared and refilled counts anew)."""
    shared = 0
    while shared < min(len(before), len(after)) and before[shared] == after[shared]:
        shared += 1
    return after[shared:]


def _fresh(gpu: PhysicalGpu, before: FaultSnapshot, after: FaultSnapshot) -> list[HealthEvent]:
    """The GPU's new health events (its own and its MIG devices'), each distinct one once."""
    out: list[HealthEvent] = []
    for uuid in gpu.uuids:
        for event in _new_events(before.events.get(uuid, ()), after.events.get(uuid, ())):
            if event not in out:
                out.append(event)
    return out


def _count(after: int, before: int, what: str) -> str:
    return f"{after - before} {what}" if after > before else ""


def _change(kind: str, b: GpuCondition, a: GpuCondition) -> str:
    """What changed on the GPU, in a few words, from the condition before and after."""
    if kind == "off-bus":
        return "the GPU has fallen off the bus; NVML cannot reach it until the node reboots"
    if kind == "gpu-lost":
        return "NVML reports the GPU is lost (ERROR_GPU_IS_LOST); it needs a reboot"
    if kind == "ecc-uncorrectable":
        pending = "a row remap pending" if a.remapped_rows_pending else "a page retirement pending"
        return f"{_count(a.ecc_dbe_volatile, b.ecc_dbe_volatile, 'uncorrectable ECC error(s)')}, {pending}"
    if kind == "ecc-correctable":
        return _count(a.ecc_sbe_volatile, b.ecc_sbe_volatile, "correctable ECC errors") or "correctable ECC errors"
    if kind == "thermal":
        return f"temperature {a.temperature_c} C, clocks cut to {a.clock_fraction:.0%} (thermal slowdown)"
    if kind == "power":
        return f"power draw {a.power_draw_w:g} W, clocks cut to {a.clock_fraction:.0%} (power cap, power brake)"
    if kind == "nvlink":
        down = ", ".join(str(link) for link in sorted(a.nvlink_down)) or "none"
        crc = _count(a.nvlink_crc_errors, b.nvlink_crc_errors, "CRC errors") or "errors"
        return f"NVLink {crc}; link(s) down: {down}"
    if kind == "fabric":
        return f"NVLink fabric registration failed ({a.fabric_status}): the node's IMEX daemon is not ready"
    return "an XID event"


def _event_change(event: HealthEvent) -> str:
    if event.kind == "gpu-lost":
        return "NVML returned ERROR_GPU_IS_LOST while waiting for events: every device of the node marked unhealthy"
    if event.kind == "unmonitored":
        return "its events could not be registered with NVML: health unknown, devices marked unhealthy"
    if event.forced:
        return "marked unhealthy (fakegpu ctl health)"
    return "an XID event"


def _recovery(kind: str) -> str:
    if kind in RESET_ENDS:
        return "a GPU reset ended it (NVIDIA's device plugin and DRA driver keep its devices unhealthy until restarted)"
    return "the cause cleared"


def _repeated(kind: str, b: GpuCondition, a: GpuCondition) -> bool:
    """A kind already on the GPU struck again: its reading moved (kinds with XIDs show by their XIDs)."""
    if kind not in b.kinds or kind not in a.kinds:
        return False
    field = {"thermal": "temperature_c", "power": "power_draw_w", "fabric": "fabric_status"}.get(kind)
    return field is not None and getattr(b, field) != getattr(a, field)


def _by_kind(a: GpuCondition, added: list[str], xids: list[int], repeated: list[str]) -> dict[str, list[int]]:
    """The kinds to tell about, each with its new XIDs: a kind that appeared, a kind whose XID came again,
    else a plain XID event."""
    groups: dict[str, list[int]] = {kind: [] for kind in added}
    for xid in xids:
        kind = XID_KINDS.get(xid, "xid")
        if kind not in a.kinds or ("xid" in added and kind not in added):
            kind = "xid"  # a plain XID event, or an xid fault naming an XID another kind also reports
        if xid not in groups.setdefault(kind, []):
            groups[kind].append(xid)
    for kind in repeated:
        groups.setdefault(kind, [])
    return groups


def _gpu_notices(gpu: PhysicalGpu, before: FaultSnapshot, after: FaultSnapshot) -> list[FaultNotice]:
    b = before.conditions.get(gpu.uuid, HEALTHY_CONDITION)
    a = after.conditions.get(gpu.uuid, HEALTHY_CONDITION)
    added = [k for k in a.kinds if k not in b.kinds]
    removed = [k for k in b.kinds if k not in a.kinds]
    fresh = _fresh(gpu, before, after)
    xids = [e.xid for e in fresh if e.kind == "xid" and e.xid is not None and not e.forced]
    repeated = [k for k in a.kinds if _repeated(k, b, a)]
    out = [
        FaultNotice(gpu.index, gpu.uuid, kind, True, tuple(kind_xids), _change(kind, b, a))
        for kind, kind_xids in _by_kind(a, added, xids, repeated).items()
    ]
    for event in fresh:
        if event.kind == "gpu-lost" and "gpu-lost" in added:
            continue  # the struck GPU's own notice says it
        if event.kind != "xid" or event.forced or event.xid is None:
            xid = (event.xid,) if event.xid is not None else ()
            out.append(FaultNotice(gpu.index, gpu.uuid, event.kind, True, xid, _event_change(event)))
    out += [FaultNotice(gpu.index, gpu.uuid, kind, False, (), _recovery(kind)) for kind in removed]
    return out


def fault_notices(node: Node, before: FaultSnapshot, after: FaultSnapshot) -> list[FaultNotice]:
    """What changed between two snapshots of ``node``, GPU by GPU: faults first, then recoveries."""
    return [notice for gpu in node.gpus for notice in _gpu_notices(gpu, before, after)]
