"""The DRA daemon's admin ops (served by ``fakegpu.control.server``, used by ``fakegpu ctl``).

Ops and their fields:

- ``status``: node, driver, published ResourceSlices (count, pool generation), published devices with
  health (and whether NVMLDeviceHealthCheck publishes it), GPUs, prepared claims from the checkpoint,
  prepare/unprepare counts, pending and fired faults.
- ``health`` (target, healthy, xid=None): set health directly; ``target`` is a published device name
  (``gpu-1``), a GPU or MIG UUID or a GPU index. Returns the published devices whose health changed.
- ``xid`` (target, xid): an XID event (non-fatal XIDs: the defaults and ``ADDITIONAL_XIDS_TO_IGNORE``);
  ``off-bus`` (gpu): XID 79 on a GPU; ``gpu-lost``: NVML reports the GPU lost; ``unmonitored`` (gpu).
  The health ops need NVIDIA's ``NVMLDeviceHealthCheck`` gate: without it the event still reaches the fake
  GPU, but the op answers that the gate is off (``HEALTH_GATE_OFF``).
- ``gpu-fault`` (gpu and the fields of ``fakegpu.sharing.gpu_faults.GpuFault``): a fault of any kind on a GPU,
  now or after its ``after_calls`` claims prepared on it; returns its XIDs with their class, the published
  devices whose streamed health changed and the GPU's taints (never refused for the gate: nvidia-smi and
  DCGM see it). ``recover`` (gpu, what): thermal, power, fabric or a GPU reset; taints stay.
- ``fault`` (method and the fields of ``fakegpu.sharing.faults.FaultSpec``): fail or delay
  NodePrepareResources / NodeUnprepareResources calls, after ``after`` pass (``resource`` is the driver name);
  ``clear-faults`` (method=None).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from fakegpu.control.fault_ops import FaultableRpcs, fault_ops, fault_status
from fakegpu.control.gpu_fault_ops import GpuFaultFace, gpu_fault_ops, gpu_fault_status
from fakegpu.control.health_ops import gpu_status, health_ops
from fakegpu.control.op_table import TargetOp, bind_ops
from fakegpu.control.protocol import AdminError, Op
from fakegpu.dra.device_map import published_devices
from fakegpu.dra.feature_gates import NVML_DEVICE_HEALTH_CHECK, FeatureGates
from fakegpu.dra.health_taints import published_taints, taint_text
from fakegpu.dra.prepared_claims import CheckpointCorrupted, PreparedClaim
from fakegpu.dra.published_health import device_health
from fakegpu.dra.resource_slices import MigMode
from fakegpu.kubeletapi.dra.v1 import api_pb2 as dra_v1
from fakegpu.sharing.live_inventory import LiveInventory

DRA_FAULTS = FaultableRpcs(
    kind="dra",
    face="the DRA driver",
    rpcs=tuple(m.name for m in dra_v1.DESCRIPTOR.services_by_name["DRAPlugin"].methods),
)
"""The RPCs a fault can name on this face: the ``DRAPlugin`` service's (the same in v1 and v1beta1)."""


class DriverNames(Protocol):
    """How the driver names what it publishes."""

    @property
    def driver(self) -> str: ...
    @property
    def mig_mode(self) -> MigMode: ...
    @property
    def feature_gates(self) -> FeatureGates: ...


class PublishCounts(Protocol):
    """The publisher's counters: publishes done, and the errors of those that failed."""

    @property
    def publishes(self) -> int: ...
    @property
    def errors(self) -> list[str]: ...


class PublishedSlices(Protocol):
    """What status shows of the slice publisher."""

    @property
    def published_slices(self) -> list[str]: ...
    @property
    def generation(self) -> int: ...
    @property
    def stats(self) -> PublishCounts: ...


class ClaimCheckpoint(Protocol):
    """The claims the checkpoint holds (status lists them with their state)."""

    def claims(self) -> list[PreparedClaim]: ...


class PreparedCounts(Protocol):
    """What status shows of the claim preparer: the checkpoint's claims and the calls so far."""

    @property
    def checkpoint(self) -> ClaimCheckpoint: ...
    @property
    def prepares(self) -> int: ...
    @property
    def unprepares(self) -> int: ...


class DraAdmin(Protocol):
    """What the DRA driver's ops act on (``fakegpu.dra.daemon.DraDriver`` is one)."""

    @property
    def live(self) -> LiveInventory: ...
    @property
    def settings(self) -> DriverNames: ...
    @property
    def publisher(self) -> PublishedSlices: ...
    @property
    def preparer(self) -> PreparedCounts: ...


def _health_now(driver: DraAdmin) -> dict[str, str]:
    settings = driver.settings
    return {
        name: health for _pool, name, health, _message in device_health(driver.live, settings.driver, settings.mig_mode)
    }


HEALTH_GATE_OFF = (
    f"feature gate {NVML_DEVICE_HEALTH_CHECK} is off: the event reached the fake GPU (nvidia-smi, DCGM and the "
    f"IMEX daemon see it), but the DRA driver publishes no health taints and no health stream without it "
    f"(--feature-gates {NVML_DEVICE_HEALTH_CHECK}=true)"
)
"""The one line a health op answers when NVIDIA's driver would not watch device health at all."""


def changed_devices(driver: DraAdmin, change: Callable[[], object]) -> list[str]:
    """The published devices whose health (Healthy, Unhealthy, Unknown) ``change`` changed: a non-fatal XID
    changes none, though it taints with effect None. With ``NVMLDeviceHealthCheck`` off the change is made and
    refused with :data:`HEALTH_GATE_OFF`, since no taint or health report follows from it."""
    before = _health_now(driver)
    change()
    if not driver.settings.feature_gates.enabled(NVML_DEVICE_HEALTH_CHECK):
        raise AdminError(HEALTH_GATE_OFF)
    after = _health_now(driver)
    return sorted(name for name, state in after.items() if before.get(name) != state)


def fault_changed_devices(driver: DraAdmin, change: Callable[[], object]) -> list[str]:
    """The published devices whose streamed health a GPU fault changed (none with the gate off: nothing is
    streamed); unlike the health ops a fault is never refused for the gate, it reaches nvidia-smi and DCGM."""
    before = _health_now(driver)
    change()
    if not driver.settings.feature_gates.enabled(NVML_DEVICE_HEALTH_CHECK):
        return []
    after = _health_now(driver)
    return sorted(name for name, state in after.items() if before.get(name) != state)


def fault_note(driver: DraAdmin, gpu_uuid: str) -> str:
    """What the driver publishes for the GPU now: its taints, or why it publishes none."""
    if not driver.settings.feature_gates.enabled(NVML_DEVICE_HEALTH_CHECK):
        return f"no taints or health stream: feature gate {NVML_DEVICE_HEALTH_CHECK} is off"
    taints = published_taints(driver.live).get(gpu_uuid, ())
    return "taints " + ", ".join(taint_text(t) for t in taints) if taints else "no taints"


def resolve_device(driver: DraAdmin, target: str) -> str:
    """A published device name becomes its UUID; anything else is left to the live inventory."""
    device = published_devices(driver.live.inventory.node, driver.settings.mig_mode).get(target)
    if device is None:
        return target
    if device.uuid is None:
        raise AdminError(
            f"{target} is a dynamic MIG device that has no UUID until a claim prepares it; "
            f"give its GPU ({device.parent_index}) instead"
        )
    return device.uuid


def _prepared(driver: DraAdmin) -> tuple[list[dict[str, Any]], str]:
    """The checkpoint's claims as status shows them, and why the checkpoint cannot be read ("" when it can)."""
    try:
        claims = driver.preparer.checkpoint.claims()
    except CheckpointCorrupted as exc:
        return [], str(exc)
    return [
        {
            "uid": c.uid,
            "namespace": c.namespace,
            "name": c.name,
            "state": c.state,
            "devices": [d.device for d in c.devices],
        }
        for c in claims
    ], ""


async def status(driver: DraAdmin) -> dict[str, Any]:
    live, settings, publisher = driver.live, driver.settings, driver.publisher
    prepared, checkpoint_error = _prepared(driver)
    return {
        "kind": DRA_FAULTS.kind,
        "node": live.inventory.node.name,
        "driver": settings.driver,
        "mig_mode": settings.mig_mode,
        "slices": {
            "count": len(publisher.published_slices),
            "generation": publisher.generation,
            "publishes": publisher.stats.publishes,
            "errors": publisher.stats.errors[-5:],
        },
        "devices": [
            {"pool": pool, "name": name, "healthy": health == "Healthy", "health": health, "message": message}
            for pool, name, health, message in device_health(live, settings.driver, settings.mig_mode)
        ],
        "health_published": settings.feature_gates.enabled(NVML_DEVICE_HEALTH_CHECK),
        "gpus": gpu_status(live),
        "prepared": prepared,
        "checkpoint_error": checkpoint_error,
        "prepares": driver.preparer.prepares,
        "unprepares": driver.preparer.unprepares,
        "faults": fault_status(live.faults),
        "gpu_faults": gpu_fault_status(live),
    }


DRA_OPS: Mapping[str, TargetOp[DraAdmin]] = {"status": status}
"""The DRA driver's own ops; the health and fault ops are the ones both faces share."""


def dra_ops(driver: DraAdmin) -> dict[str, Op]:
    """Every op the DRA daemon serves: its own, then the shared health ops (in its published device names)
    and fault ops (scoped to its driver name)."""
    return {
        **bind_ops(driver, DRA_OPS),
        **health_ops(
            driver.live, functools.partial(resolve_device, driver), functools.partial(changed_devices, driver)
        ),
        **gpu_fault_ops(
            driver.live,
            GpuFaultFace(functools.partial(fault_changed_devices, driver), functools.partial(fault_note, driver)),
        ),
        **fault_ops(driver.live.faults, DRA_FAULTS, lambda: [driver.settings.driver]),
    }
