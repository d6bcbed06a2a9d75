"""The DevicePlugin gRPC service for one resource name, served over the live inventory.

ListAndWatch pushes the full device list at once and again on every change (a listener on the live
inventory wakes the stream; nothing polls). Bad requests are answered as NVIDIA's plugin answers them:
its RPCs return plain Go errors, which grpc-go sends as UNKNOWN, with NVIDIA's text (so a pod's
message reads ``rpc error: code = Unknown desc = ...`` as on a real node); nothing a client sends can
crash the server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence

import grpc

from fakegpu.control.injected_faults import apply_fault
from fakegpu.fakeplugin.allocate_response import container_allocate_response, validate_request
from fakegpu.fakeplugin.allocation_error import AllocationError
from fakegpu.fakeplugin.metrics import DevicePluginMetrics
from fakegpu.fakeplugin.preferred_allocation import preferred_allocation
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from fakegpu.runtime.change_stream import state_changes
from fakegpu.sharing.bug_modes import OFF_THE_BUS_XID, BugMode
from fakegpu.sharing.inventory import Resource
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.rpc_metrics import current_rpc, observed_stream, observed_unary

log = logging.getLogger(__name__)


def device_message(resource: Resource) -> api_pb2.ListAndWatchResponse:
    devices = []
    for d in resource.devices:
        topology = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=d.numa)]) if d.numa is not None else None
        devices.append(api_pb2.Device(ID=d.id, health=d.health, topology=topology))
    return api_pb2.ListAndWatchResponse(devices=devices)


def log_health_changes(
    resource_name: str, before: api_pb2.ListAndWatchResponse, after: api_pb2.ListAndWatchResponse
) -> None:
    """NVIDIA's ListAndWatch lines for a device whose health changed (``internal/plugin/server.go``)."""
    was = {d.ID: d.health for d in before.devices}
    for device in after.devices:
        if device.ID in was and was[device.ID] != device.health:
            state = "unhealthy" if device.health == "Unhealthy" else "healthy"
            log.info("'%s' device marked %s: %s", resource_name, state, device.ID)


def _lost_gpu_breaks_alignment(live: LiveInventory, resource: Resource) -> str | None:
    """Bug-compatible NVIDIA #2038: the aligned allocator asks NVML for the links of every GPU, so one
    GPU off the bus (XID 79) fails GetPreferredAllocation for whole-GPU requests on the node."""
    if BugMode.PREFERRED_ALLOCATION_FAILS_OFF_BUS not in live.bug_modes:
        return None
    if any(d.is_mig or d.replica is not None for d in resource.devices):
        return None
    unhealthy = live.unhealthy()
    gpus = live.inventory.node.gpus
    lost = [g.index for g in gpus if unhealthy.get(g.uuid, None) == OFF_THE_BUS_XID]
    if not lost:
        return None
    other = next((g.index for g in gpus if g.index != lost[0]), lost[0])
    return (
        "unable to get device link information: error getting NVLink for devices "
        f"({other}, {lost[0]}): failed to get nvlink remote pci info: failed to get nvlink state: GPU is lost"
    )


class DevicePluginService(api_pb2_grpc.DevicePluginServicer):
    """One resource's DevicePlugin service (``/v1beta1.DevicePlugin/*``)."""

    def __init__(
        self,
        live: LiveInventory,
        resource_name: str,
        *,
        pre_start_required: bool = False,
        on_call: Callable[[str, Sequence[str]], None] | None = None,
        metrics: DevicePluginMetrics | None = None,
    ) -> None:
        self.live = live
        self.resource_name = resource_name
        self.options = api_pb2.DevicePluginOptions(
            pre_start_required=pre_start_required, get_preferred_allocation_available=True
        )
        self._stopping = asyncio.Event()
        self._on_call = on_call
        self._last: Resource | None = None
        self.streams = 0
        self.sends = 0
        self.metrics = metrics if metrics is not None else DevicePluginMetrics(live)
        self.metrics.serving(resource_name)
        self.rpc_observer = self.metrics.rpc.observer(resource_name)

    def stop_streams(self) -> None:
        """End every ListAndWatch stream cleanly, as NVIDIA's plugin does when it stops."""
        self._stopping.set()

    def end_streams(self) -> int:
        """End the open ListAndWatch streams but keep serving (a fault: the kubelet sees EOF)."""
        open_streams = self.streams
        ended, self._stopping = self._stopping, asyncio.Event()
        ended.set()
        return open_streams

    def _resource(self) -> Resource:
        resource = self.live.resource(self.resource_name)
        if resource is not None:
            self._last = resource
            return resource
        # The resource vanished in a reload and this server is about to stop: keep reporting the last
        # devices, so the kubelet keeps their capacity (and zeroes allocatable) as with a real plugin.
        if self._last is not None:
            return self._last
        return Resource(self.resource_name, self.resource_name, (), "none", 1, False)

    def _record(self, method: str, ids: Sequence[str]) -> None:
        call = current_rpc()  # the IDs go into the RPC's one debug line (fakegpu.telemetry.rpc_metrics)
        if call is not None:
            call.devices.extend(ids)
        if self._on_call is not None:
            self._on_call(method, ids)

    @observed_unary
    async def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: grpc.aio.ServicerContext[api_pb2.Empty, api_pb2.DevicePluginOptions]
    ) -> api_pb2.DevicePluginOptions:
        self._record("GetDevicePluginOptions", ())
        await apply_fault(self.live.faults, "GetDevicePluginOptions", self.resource_name, context)
        return self.options

    @observed_stream
    async def ListAndWatch(
        self,
        request: api_pb2.Empty,
        context: grpc.aio.ServicerContext[api_pb2.Empty, api_pb2.ListAndWatchResponse],
    ) -> AsyncIterator[api_pb2.ListAndWatchResponse]:
        self._record("ListAndWatch", ())
        await apply_fault(self.live.faults, "ListAndWatch", self.resource_name, context)
        self.streams += 1
        streams = self.metrics.list_and_watch_streams.labels(resource=self.resource_name)
        sends = self.metrics.list_and_watch_sends.labels(resource=self.resource_name)
        streams.inc()
        last = None
        try:
            async for _ in state_changes(self.live, self._stopping):
                current = device_message(self._resource())
                if current != last:
                    if last is not None:
                        log_health_changes(self.resource_name, last, current)
                    last = current
                    self.sends += 1
                    sends.inc()
                    yield current
        finally:
            self.streams -= 1
            streams.dec()

    @observed_unary
    async def GetPreferredAllocation(
        self,
        request: api_pb2.PreferredAllocationRequest,
        context: grpc.aio.ServicerContext[api_pb2.PreferredAllocationRequest, api_pb2.PreferredAllocationResponse],
    ) -> api_pb2.PreferredAllocationResponse:
        await apply_fault(self.live.faults, "GetPreferredAllocation", self.resource_name, context)
        resource = self._resource()
        inventory = self.live.inventory
        lost = _lost_gpu_breaks_alignment(self.live, resource)
        if lost is not None:
            await context.abort(grpc.StatusCode.UNKNOWN, f"error getting list of preferred allocation devices: {lost}")
        responses = []
        for req in request.container_requests:
            self._record("GetPreferredAllocation", list(req.available_deviceIDs))
            try:
                ids = preferred_allocation(
                    resource,
                    inventory.node,
                    list(req.available_deviceIDs),
                    list(req.must_include_deviceIDs),
                    req.allocation_size,
                    inventory.config.shared_devices_allocation_policy,
                )
            except AllocationError as exc:
                # NVIDIA returns a plain Go error here, which gRPC sends as Unknown.
                await context.abort(
                    grpc.StatusCode.UNKNOWN, f"error getting list of preferred allocation devices: {exc}"
                )
            responses.append(api_pb2.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return api_pb2.PreferredAllocationResponse(container_responses=responses)

    @observed_unary
    async def Allocate(
        self,
        request: api_pb2.AllocateRequest,
        context: grpc.aio.ServicerContext[api_pb2.AllocateRequest, api_pb2.AllocateResponse],
    ) -> api_pb2.AllocateResponse:
        await apply_fault(self.live.faults, "Allocate", self.resource_name, context)
        resource = self._resource()
        inventory = self.live.inventory
        responses = []
        for req in request.container_requests:
            ids = list(req.devices_ids)
            self._record("Allocate", ids)
            try:
                validate_request(resource, ids)
                responses.append(container_allocate_response(inventory, resource, ids))
            except AllocationError as exc:
                # NVIDIA's Allocate returns a plain Go error (internal/plugin/server.go): gRPC sends Unknown.
                await context.abort(grpc.StatusCode.UNKNOWN, str(exc))
        # One served call for each GPU it used: a GPU fault armed with after_calls counts it down (and may
        # strike now; the call itself is answered, as NVIDIA's Allocate never reads device health).
        asked = {i for req in request.container_requests for i in req.devices_ids}
        self.live.note_call({d.parent for d in resource.devices if d.id in asked})
        return api_pb2.AllocateResponse(container_responses=responses)

    @observed_unary
    async def PreStartContainer(
        self,
        request: api_pb2.PreStartContainerRequest,
        context: grpc.aio.ServicerContext[api_pb2.PreStartContainerRequest, api_pb2.PreStartContainerResponse],
    ) -> api_pb2.PreStartContainerResponse:
        # NVIDIA's plugin answers every PreStartContainer with an empty response.
        self._record("PreStartContainer", list(request.devices_ids))
        await apply_fault(self.live.faults, "PreStartContainer", self.resource_name, context)
        return api_pb2.PreStartContainerResponse()
