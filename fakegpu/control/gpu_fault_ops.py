"""The GPU fault ops both faces share: strike a GPU with a fault of any kind (``gpu-fault``), recover it as the
real device recovers (``recover``), and the faulted GPUs for status.

A fault acts on the live inventory (``LiveInventory.strike_gpu``), which both faces read: the device plugin's
ListAndWatch and the DRA driver's taints and health stream follow from the XIDs and health events it records,
nvidia-smi and DCGM from the GPU's condition. The op's fields are ``gpu`` and those of
:class:`fakegpu.sharing.gpu_faults.GpuFault` (taken with ``takes_model``, so the model checks them once). Each
face says in its own words what a fault changed (:class:`GpuFaultFace`): the device plugin the device IDs it
marked unhealthy, the DRA driver the published devices whose streamed health changed and the taints on the GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from fakegpu.control.health_ops import find_gpu
from fakegpu.control.protocol import AdminError, Op, takes_model
from fakegpu.sharing.gpu_condition import RECOVERIES, GpuCondition, recovery_refusal, strike
from fakegpu.sharing.gpu_faults import FAULT_KINDS, GpuFault
from fakegpu.sharing.health import DEFAULT_IGNORED_XIDS, XidPolicy
from fakegpu.sharing.live_inventory import LiveInventory

KIND_LABELS: Final[dict[str, str]] = {
    "xid": "XID event",
    "off-bus": "fell off the bus",
    "gpu-lost": "GPU lost",
    "ecc-uncorrectable": "uncorrectable ECC",
    "ecc-correctable": "correctable ECC storm",
    "thermal": "thermal slowdown",
    "power": "power excursion",
    "nvlink": "NVLink errors",
    "fabric": "fabric registration error",
}
"""Each kind as an answer line names it."""

COUNTED_CALLS: Final = "Allocate, NodePrepareResources"
"""The calls an armed fault (``after_calls``) counts: each one served that uses the GPU."""


def xid_class(policy: XidPolicy, xid: int) -> str:
    """How NVIDIA's health model classes an XID: ``fatal`` (device plugin: Unhealthy; DRA: taint NoSchedule),
    ``application`` (NVIDIA's default-ignored application errors: device plugin ignores it, DRA taints None),
    or ``ignored by config`` (``DP_DISABLE_HEALTHCHECKS`` or ``ADDITIONAL_XIDS_TO_IGNORE``: the same as
    application)."""
    if policy.is_critical(xid):
        return "fatal"
    if xid in DEFAULT_IGNORED_XIDS and policy.switches.get(xid) is True:
        return "application"
    return "ignored by config"


def condition_summary(c: GpuCondition) -> str:
    """One line of what the faults left on a GPU, as status shows it."""
    parts: list[str] = []
    if c.lost:
        parts.append("lost (NVML: ERROR_GPU_IS_LOST)")
    if c.off_bus:
        parts.append("fallen off the bus")
    if c.ecc_dbe_aggregate or c.ecc_sbe_aggregate:
        parts.append(
            f"ECC uncorrectable {c.ecc_dbe_volatile} volatile / {c.ecc_dbe_aggregate} aggregate, "
            f"correctable {c.ecc_sbe_volatile} / {c.ecc_sbe_aggregate}"
        )
    if c.remapped_rows_uncorrectable or c.remapped_rows_correctable:
        pending = " (remap pending)" if c.remapped_rows_pending else ""
        parts.append(
            f"remapped rows {c.remapped_rows_correctable} correctable, {c.remapped_rows_uncorrectable} "
            f"uncorrectable{pending}"
        )
    if c.retired_pages_dbe or c.retired_pages_sbe:
        pending = " (retirement pending)" if c.retired_pages_pending else ""
        parts.append(f"retired pages {c.retired_pages_sbe} single-bit, {c.retired_pages_dbe} double-bit{pending}")
    if c.temperature_c is not None:
        parts.append(f"{c.temperature_c} C")
    if c.power_draw_w is not None:
        parts.append(f"{c.power_draw_w:g} W")
    if c.clock_fraction < 1:
        parts.append(f"clocks at {round(c.clock_fraction * 100)} % ({', '.join(sorted(c.clocks_event_reasons))})")
    if c.nvlink_crc_errors:
        parts.append(
            f"NVLink CRC {c.nvlink_crc_errors}, replay {c.nvlink_replay_errors}, recovery {c.nvlink_recovery_errors}"
        )
    if c.nvlink_down:
        parts.append(f"link(s) {', '.join(str(n) for n in sorted(c.nvlink_down))} down")
    if c.fabric_status is not None:
        parts.append(f"fabric {c.fabric_status}")
    if c.last_xid is not None:
        parts.append(f"last XID {c.last_xid}")
    return "; ".join(parts) or "readings normal"


def _changed_only(change: Callable[[], list[str]]) -> list[str]:
    return change()


def _no_note(_gpu_uuid: str) -> str:
    return ""


@dataclass(frozen=True)
class GpuFaultFace:
    """How one face reports a GPU fault: ``report`` runs the change and returns the devices it changed in the
    face's names; ``note`` says what the face shows of the GPU now ("" for nothing more)."""

    report: Callable[[Callable[[], list[str]]], list[str]] = _changed_only
    note: Callable[[str], str] = _no_note


def gpu_fault(live: LiveInventory, face: GpuFaultFace, gpu: str, fault: GpuFault) -> dict[str, Any]:
    """Strike ``gpu`` (an index or UUID) with ``fault`` now, or arm it for ``after_calls`` calls; what happened."""
    target = find_gpu(live, gpu)
    answer: dict[str, Any] = {"gpu": target.index, "uuid": target.uuid, "kind": fault.kind, "fault": fault.describe()}
    if fault.after_calls:
        live.strike_gpu(target.uuid, fault)
        return {**answer, "armed": True, "calls_left": fault.after_calls, "xids": [], "changed": [], "note": ""}
    _after, xids = strike(live.condition(target.uuid), fault, target.model)
    changed = face.report(lambda: live.strike_gpu(target.uuid, fault))
    return {
        **answer,
        "armed": False,
        "xids": [{"xid": x, "class": xid_class(live.xid_policy, x)} for x in xids],
        "changed": changed,
        "condition": condition_summary(live.condition(target.uuid)),
        "note": face.note(target.uuid),
    }


def recover(live: LiveInventory, face: GpuFaultFace, gpu: str, what: str) -> dict[str, Any]:
    """The real device's way back: ``thermal``, ``power`` or ``fabric`` (the cause cleared) or ``reset`` (a GPU
    reset). Refused for a kind that does not recover that way, a cause the GPU does not have, or a reset of a
    GPU NVML cannot reach; a reset of a GPU without a fault is done (a reset is always possible) and ends
    nothing. Health is left as NVIDIA's plugins leave it."""
    if what not in RECOVERIES:
        raise AdminError(recovery_refusal(what))
    target = find_gpu(live, gpu)
    before = live.condition(target.uuid)
    if before.unreachable and what == "reset":
        kind = "gpu-lost" if before.lost else "off-bus"
        raise AdminError(f"GPU {target.index} cannot be reset: {FAULT_KINDS[kind].recovery_text}")
    if what != "reset" and what not in before.kinds:
        have = ", ".join(before.kinds) or "none"
        raise AdminError(f"GPU {target.index} has no {what} fault (its faults: {have})")
    after = live.recover_gpu(target.uuid, what)
    ended = [k for k in before.kinds if k not in after.kinds]
    return {
        "gpu": target.index,
        "uuid": target.uuid,
        "what": what,
        "ended": ended,
        "remaining": list(after.kinds),
        "healthy": target.uuid not in live.unhealthy(),
        "condition": condition_summary(after),
        "note": face.note(target.uuid),
    }


def gpu_fault_ops(live: LiveInventory, face: GpuFaultFace | None = None) -> dict[str, Op]:
    """The ``gpu-fault`` and ``recover`` ops on ``live``, reported in ``face``'s words."""
    shown = face or GpuFaultFace()

    @takes_model(GpuFault, "fault")
    async def gpu_fault_op(gpu: str, fault: GpuFault) -> dict[str, Any]:
        """Strike a GPU with a fault of any kind, now or after its calls."""
        return gpu_fault(live, shown, gpu, fault)

    async def recover_op(gpu: str, what: str) -> dict[str, Any]:
        return recover(live, shown, gpu, what)

    return {"gpu-fault": gpu_fault_op, "recover": recover_op}


def _xids_seen(live: LiveInventory, gpu_uuid: str) -> list[dict[str, Any]]:
    """The XIDs NVML reported for the GPU, oldest first, each with its class under the daemon's policy."""
    events = live.health_events().get(gpu_uuid, ())
    return [
        {"xid": e.xid, "class": xid_class(live.xid_policy, e.xid)}
        for e in events
        if e.kind == "xid" and e.xid is not None and not e.forced
    ]


def gpu_fault_status(live: LiveInventory) -> dict[str, Any]:
    """The GPUs a fault or an XID hit (their faults, readings and XIDs with their class) and the faults still
    armed, for status."""
    index = {g.uuid: g.index for g in live.inventory.node.gpus}
    conditions = live.conditions()
    hit = [g.uuid for g in live.inventory.node.gpus if g.uuid in conditions or _xids_seen(live, g.uuid)]
    return {
        "conditions": [
            {
                "index": index[uuid],
                "uuid": uuid,
                "kinds": list(live.condition(uuid).kinds),
                "summary": condition_summary(live.condition(uuid)),
                "xids": _xids_seen(live, uuid),
            }
            for uuid in hit
        ],
        "armed": [
            {
                "index": index.get(a.gpu_uuid),
                "uuid": a.gpu_uuid,
                "fault": a.fault.describe(),
                "calls_left": a.calls_left,
            }
            for a in live.armed()
        ],
    }
