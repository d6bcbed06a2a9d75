"""The health ops both faces share: set health, XID events, a GPU off the bus, NVML losing the GPUs or unable to
watch one, and the GPUs' health for status.

They act on the live inventory, which both faces read, and turn its errors into admin refusals;
:func:`health_ops` is the ``health``, ``xid``, ``off-bus``, ``gpu-lost`` and ``unmonitored`` ops as a daemon
serves them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fakegpu.control.protocol import AdminError, Op
from fakegpu.sharing.bug_modes import OFF_THE_BUS_XID
from fakegpu.sharing.live_inventory import LiveInventory, UnknownDeviceError
from fakegpu.sharing.node import PhysicalGpu


def _check_xid(xid: int) -> None:
    if xid < 1:
        raise AdminError(f"xid must be a positive integer, found {xid}")


def set_health(live: LiveInventory, target: str, healthy: bool, xid: int | None) -> list[str]:
    """Mark the devices ``target`` names healthy or unhealthy (directly: the XID is only the reason)."""
    if xid is not None and healthy:
        raise AdminError("an XID only applies when marking a device unhealthy")
    if xid is not None:
        _check_xid(xid)
    try:
        return live.set_health(target, healthy, xid)
    except UnknownDeviceError as exc:
        raise AdminError(str(exc)) from None


def inject_xid(live: LiveInventory, target: str, xid: int) -> list[str]:
    """An XID event: devices made unhealthy, or none when the XID policy (``DP_*``) ignores it."""
    _check_xid(xid)
    try:
        return live.inject_xid(target, xid)
    except UnknownDeviceError as exc:
        raise AdminError(str(exc)) from None


def find_gpu(live: LiveInventory, gpu: str) -> PhysicalGpu:
    """The physical GPU with this index or UUID (a MIG device is not a GPU here)."""
    try:
        return live.gpu(gpu)
    except UnknownDeviceError as exc:
        raise AdminError(f"{exc} (give a GPU, not a MIG device)") from None


def off_bus(live: LiveInventory, gpu: str) -> list[str]:
    """XID 79 (fallen off the bus) on a whole GPU: it, every replica and every MIG device unhealthy."""
    return inject_xid(live, find_gpu(live, gpu).uuid, OFF_THE_BUS_XID)


def gpu_lost(live: LiveInventory) -> list[str]:
    """NVML reports the GPU lost (``ERROR_GPU_IS_LOST``): every device of the node is affected."""
    return live.gpu_lost()


def unmonitored(live: LiveInventory, gpu: str) -> list[str]:
    """NVML cannot watch this GPU's events (registration failed): its devices are affected."""
    return live.unmonitored(find_gpu(live, gpu).uuid)


def gpu_status(live: LiveInventory) -> list[dict[str, Any]]:
    """Every physical GPU with its health as both faces see it."""
    unhealthy = live.unhealthy()
    return [
        {
            "index": g.index,
            "uuid": g.uuid,
            "model": g.model.product_name,
            "healthy": g.uuid not in unhealthy,
            "xid": unhealthy.get(g.uuid),
            "cause": unhealthy_cause(live, g.uuid),
            "mig_devices": len(g.mig_devices),
        }
        for g in live.inventory.node.gpus
    ]


def unhealthy_cause(live: LiveInventory, gpu_uuid: str) -> str | None:
    """What put the GPU out of service beyond its last XID: lost, off the bus, another GPU lost (NVML's event
    wait fails for all), unmonitored, or its fabric; None for none. Status shows it before the XID, since a
    lost GPU's last XID (63 of an earlier ECC fault, say) is not why it is gone."""
    condition = live.condition(gpu_uuid)
    kinds = {e.kind for e in live.health_events().get(gpu_uuid, ())}
    if condition.lost:
        return "lost"
    if condition.off_bus:
        return "off the bus"
    if "gpu-lost" in kinds:
        return "a GPU of the node lost"
    if "unmonitored" in kinds:
        return "unmonitored"
    if condition.fabric_status is not None:
        return "fabric " + condition.fabric_status
    return None


def _same(target: str) -> str:
    return target


def _as_changed(change: Callable[[], list[str]]) -> list[str]:
    return change()


def health_ops(
    live: LiveInventory,
    resolve: Callable[[str], str] = _same,
    report: Callable[[Callable[[], list[str]]], list[str]] = _as_changed,
) -> dict[str, Op]:
    """The ``health``, ``xid``, ``off-bus``, ``gpu-lost`` and ``unmonitored`` ops. ``resolve`` turns a face's
    own device name into what the live inventory knows; ``report`` runs a change and says which devices it
    changed, in the face's names (by default the device IDs the live inventory returns)."""

    async def health(target: str, healthy: bool, xid: int | None = None) -> list[str]:
        device = resolve(target)
        return report(lambda: set_health(live, device, healthy, xid))

    async def xid(target: str, xid: int) -> list[str]:
        device = resolve(target)
        return report(lambda: inject_xid(live, device, xid))

    async def off_bus_op(gpu: str) -> list[str]:
        return report(lambda: off_bus(live, gpu))

    async def gpu_lost_op() -> list[str]:
        return report(lambda: gpu_lost(live))

    async def unmonitored_op(gpu: str) -> list[str]:
        return report(lambda: unmonitored(live, gpu))

    return {
        "health": health,
        "xid": xid,
        "off-bus": off_bus_op,
        "gpu-lost": gpu_lost_op,
        "unmonitored": unmonitored_op,
    }
