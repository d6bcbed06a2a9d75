"""The kubelet's client of one device plugin: dial, options, ListAndWatch and the allocation RPCs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import grpc

from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from fakegpu.runtime.background_tasks import cancel_and_wait

log = logging.getLogger(__name__)

DIAL_TIMEOUT = 10.0
CHANNEL_OPTIONS = [
    ("grpc.default_authority", "localhost"),
    # A plugin whose socket a kubelet restart just removed serves it again within milliseconds; retry
    # the dial quickly instead of after gRPC's default one-second backoff.
    ("grpc.initial_reconnect_backoff_ms", 20),
    ("grpc.min_reconnect_backoff_ms", 20),
    ("grpc.max_reconnect_backoff_ms", 200),
]
PRE_START_TIMEOUT = 30.0

DevicesCallback = Callable[[Sequence[api_pb2.Device]], Awaitable[None]]
EndCallback = Callable[[str], Awaitable[None]]


class PluginEndpoint:
    def __init__(self, resource: str, socket_path: Path) -> None:
        self.resource = resource
        self.socket_path = socket_path
        self._channel: grpc.aio.Channel | None = None
        self._stub: api_pb2_grpc.DevicePluginAsyncStub | None = None
        self.options = api_pb2.DevicePluginOptions()
        self._task: asyncio.Task[None] | None = None
        self.closed = False

    @property
    def stub(self) -> api_pb2_grpc.DevicePluginAsyncStub:
        if self._stub is None:
            raise RuntimeError(f"endpoint {self.socket_path} is not connected")
        return self._stub

    async def connect(self) -> api_pb2.DevicePluginOptions:
        """Dial (blocking, 10 s) and call GetDevicePluginOptions, as the kubelet does inside Register."""
        self._channel = grpc.aio.insecure_channel(f"unix://{self.socket_path}", options=CHANNEL_OPTIONS)
        self._stub = api_pb2_grpc.DevicePluginStub(self._channel)
        try:
            self.options = await self._stub.GetDevicePluginOptions(
                api_pb2.Empty(), timeout=DIAL_TIMEOUT, wait_for_ready=True
            )
        except grpc.aio.AioRpcError:
            await self.close()
            raise
        return self.options

    def start_watch(self, on_devices: DevicesCallback, on_end: EndCallback) -> None:
        self._task = asyncio.create_task(self._watch(on_devices, on_end), name=f"law-{self.resource}")

    async def _watch(self, on_devices: DevicesCallback, on_end: EndCallback) -> None:
        reason = "EOF"
        try:
            stream = self.stub.ListAndWatch(api_pb2.Empty())
            async for response in stream:
                await on_devices(list(response.devices))
        except grpc.aio.AioRpcError as exc:
            reason = f"rpc error: code = {exc.code().name} desc = {exc.details()}"
        except asyncio.CancelledError:
            return
        if not self.closed:
            log.info("ListAndWatch ended unexpectedly for device plugin %s: %s", self.resource, reason)
            await on_end(reason)

    async def get_preferred_allocation(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        request = api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available), must_include_deviceIDs=list(must_include), allocation_size=size
                )
            ]
        )
        response = await self.stub.GetPreferredAllocation(request)
        if not response.container_responses:
            return []
        return list(response.container_responses[0].deviceIDs)

    async def allocate(self, ids: Sequence[str]) -> api_pb2.ContainerAllocateResponse:
        request = api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=list(ids))])
        response = await self.stub.Allocate(request)
        if not response.container_responses:
            raise ValueError("no containers return in allocation response")
        return response.container_responses[0]

    async def pre_start(self, ids: Sequence[str]) -> None:
        await self.stub.PreStartContainer(
            api_pb2.PreStartContainerRequest(devices_ids=list(ids)), timeout=PRE_START_TIMEOUT
        )

    async def close(self) -> None:
        self.closed = True
        await cancel_and_wait([self._task])
        self._task = None
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
