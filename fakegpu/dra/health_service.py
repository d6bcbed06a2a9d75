"""The DRA resource health service (``v1alpha1.DRAResourceHealth``): the complete device list with
health, sent at once and again on every change of the live inventory (pushed, not polled). Served, and
advertised, only with NVIDIA's ``NVMLDeviceHealthCheck`` gate, as NVIDIA's driver does on main."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import grpc

from fakegpu.dra.health_taints import Health
from fakegpu.kubeletapi.drahealth.v1alpha1 import api_pb2, api_pb2_grpc
from fakegpu.runtime.change_stream import state_changes
from fakegpu.sharing.live_inventory import LiveInventory

HEALTH_CHECK_TIMEOUT_SECONDS = 60

DeviceHealthList = Callable[[], list[tuple[str, str, Health, str]]]
"""Returns (pool, device name, health, message) for every published device."""
_STATUS: dict[Health, api_pb2.HealthStatus.ValueType] = {
    "Healthy": api_pb2.HEALTHY,
    "Unhealthy": api_pb2.UNHEALTHY,
    "Unknown": api_pb2.UNKNOWN,
}


class HealthService(api_pb2_grpc.DRAResourceHealthServicer):
    def __init__(self, live: LiveInventory, devices: DeviceHealthList) -> None:
        self.live = live
        self.devices = devices
        self._stopping = asyncio.Event()
        self._changed_at: dict[tuple[str, str], tuple[Health, str, int]] = {}

    def stop_streams(self) -> None:
        self._stopping.set()

    def _message(self) -> api_pb2.NodeWatchResourcesResponse:
        now = int(time.time())
        out = []
        for pool, name, health, message in self.devices():
            key = (pool, name)
            previous = self._changed_at.get(key)
            if previous is None or previous[:2] != (health, message):
                self._changed_at[key] = (health, message, now)
            out.append(
                api_pb2.DeviceHealth(
                    device=api_pb2.DeviceIdentifier(pool_name=pool, device_name=name),
                    health=_STATUS[health],
                    last_updated_time=self._changed_at[key][2],
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
