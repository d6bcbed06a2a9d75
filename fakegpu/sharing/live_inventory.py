"""The one place a process keeps its runtime device state: the inventory plus health changes.

Both faces read it, so a health change or a config reload made once is seen consistently by every
ListAndWatch stream and every ResourceSlice. Listeners are plain callbacks (no I/O here); the
servers turn them into pushes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal

from fakegpu.sharing.bug_modes import BugMode
from fakegpu.sharing.change_listeners import ChangeListeners, Listener
from fakegpu.sharing.errors import shorten
from fakegpu.sharing.faults import FaultPlan
from fakegpu.sharing.gpu_condition import HEALTHY_CONDITION, GpuCondition, recover, strike
from fakegpu.sharing.gpu_faults import GpuFault
from fakegpu.sharing.gpu_policies import GpuPolicies
from fakegpu.sharing.health import HEALTHY, UNHEALTHY, HealthEvent, XidPolicy
from fakegpu.sharing.inventory import Device, Inventory, Resource
from fakegpu.sharing.node import Node, PhysicalGpu

HealthTarget = Literal["device", "gpu"]


class UnknownDeviceError(KeyError):
    """A health change named no device of the inventory."""

    def __str__(self) -> str:
        return str(self.args[0])


def node_spec_events(node: Node) -> dict[str, tuple[HealthEvent, ...]]:
    """A node spec's GPU that starts with an XID (or unhealthy) had that event before any driver started:
    the GPU and its MIG devices, by UUID."""
    out: dict[str, tuple[HealthEvent, ...]] = {}
    for gpu in node.gpus:
        if gpu.xid is None and gpu.health != UNHEALTHY:
            continue
        event = HealthEvent("xid", gpu.xid, forced=gpu.xid is None)
        out.update(dict.fromkeys(gpu.uuids, (event,)))
    return out


@dataclass(frozen=True)
class ArmedFault:
    """A fault that strikes after ``calls_left`` more RPC calls."""

    gpu_uuid: str
    fault: GpuFault
    calls_left: int


class LiveInventory:
    def __init__(
        self,
        inventory: Inventory,
        xid_policy: XidPolicy | None = None,
        bug_modes: frozenset[BugMode] = frozenset(),
    ) -> None:
        self._base = inventory
        self._overrides: dict[str, str] = {}
        self._uuid_health: dict[str, tuple[bool, int | None]] = {}
        self._events: dict[str, list[HealthEvent]] = {}
        self._seed_events(inventory)
        self._listeners = ChangeListeners()
        self._view = inventory
        self.generation = 0
        self.xid_policy = xid_policy or XidPolicy()
        self.faults = FaultPlan()
        self.gpu_policies = GpuPolicies()
        """Compute mode and time slice per GPU, as the DRA driver's sharing strategies set them."""
        self.bug_modes = bug_modes
        self._conditions: dict[str, GpuCondition] = {}
        """Per physical GPU UUID, what its faults left (ECC counters, clocks, fabric...); absent: healthy."""
        self._armed: list[ArmedFault] = []

    @property
    def inventory(self) -> Inventory:
        return self._view

    def resource(self, name: str) -> Resource | None:
        return self._view.resource(name)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` after every change; returns a function that unsubscribes."""
        return self._listeners.subscribe(listener)

    def replace(self, inventory: Inventory) -> None:
        """A new inventory (config reload); health changes of devices that still exist are kept."""
        self._base = inventory
        known = {d.id for r in inventory.resources for d in r.devices}
        self._overrides = {k: v for k, v in self._overrides.items() if k in known}
        uuids = {u for g in inventory.node.gpus for u in g.uuids}
        self._uuid_health = {k: v for k, v in self._uuid_health.items() if k in uuids}
        self._events = {k: v for k, v in self._events.items() if k in uuids}
        self._conditions = {k: v for k, v in self._conditions.items() if k in uuids}
        self._armed = [a for a in self._armed if a.gpu_uuid in uuids]
        self._seed_events(inventory)
        self._changed()

    def _seed_events(self, inventory: Inventory) -> None:
        for uuid, events in node_spec_events(inventory.node).items():
            self._events.setdefault(uuid, list(events))

    def matching(self, target: str) -> list[Device]:
        """Devices named by ``target``: an advertised ID, a GPU or MIG UUID (all its replicas and, for a
        GPU, its MIG devices), or a GPU index."""
        out: list[Device] = []
        gpu_uuid = None
        if target.isdigit():
            index = int(target)
            if index < len(self._base.node.gpus):
                gpu_uuid = self._base.node.gpus[index].uuid
        for r in self._base.resources:
            for d in r.devices:
                if target in (d.id, d.base_id, d.parent) or d.parent == gpu_uuid:
                    out.append(d)
        return out

    def _physical_uuids(self, target: str) -> list[str]:
        """GPU and MIG UUIDs named by ``target``, whatever the device plugin's MIG strategy exposes."""
        for gpu in self._base.node.gpus:
            if target in (gpu.uuid, str(gpu.index)):
                return list(gpu.uuids)
            for mig in gpu.mig_devices:
                if target == mig.uuid:
                    return [mig.uuid]
        base = target.split("::", 1)[0]
        return [base] if any(d.base_id == base for r in self._base.resources for d in r.devices) else []

    def set_health(self, target: str, healthy: bool, xid: int | None = None) -> list[str]:
        """Mark the devices named by ``target`` healthy or unhealthy; returns the advertised IDs changed.
        Healthy again also forgets the health events of those devices (fakegpu's way back; NVIDIA has none)."""
        devices, physical = self._targets(target)
        for uuid in physical:
            if healthy:
                self._events.pop(uuid, None)
            else:
                self._events.setdefault(uuid, []).append(HealthEvent("xid", xid, forced=True))
        return self._mark(devices, physical, healthy, xid)

    def _targets(self, target: str) -> tuple[list[Device], list[str]]:
        devices = self.matching(target)
        physical = self._physical_uuids(target)
        if not devices and not physical:
            raise UnknownDeviceError(f"no device, GPU UUID or GPU index {target!r} in the inventory")
        return devices, physical

    def _mark(self, devices: list[Device], physical: list[str], healthy: bool, xid: int | None) -> list[str]:
        if not healthy and BugMode.HEALTH_ONE_DEVICE_PER_GPU in self.bug_modes:
            # NVIDIA #1929: the health map keeps one device per physical GPU.
            first_per_gpu: dict[str, Device] = {}
            for d in devices:
                first_per_gpu.setdefault(d.parent, d)
            devices = list(first_per_gpu.values())
            physical = physical[:1]
        health = HEALTHY if healthy else UNHEALTHY
        changed = [d.id for d in devices if self._health_of(d) != health]
        for d in devices:
            self._overrides[d.id] = health
        for uuid in physical:
            self._uuid_health[uuid] = (healthy, None if healthy else xid)
        self._changed()
        return changed

    def _health_of(self, device: Device) -> str:
        """The health the device plugin advertises for ``device`` now."""
        return self._overrides.get(device.id, device.health)

    def gpu_lost(self) -> list[str]:
        """NVML's ``ERROR_GPU_IS_LOST`` while waiting for events: the device plugin marks every device
        unhealthy, the DRA driver taints every device ``gpu-lost``. Returns the advertised IDs it made
        unhealthy, not those that already were (as the DRA face reports only the health it changed)."""
        devices = [d for r in self._base.resources for d in r.devices]
        physical = [u for g in self._base.node.gpus for u in g.uuids]
        return self._lose_watch(devices, physical, HealthEvent("gpu-lost"))

    def unmonitored(self, gpu_uuid: str) -> list[str]:
        """The GPU's events could not be registered (no handle, no supported events): the device plugin marks
        its devices unhealthy, the DRA driver taints them ``unmonitored`` (effect None) and reports their
        health as unknown. The GPU counts as unhealthy here (``unhealthy()``) as the device plugin has it, so
        DCGM, ``fakegpu ctl health`` and the IMEX readiness see what its pods would. Returns the advertised
        IDs the device plugin newly marked."""
        devices, physical = self._targets(gpu_uuid)
        return self._lose_watch(devices, physical, HealthEvent("unmonitored"))

    def _lose_watch(self, devices: list[Device], physical: list[str], event: HealthEvent) -> list[str]:
        """Health events that mark devices unhealthy whatever the XID policy, keeping an XID already known."""
        unhealthy = self.unhealthy()
        changed = [d.id for d in devices if self._health_of(d) != UNHEALTHY]
        for uuid in physical:
            self._events.setdefault(uuid, []).append(event)
        for d in devices:
            self._overrides[d.id] = UNHEALTHY
        for uuid in physical:
            self._uuid_health[uuid] = (False, unhealthy.get(uuid))
        self._changed()
        return changed

    def health_events(self) -> dict[str, tuple[HealthEvent, ...]]:
        """Every GPU and MIG UUID's health events, oldest first (what the DRA driver's taints come from)."""
        return {uuid: tuple(events) for uuid, events in sorted(self._events.items())}

    def unhealthy(self) -> dict[str, int | None]:
        """GPU and MIG UUIDs that are unhealthy now (as the device plugin sees them), with the XID that made
        them so when known: what DCGM, ``fakegpu ctl`` and the compute-domain readiness read. The DRA face's
        taints and health stream come from ``health_events()`` instead."""
        out: dict[str, int | None] = {}
        for gpu in self._base.node.gpus:
            if gpu.health == UNHEALTHY:
                for uuid in gpu.uuids:
                    out[uuid] = gpu.xid
        for uuid, (healthy, xid) in self._uuid_health.items():
            if healthy:
                out.pop(uuid, None)
            else:
                out[uuid] = xid
        return out

    def inject_xid(self, target: str, xid: int) -> list[str]:
        """An XID event on a device: unhealthy unless the XID is ignored (NVIDIA's health model); recorded
        either way, since NVIDIA's DRA driver taints a device for an ignored XID too (effect None)."""
        devices, physical = self._targets(target)
        for uuid in physical:
            self._events.setdefault(uuid, []).append(HealthEvent("xid", xid))
        if not self.xid_policy.is_critical(xid):
            self._changed()
            return []
        return self._mark(devices, physical, False, xid)

    def condition(self, gpu_uuid: str) -> GpuCondition:
        """What faults left on this physical GPU (``HEALTHY_CONDITION`` when none struck)."""
        return self._conditions.get(gpu_uuid, HEALTHY_CONDITION)

    def conditions(self) -> dict[str, GpuCondition]:
        """Every physical GPU a fault struck, by UUID (nvidia-smi, DCGM and status read this)."""
        return dict(sorted(self._conditions.items()))

    def armed(self) -> list[ArmedFault]:
        """Faults waiting for RPC calls (``after_calls``), oldest first."""
        return list(self._armed)

    def strike_gpu(self, gpu_uuid: str, fault: GpuFault) -> list[str]:
        """``fault`` on the physical GPU ``gpu_uuid``, now, or armed when it waits for ``after_calls`` RPC calls
        (:meth:`note_call`). Returns the advertised IDs it made unhealthy (none when armed, or for a kind
        that leaves health alone, or an XID the policy ignores)."""
        gpu = self.gpu(gpu_uuid)
        if fault.after_calls:
            self._armed.append(ArmedFault(gpu.uuid, fault, fault.after_calls))
            self._changed()
            return []
        return self._strike(gpu.uuid, fault)

    def note_call(self, uuids: Collection[str] | None = None) -> list[str]:
        """One RPC call served (Allocate, NodePrepareResources): armed faults count it down and strike at
        zero. With ``uuids`` (the GPU or MIG UUIDs the call used) only the faults armed on those GPUs count
        it, as NVIDIA's mock NVML counts each device's own calls; None counts it for every armed fault.
        Returns the advertised IDs made unhealthy by the ones that struck. Counting alone announces nothing:
        no device, slice or reading changes until a fault strikes."""
        if not self._armed:
            return []
        used = None if uuids is None else {g.uuid for g in self._base.node.gpus if set(g.uuids) & set(uuids)}
        changed: list[str] = []
        waiting: list[ArmedFault] = []
        due: list[ArmedFault] = []
        for armed in self._armed:
            if used is not None and armed.gpu_uuid not in used:
                waiting.append(armed)
                continue
            left = armed.calls_left - 1
            (due if left <= 0 else waiting).append(dataclasses.replace(armed, calls_left=left))
        self._armed = waiting
        for armed in due:
            changed.extend(self._strike(armed.gpu_uuid, armed.fault))
        return changed

    def _strike(self, gpu_uuid: str, fault: GpuFault) -> list[str]:
        gpu = self.gpu(gpu_uuid)
        condition, xids = strike(self.condition(gpu.uuid), fault, gpu.model)
        self._conditions[gpu.uuid] = condition
        changed: list[str] = []
        if fault.kind == "gpu-lost":
            changed = self.gpu_lost()
        for xid in xids:
            changed.extend(i for i in self.inject_xid(gpu.uuid, xid) if i not in changed)
        if not xids and fault.kind != "gpu-lost":
            self._changed()
        return changed

    def recover_gpu(self, gpu_uuid: str, kind: str) -> GpuCondition:
        """The real device's way back from ``kind`` (or ``reset``: a GPU reset); health is left as NVIDIA's
        plugins leave it (an XID's unhealthy device stays so). Returns the GPU's condition after it."""
        gpu = self.gpu(gpu_uuid)
        condition = recover(self.condition(gpu.uuid), kind)
        if condition == HEALTHY_CONDITION:
            self._conditions.pop(gpu.uuid, None)
        else:
            self._conditions[gpu.uuid] = condition
        self._changed()
        return condition

    def gpu(self, index_or_uuid: str) -> PhysicalGpu:
        """The physical GPU with this index or UUID (a MIG device is not a GPU here)."""
        gpus = self._base.node.gpus
        for gpu in gpus:
            if index_or_uuid in (gpu.uuid, str(gpu.index)):
                return gpu
        have = {0: "no GPUs", 1: "GPU 0"}.get(len(gpus), f"GPUs 0-{len(gpus) - 1}")
        raise UnknownDeviceError(f"no GPU with index or UUID {shorten(repr(index_or_uuid), 60)}: this node has {have}")

    def _changed(self) -> None:
        resources = []
        for r in self._base.resources:
            devices = tuple(
                dataclasses.replace(d, health=self._overrides[d.id]) if d.id in self._overrides else d
                for d in r.devices
            )
            resources.append(dataclasses.replace(r, devices=devices))
        self._view = dataclasses.replace(self._base, resources=tuple(resources))
        self.generation += 1
        self._listeners.announce()
