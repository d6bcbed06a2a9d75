"""The DRA resource health service (``v1alpha1.DRAResourceHealth``): the complete device list with
health, sent at once and again on every change of the live inventory (pushed, not polled)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import grpc

from fakegpu.kubeletapi.drahealth.v1alpha1 import api_pb2, api_pb2_grpc
from fakegpu.runtime.change_stream import state_changes
from fakegpu.sharing.live_inventory import LiveInventory

HEALTH_CHECK_TIMEOUT_SECONDS = 60

DeviceHealthList = Callable[[], list[tuple[str, str, bool, str]]]
"""Returns (pool, device name, healthy, message) for every published device."""


class HealthService(api_pb2_grpc.DRAResourceHealthServicer):
    def __init__(self, live: LiveInventory, devices: DeviceHealthList) -> None:
        self.live = live
        self.devices = devices
        self._stopping = asyncio.Event()
        self._changed_at: dict[tuple[str, str], tuple[bool, int]] = {}

    def stop_streams(self) -> None:
        self._stopping.set()

    def _message(self) -> api_pb2.NodeWatchResourcesResponse:
        now = int(time.time())
        out = []
        for pool, name, healthy, message in self.devices():
            key = (pool, name)
            previous = self._changed_at.get(key)
            if previous is None or previous[0] != healthy:
                self._changed_at[key] = (healthy, now)
            out.append(
                api_pb2.DeviceHealth(
                    device=api_pb2.DeviceIdentifier(pool_name=pool, device_name=name),
                    health=api_pb2.HEALTHY if healthy else api_pb2.UNHEALTHY,
                    last_updated_time=self._changed_at[key][1],
                    health_check_timeout_seconds=HEALTH_CHECK_TIMEOUT_SECONDS,
                    message=message,
                )
            )
        return api_pb2.NodeWatchResourcesResponse(devices=out)

    async def NodeWatchResources(
        self,
        request: api_pb2.NodeWatchResourcesRequest,
        context: grpc.aio.ServicerContext[api_pb2.NodeWatchResourcesRequest, api_pb2.NodeWatchResourcesResponse],
    ) -> AsyncIterator[api_pb2.NodeWatchResourcesResponse]:
        last = None
        async for _ in state_changes(self.live, self._stopping):
            current = self._message()
            if current != last:
                last = current
                yield current
