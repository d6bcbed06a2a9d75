"""The kubelet's device manager: capacity versus allocatable, allocation, grace period, checkpoint.

Behaviour and texts follow the kubelet (kubernetes ``pkg/kubelet/cm/devicemanager``) and what a real
kubelet (v1.36.2) was seen to do: every ListAndWatch update replaces a resource's devices; healthy devices
are allocatable, all are capacity; a plugin whose stream ends has every device marked unhealthy and is
forgotten after the grace period; allocation asks GetPreferredAllocation for a hint, then Allocate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from fakegpu.kubelet.checkpoint import CheckpointData, PodDevicesEntry, read, write_atomically
from fakegpu.kubelet.clock import EmulatorClock
from fakegpu.kubelet.grpc_errors import go_rpc_error
from fakegpu.kubelet.plugin_endpoint import PluginEndpoint
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2

log = logging.getLogger(__name__)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
ENDPOINT_STOP_GRACE_PERIOD = 300.0
NO_NUMA = -1


class AdmissionError(Exception):
    """A pod the kubelet rejects; ``reason`` and ``str()`` are what its status would show."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class ResourceState:
    devices: dict[str, api_pb2.Device] = field(default_factory=dict)
    endpoint: PluginEndpoint | None = None
    stop_time: float | None = None
    options: api_pb2.DevicePluginOptions = field(default_factory=api_pb2.DevicePluginOptions)

    def healthy(self) -> list[str]:
        return sorted(i for i, d in self.devices.items() if d.health == HEALTHY)


@dataclass
class ContainerAllocation:
    pod_uid: str
    container: str
    resource: str
    device_ids: list[str]
    numa: dict[int, list[str]]
    response: api_pb2.ContainerAllocateResponse


class DeviceManager:
    def __init__(
        self, checkpoint_path: Path, clock: EmulatorClock, grace_period: float = ENDPOINT_STOP_GRACE_PERIOD
    ) -> None:
        self.checkpoint_path = checkpoint_path
        self.clock = clock
        self.grace_period = grace_period
        self.resources: dict[str, ResourceState] = {}
        self.allocations: list[ContainerAllocation] = []
        self.updates = 0
        self.on_change: Callable[[], None] | None = None
        """Called after the devices of a resource changed (an update, a plugin gone, a resource forgotten)."""

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # -- checkpoint --------------------------------------------------------------------------
    def restore(self) -> None:
        """Read the checkpoint at start: allocations come back; each registered resource gets a stopped
        endpoint with no devices (capacity 0) until its plugin registers again."""
        data = read(self.checkpoint_path)
        self.resources = {}
        self.allocations = []
        if data is None:
            return
        now = self.clock.now()
        for name in data.registered_devices:
            self.resources[name] = ResourceState(stop_time=now)
        for e in data.pod_device_entries:
            ids = [i for numa_ids in e.device_ids.values() for i in numa_ids]
            self.allocations.append(
                ContainerAllocation(
                    e.pod_uid,
                    e.container_name,
                    e.resource_name,
                    ids,
                    dict(e.device_ids),
                    api_pb2.ContainerAllocateResponse.FromString(e.alloc_resp),
                )
            )

    def write_checkpoint(self) -> None:
        entries = [
            PodDevicesEntry(a.pod_uid, a.container, a.resource, a.numa, a.response.SerializeToString())
            for a in self.allocations
        ]
        registered = {name: state.healthy() for name, state in sorted(self.resources.items())}
        write_atomically(self.checkpoint_path, CheckpointData(entries, registered))

    # -- plugin connection -------------------------------------------------------------------
    async def connect(self, resource: str, endpoint: PluginEndpoint) -> None:
        """A plugin registered: it replaces any previous endpoint of the resource."""
        state = self.resources.setdefault(resource, ResourceState())
        old = state.endpoint
        state.endpoint = endpoint
        state.stop_time = None
        state.options = endpoint.options
        if old is not None and old is not endpoint:
            await old.close()

        async def on_devices(devices: Sequence[api_pb2.Device]) -> None:
            if state.endpoint is not endpoint:
                return
            state.devices = {d.ID: d for d in devices}
            self.updates += 1
            log.info(
                "Processed device updates for resource %s totalCount=%d healthyCount=%d",
                resource,
                len(devices),
                len(state.healthy()),
            )
            self.write_checkpoint()
            self._changed()

        async def on_end(reason: str) -> None:
            if state.endpoint is endpoint:
                self.disconnect(resource)

        endpoint.start_watch(on_devices, on_end)

    def disconnect(self, resource: str) -> None:
        """Mark all resources Unhealthy: capacity stays, allocatable drops to 0, grace period starts."""
        state = self.resources.get(resource)
        if state is None:
            return
        for d in state.devices.values():
            d.health = UNHEALTHY
        state.stop_time = self.clock.now()
        state.endpoint = None
        log.info("Device plugin disconnected; all devices of %s marked unhealthy", resource)
        self._changed()

    async def close_all(self) -> None:
        for state in self.resources.values():
            if state.endpoint is not None:
                await state.endpoint.close()
                state.endpoint = None

    # -- node status -------------------------------------------------------------------------
    def _gc(self) -> None:
        now = self.clock.now()
        expired = [
            n for n, s in self.resources.items() if s.stop_time is not None and now - s.stop_time > self.grace_period
        ]
        for name in expired:
            log.info("removing resource %s: its plugin has been gone for more than %.0fs", name, self.grace_period)
            del self.resources[name]
        if expired:
            self.write_checkpoint()
            self._changed()

    def capacity(self) -> dict[str, int]:
        self._gc()
        return {n: len(s.devices) for n, s in sorted(self.resources.items())}

    def allocatable(self) -> dict[str, int]:
        self._gc()
        return {n: len(s.healthy()) for n, s in sorted(self.resources.items())}

    def in_use(self, resource: str, exclude_pod: str | None = None) -> set[str]:
        return {
            i for a in self.allocations if a.resource == resource and a.pod_uid != exclude_pod for i in a.device_ids
        }

    # -- allocation --------------------------------------------------------------------------
    def _existing(self, pod_uid: str, container: str, resource: str) -> ContainerAllocation | None:
        for a in self.allocations:
            if (a.pod_uid, a.container, a.resource) == (pod_uid, container, resource):
                return a
        return None

    async def allocate(
        self, pod_uid: str, container: str, resource: str, count: int, reusable: Collection[str] = ()
    ) -> api_pb2.ContainerAllocateResponse:
        """devicesToAllocate + Allocate, with the kubelet's error texts (wrapped as
        ``Allocate failed due to ..., which is unexpected``). ``reusable`` are the pod's devices a
        finished init container holds: the kubelet hands those out first (``devicesToReuse``)."""
        existing = self._existing(pod_uid, container, resource)
        if existing is not None:
            return existing.response
        try:
            return await self._allocate(pod_uid, container, resource, count, reusable)
        except _AllocateFailure as exc:
            raise AdmissionError(
                "UnexpectedAdmissionError", f"Allocate failed due to {exc}, which is unexpected"
            ) from None

    async def _allocate(
        self, pod_uid: str, container: str, resource: str, count: int, reusable: Collection[str] = ()
    ) -> api_pb2.ContainerAllocateResponse:
        state = self.resources.get(resource)
        if state is None:
            raise _AllocateFailure(f"cannot allocate unregistered device {resource}")
        healthy = state.healthy()
        if not healthy:
            raise _AllocateFailure(f"no healthy devices present; cannot allocate unhealthy devices {resource}")
        chosen = [i for i in healthy if i in reusable][:count]
        used = self.in_use(resource)
        available = [i for i in healthy if i not in used]
        if len(available) < count - len(chosen):
            raise _AllocateFailure(
                f"requested number of devices unavailable for {resource}. "
                f"Requested: {count - len(chosen)}, Available: {len(available)}"
            )
        endpoint = state.endpoint
        if endpoint is None:
            raise _AllocateFailure(f"endpoint {resource} has been stopped")
        if state.options.get_preferred_allocation_available and len(chosen) < count:
            try:
                preferred = await endpoint.get_preferred_allocation(available + chosen, chosen, count)
            except grpc.aio.AioRpcError as exc:
                raise _AllocateFailure(
                    f"device plugin GetPreferredAllocation rpc failed with err: {go_rpc_error(exc)}"
                ) from None
            chosen += [i for i in dict.fromkeys(preferred) if i in available][: count - len(chosen)]
        try:
            for i in available:
                if len(chosen) >= count:
                    break
                if i not in chosen:
                    chosen.append(i)
            response = await endpoint.allocate(chosen)
        except grpc.aio.AioRpcError as exc:
            raise _AllocateFailure(go_rpc_error(exc)) from None
        except ValueError as exc:
            raise _AllocateFailure(str(exc)) from None
        numa: dict[int, list[str]] = {}
        for i in chosen:
            device = state.devices.get(i)
            node = device.topology.nodes[0].ID if device is not None and device.topology.nodes else NO_NUMA
            numa.setdefault(node, []).append(i)
        self.allocations.append(ContainerAllocation(pod_uid, container, resource, chosen, numa, response))
        self.write_checkpoint()
        return response

    async def pre_start(self, pod_uid: str, container: str) -> None:
        """PreStartContainer for every resource of the container whose plugin asked for it."""
        for a in self.allocations:
            if (a.pod_uid, a.container) != (pod_uid, container):
                continue
            state = self.resources.get(a.resource)
            if state is None or not state.options.pre_start_required or state.endpoint is None:
                continue
            try:
                await state.endpoint.pre_start(a.device_ids)
            except grpc.aio.AioRpcError as exc:
                raise AdmissionError(
                    "RunContainerError", f"device plugin PreStartContainer rpc failed with err: {go_rpc_error(exc)}"
                ) from None

    def container_devices(self, pod_uid: str, container: str) -> dict[str, list[str]]:
        """resource -> device IDs the container holds."""
        return {
            a.resource: list(a.device_ids) for a in self.allocations if (a.pod_uid, a.container) == (pod_uid, container)
        }

    def container_responses(self, pod_uid: str) -> dict[str, dict[str, api_pb2.ContainerAllocateResponse]]:
        """container -> resource -> the Allocate response, as the checkpoint keeps it for a restart."""
        out: dict[str, dict[str, api_pb2.ContainerAllocateResponse]] = {}
        for a in self.allocations:
            if a.pod_uid == pod_uid:
                out.setdefault(a.container, {})[a.resource] = a.response
        return out

    def release_pod(self, pod_uid: str) -> None:
        before = len(self.allocations)
        self.allocations = [a for a in self.allocations if a.pod_uid != pod_uid]
        if len(self.allocations) != before:
            self.write_checkpoint()


class _AllocateFailure(Exception):
    pass
