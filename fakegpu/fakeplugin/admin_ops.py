"""The device plugin daemon's admin ops (served by ``fakegpu.control.server``, used by ``fakegpu ctl``).

Ops and their fields:

- ``status``: node, resources (capacity, healthy, registered, serving, open streams, devices with
  health), GPUs with health and XID, pending and fired faults, recent Allocate calls, manager counters.
- ``health`` (target, healthy, xid=None): set health directly (a device ID, GPU/MIG UUID or GPU index);
  returns the device IDs marked.
- ``xid`` (target, xid): an XID event under the ``DP_*`` policy; returns the device IDs made unhealthy
  (none when the XID is ignored).
- ``off-bus`` (gpu): XID 79 on a whole GPU (index or UUID): it, its replicas and MIG devices unhealthy.
- ``gpu-lost``: NVML reports the GPU lost: every device unhealthy (v0.20's ``ERROR_GPU_IS_LOST``);
  ``unmonitored`` (gpu): its events cannot be registered: its devices unhealthy, as v0.20 marks them.
- ``gpu-fault`` (gpu and the fields of ``fakegpu.sharing.gpu_faults.GpuFault``): a fault of any kind on a GPU,
  now or after its ``after_calls`` Allocate calls; returns its XIDs with their class and the device IDs made
  unhealthy. ``recover`` (gpu, what): thermal, power, fabric or a GPU reset (health stays as NVIDIA leaves it).
- ``fault`` (method and the fields of ``fakegpu.sharing.faults.FaultSpec``): fail or delay ``times`` calls of
  a device plugin RPC (after ``after`` calls pass); ``clear-faults`` (method=None): drop planned faults.
- ``end-streams`` (resource=None): end the open ListAndWatch streams; returns how many ended.
- ``plugins`` (action: stop|start|restart): the plugin servers; ``reload``: rebuild from the files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from fakegpu.control.fault_ops import FaultableRpcs, fault_ops, fault_status
from fakegpu.control.gpu_fault_ops import gpu_fault_ops, gpu_fault_status
from fakegpu.control.health_ops import gpu_status, health_ops
from fakegpu.control.op_table import TargetOp, bind_ops
from fakegpu.control.protocol import AdminError, Op
from fakegpu.fakeplugin.node_sync import NodeSyncStats
from fakegpu.fakeplugin.plugin_manager import ManagerStats
from fakegpu.fakeplugin.resource_server import ResourceServer
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2
from fakegpu.runtime.plugin_registration import RegistryRegistration
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import CurrentInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory

DEVICE_PLUGIN_FAULTS = FaultableRpcs(
    kind="device-plugin",
    face="the device plugin",
    rpcs=tuple(m.name for m in api_pb2.DESCRIPTOR.services_by_name["DevicePlugin"].methods),
)
"""The RPCs a fault can name on this face: every RPC of the v1beta1 ``DevicePlugin`` service."""
RECENT_ALLOCATIONS = 50


class CallRecord(Protocol):
    @property
    def calls(self) -> Iterable[tuple[str, str, tuple[str, ...]]]: ...


class PluginControl(Protocol):
    """What the ops need of the plugin servers' manager (``PluginManager`` is one): what they serve, and
    stop, start, restart and reload."""

    @property
    def running(self) -> bool: ...
    @property
    def servers(self) -> Mapping[str, ResourceServer]: ...
    @property
    def registry(self) -> Mapping[str, RegistryRegistration]: ...
    @property
    def registered(self) -> Mapping[str, bool]: ...
    @property
    def stats(self) -> ManagerStats: ...
    @property
    def reload_inventory(self) -> Callable[[], object] | None: ...
    def wanted(self) -> list[str]: ...
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def restart_all(self) -> None: ...
    async def reload(self) -> bool: ...


class NodeObjectSync(Protocol):
    """The node object's sync (labels, config selection), whose counters status shows."""

    @property
    def stats(self) -> NodeSyncStats: ...


@dataclass(frozen=True)
class PluginAdmin:
    """What the device plugin's ops act on: the live inventory, the plugin servers and, where the daemon
    has them, the recent calls, its inputs (for ``reconfigure``) and the node object's sync."""

    live: LiveInventory
    manager: PluginControl
    calls: CallRecord | None = None
    current: CurrentInputs | None = None
    node_sync: NodeObjectSync | None = None


def _served(manager: PluginControl, resource: str | None) -> list[str]:
    names = sorted(manager.servers)
    if resource is not None and resource not in names:
        raise AdminError(f"unknown resource {resource!r}; this daemon serves: {', '.join(names) or 'nothing'}")
    return [resource] if resource is not None else names


def _registered(manager: PluginControl, name: str) -> bool:
    reg = manager.registry.get(name)
    if reg is not None:  # plugins-registry mode: the kubelet says so through NotifyRegistrationStatus
        return reg.service.registered is True
    return manager.registered.get(name, False)


def _resources(plugin: PluginAdmin) -> list[dict[str, Any]]:
    resources = []
    for r in plugin.live.inventory.resources:
        server = plugin.manager.servers.get(r.name)
        resources.append(
            {
                "name": r.name,
                "capacity": len(r.devices),
                "healthy": r.healthy,
                "registered": _registered(plugin.manager, r.name),
                "serving": server is not None and server.running,
                "streams": server.service.streams if server is not None else 0,
                "devices": [{"id": d.id, "health": d.health} for d in r.devices],
            }
        )
    return resources


def _manager_stats(stats: ManagerStats) -> dict[str, Any]:
    return {
        "registrations": stats.registrations,
        "registration_failures": stats.registration_failures,
        "restarts": stats.restarts,
        "reloads": stats.reloads,
        "reload_errors": list(stats.reload_errors),
        "last_error": stats.last_error,
        "watch_steps": stats.watch_steps,
    }


async def status(plugin: PluginAdmin) -> dict[str, Any]:
    live, calls, node_sync = plugin.live, plugin.calls, plugin.node_sync
    allocations = [
        {"resource": res, "ids": list(ids)}
        for res, method, ids in (calls.calls if calls else ())
        if method == "Allocate"
    ]
    return {
        "kind": DEVICE_PLUGIN_FAULTS.kind,
        "node": live.inventory.node.name,
        "running": plugin.manager.running,
        "resources": _resources(plugin),
        "gpus": gpu_status(live),
        "faults": fault_status(live.faults),
        "gpu_faults": gpu_fault_status(live),
        "allocations": allocations[-RECENT_ALLOCATIONS:],
        "stats": _manager_stats(plugin.manager.stats),
        **({"node_object": dataclasses.asdict(node_sync.stats)} if node_sync is not None else {}),
    }


async def end_streams(plugin: PluginAdmin, resource: str | None = None) -> int:
    manager = plugin.manager
    return sum(manager.servers[name].service.end_streams() for name in _served(manager, resource))


async def reconfigure(
    plugin: PluginAdmin,
    gpus: str | None = None,
    mig_layout: str | None = None,
    mig_strategy: str | None = None,
    new_ids: bool = False,
) -> dict[str, Any]:
    """Add or remove GPUs, re-partition MIG, or take fresh device IDs, live: the new inventory is built
    first, so a bad change is refused and the running one keeps serving."""
    current, manager = plugin.current, plugin.manager
    if current is None:
        raise AdminError("this daemon cannot be reconfigured (it was started without its inputs)")
    candidate = current.candidate(gpus=gpus, mig_layout=mig_layout, mig_strategy=mig_strategy, new_ids=new_ids)
    try:
        load_inventory(candidate)
    except SpecError as exc:
        raise AdminError(f"reconfigure rejected, still serving the previous inventory: {exc}") from None
    previous, current.inputs = current.inputs, candidate
    if not await manager.reload():
        current.inputs = previous
        raise AdminError("reconfigure rejected, still serving the previous inventory")
    if new_ids:
        await manager.restart_all()
    return {"serving": manager.wanted(), "gpus": len(plugin.live.inventory.node.gpus)}


async def plugins(plugin: PluginAdmin, action: Literal["stop", "start", "restart"]) -> dict[str, Any]:
    manager = plugin.manager
    if action == "stop":
        if not manager.running:
            raise AdminError("the plugin servers are already stopped")
        await manager.stop()
    elif action == "start":
        if manager.running:
            raise AdminError("the plugin servers are already running; use 'restart'")
        await manager.start()
    elif manager.running:
        await manager.restart_all()
    else:
        await manager.start()
    return {"action": action, "serving": sorted(manager.servers)}


async def reload(plugin: PluginAdmin) -> dict[str, Any]:
    manager = plugin.manager
    if manager.reload_inventory is None:
        raise AdminError("this daemon has no input files to reload from")
    errors = len(manager.stats.reload_errors)
    if not await manager.reload():
        new = manager.stats.reload_errors[errors:]
        detail = new[-1] if new else "unknown error"
        raise AdminError(f"reload rejected, still serving the previous inventory: {detail}")
    return {"serving": manager.wanted()}


DEVICE_PLUGIN_OPS: Mapping[str, TargetOp[PluginAdmin]] = {
    "status": status,
    "end-streams": end_streams,
    "plugins": plugins,
    "reload": reload,
    "reconfigure": reconfigure,
}
"""The device plugin's own ops; the health and fault ops are the ones both faces share."""


def device_plugin_ops(
    live: LiveInventory,
    manager: PluginControl,
    calls: CallRecord | None = None,
    current: CurrentInputs | None = None,
    node_sync: NodeObjectSync | None = None,
) -> dict[str, Op]:
    """Every op the device plugin daemon serves: its own, then the shared health and fault ops (scoped to
    the resources it advertises)."""
    return {
        **bind_ops(PluginAdmin(live, manager, calls, current, node_sync), DEVICE_PLUGIN_OPS),
        **health_ops(live),
        **gpu_fault_ops(live),
        **fault_ops(live.faults, DEVICE_PLUGIN_FAULTS, lambda: [r.name for r in live.inventory.resources]),
    }
