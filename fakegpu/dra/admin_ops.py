"""The DRA daemon's admin ops (served by ``fakegpu.control.server``, used by ``fakegpu ctl``).

Ops and their fields:

- ``status``: node, driver, published ResourceSlices (count, pool generation), published devices with
  health, GPUs, prepared claims from the checkpoint, prepare/unprepare counts, pending and fired faults.
- ``health`` (target, healthy, xid=None): set health directly; ``target`` is a published device name
  (``gpu-1``), a GPU or MIG UUID or a GPU index. Returns the published devices whose health changed.
- ``xid`` (target, xid): an XID event under the ``DP_*`` policy; ``off-bus`` (gpu): XID 79 on a GPU.
- ``fault`` (method and the fields of ``fakegpu.sharing.faults.FaultSpec``): fail or delay the next
  NodePrepareResources / NodeUnprepareResources calls (``resource`` is the driver name);
  ``clear-faults`` (method=None).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fakegpu.control.fault_ops import FaultableRpcs, fault_ops, fault_status
from fakegpu.control.health_ops import gpu_status, health_ops
from fakegpu.control.protocol import AdminError, Op
from fakegpu.dra.device_map import published_devices
from fakegpu.dra.prepared_claims import CheckpointCorrupted
from fakegpu.dra.published_health import device_health
from fakegpu.kubeletapi.dra.v1 import api_pb2 as dra_v1

if TYPE_CHECKING:
    from fakegpu.dra.daemon import DraDriver

DRA_FAULTS = FaultableRpcs(
    kind="dra",
    face="the DRA driver",
    rpcs=tuple(m.name for m in dra_v1.DESCRIPTOR.services_by_name["DRAPlugin"].methods),
)
"""The RPCs a fault can name on this face: the ``DRAPlugin`` service's (the same in v1 and v1beta1)."""


def dra_ops(driver: DraDriver) -> dict[str, Op]:
    live = driver.live
    settings = driver.settings

    def health_now() -> dict[str, tuple[bool, str]]:
        return {
            name: (ok, message) for _pool, name, ok, message in device_health(live, settings.driver, settings.mig_mode)
        }

    def changed_by(change: Callable[[], object]) -> list[str]:
        before = health_now()
        change()
        after = health_now()
        return sorted(name for name, state in after.items() if before.get(name) != state)

    def resolve(target: str) -> str:
        """A published device name becomes its UUID; anything else is left to the live inventory."""
        device = published_devices(live.inventory.node, settings.mig_mode).get(target)
        if device is None:
            return target
        if device.uuid is None:
            raise AdminError(
                f"{target} is a dynamic MIG device that has no UUID until a claim prepares it; "
                f"give its GPU ({device.parent_index}) instead"
            )
        return device.uuid

    async def status() -> dict[str, Any]:
        publisher = driver.publisher
        try:
            claims = driver.preparer.checkpoint.claims()
            checkpoint_error = ""
        except CheckpointCorrupted as exc:
            claims, checkpoint_error = [], str(exc)
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
                {"pool": pool, "name": name, "healthy": ok, "message": message}
                for pool, name, ok, message in device_health(live, settings.driver, settings.mig_mode)
            ],
            "gpus": gpu_status(live),
            "prepared": [
                {
                    "uid": c.uid,
                    "namespace": c.namespace,
                    "name": c.name,
                    "state": c.state,
                    "devices": [d.device for d in c.devices],
                }
                for c in claims
            ],
            "checkpoint_error": checkpoint_error,
            "prepares": driver.preparer.prepares,
            "unprepares": driver.preparer.unprepares,
            "faults": fault_status(live.faults),
        }

    return {
        "status": status,
        **health_ops(live, resolve, changed_by),
        **fault_ops(live.faults, DRA_FAULTS, lambda: [settings.driver]),
    }
