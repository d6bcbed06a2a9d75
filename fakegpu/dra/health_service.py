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
from fakegpu.sharing.live_inventory import LiveInventory

HEALTH_CHECK_TIMEOUT_SECONDS = 60
HEARTBEAT_SECONDS = 15.0
"""NVIDIA's ``monitorHeartbeatInterval`` (``cmd/gpu-kubelet-plugin/device_health.go`` on main)."""

DeviceHealthList = Callable[[], list[tuple[str, str, Health, str]]]
"""Returns (pool, device name, health, message) for every published device."""
_STATUS: dict[Health, api_pb2.HealthStatus.ValueType] = {
    "Healthy": api_pb2.HEALTHY,
    "Unhealthy": api_pb2.UNHEALTHY,
    "Unknown": api_pb2.UNKNOWN,
}


class HealthService(api_pb2_grpc.DRAResourceHealthServicer):
    """Sends every device's health at once, on every change, and again every ``heartbeat`` seconds without
    one with fresh timestamps: the kubelet takes health older than the health check timeout as Unknown,
    so NVIDIA's driver re-sends on its monitor's 15 s heartbeat (``monitorHeartbeatInterval``)."""

    def __init__(self, live: LiveInventory, devices: DeviceHealthList, heartbeat: float = HEARTBEAT_SECONDS) -> None:
        self.live = live
        self.devices = devices
        self.heartbeat = heartbeat
        self._stopping = asyncio.Event()

    def stop_streams(self) -> None:
        self._stopping.set()

    def _message(self, devices: list[tuple[str, str, Health, str]]) -> api_pb2.NodeWatchResourcesResponse:
        now = int(time.time())
        return api_pb2.NodeWatchResourcesResponse(
            devices=[
                api_pb2.DeviceHealth(
                    device=api_pb2.DeviceIdentifier(pool_name=pool, device_name=name),
                    health=_STATUS[health],
                    last_updated_time=now,
                    health_check_timeout_seconds=HEALTH_CHECK_TIMEOUT_SECONDS,
                    message=message,
                )
                for pool, name, health, message in devices
            ]
        )

    async def NodeWatchResources(
        self,
        request: api_pb2.NodeWatchResourcesRequest,
        context: grpc.aio.ServicerContext[api_pb2.NodeWatchResourcesRequest, api_pb2.NodeWatchResourcesResponse],
    ) -> AsyncIterator[api_pb2.NodeWatchResourcesResponse]:
        changed = asyncio.Event()
        unsubscribe = self.live.subscribe(changed.set)
        try:
            last = None
            beat = True
            while not self._stopping.is_set():
                current = self.devices()
                if beat or current != last:
                    last = current
                    yield self._message(current)
                beat = not await self._wait(changed)
                changed.clear()
        finally:
            unsubscribe()

    async def _wait(self, changed: asyncio.Event) -> bool:
        """Until a change or the stop (True), or the heartbeat (False)."""
        waiters = [asyncio.ensure_future(changed.wait()), asyncio.ensure_future(self._stopping.wait())]
        try:
            done, _ = await asyncio.wait(waiters, timeout=self.heartbeat, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
        return bool(done)
