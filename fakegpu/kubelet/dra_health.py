"""The kubelet's DRA device health: the health info cache and the ``NodeWatchResources`` streams that fill it.

Follows kubernetes ``pkg/kubelet/cm/dra/healthinfo.go`` (at commit 0062353) and ``HandleWatchResourcesStream``
in ``pkg/kubelet/cm/dra/manager.go`` (v1.36):

- a plugin whose registration lists ``v1alpha1.DRAResourceHealth`` gets one health stream; the kubelet opens it
  again 5 s after it ended (``wait.UntilWithContext`` with a 5 s period) until the plugin goes;
- every response is a full list: each device's health, message and timeout are stored with the time the kubelet
  received it; a device missing from a report turns ``Unknown`` once its timeout has passed;
- a device whose last report is older than its ``health_check_timeout_seconds`` (30 s when 0 or negative) reads
  ``Unknown`` with no message; a device never reported reads ``Unknown`` too;
- when the stream ends, for whatever reason, the driver's whole entry is cleared (its devices read ``Unknown``).

The kubelet checkpoints this cache in ``dra_health_state``; the emulator keeps it in memory (a restart opens the
streams again and the drivers send their full list at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from fakegpu.kubeletapi.drahealth.v1alpha1 import api_pb2, api_pb2_grpc
from fakegpu.runtime.background_tasks import cancel_and_wait

log = logging.getLogger(__name__)

HEALTH_SERVICE = "v1alpha1.DRAResourceHealth"
"""The health service a DRA plugin lists in its registration's supported versions when it serves it."""
DEFAULT_HEALTH_TIMEOUT = 30.0
"""``DefaultHealthTimeout``: a device's health is Unknown once its last report is older than this."""
STREAM_RETRY_PERIOD = 5.0
"""The period of the kubelet's ``wait.UntilWithContext`` around the stream: 5 s from one start to the next."""

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
UNKNOWN = "Unknown"
_HEALTH = {api_pb2.HEALTHY: HEALTHY, api_pb2.UNHEALTHY: UNHEALTHY}


@dataclass(frozen=True)
class DeviceHealth:
    """One device's last report (``state.DeviceHealth``)."""

    health: str
    message: str
    last_updated: float
    """When the kubelet received it (wall clock seconds)."""
    timeout: float


class HealthInfoCache:
    """Per driver, per ``<pool>/<device>``: the last health each plugin reported."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.drivers: dict[str, dict[str, DeviceHealth]] = {}

    def get(self, driver: str, pool: str, device: str) -> tuple[str, str]:
        """(health, message) now: Unknown and no message for a device never reported or reported too long ago."""
        entry = self.drivers.get(driver, {}).get(f"{pool}/{device}")
        if entry is None or self.clock() - entry.last_updated > entry.timeout:
            return UNKNOWN, ""
        return entry.health, entry.message

    def update(self, driver: str, response: api_pb2.NodeWatchResourcesResponse) -> list[str]:
        """Take one report (``updateHealthInfo``); returns the ``<pool>/<device>`` keys whose health, message or
        timeout changed, and those left out of it that have now timed out."""
        now = self.clock()
        devices = self.drivers.setdefault(driver, {})
        changed: list[str] = []
        reported: set[str] = set()
        for d in response.devices:
            key = f"{d.device.pool_name}/{d.device.device_name}"
            seconds = d.health_check_timeout_seconds
            timeout = float(seconds) if seconds > 0 else DEFAULT_HEALTH_TIMEOUT
            entry = DeviceHealth(_HEALTH.get(d.health, UNKNOWN), d.message, now, timeout)
            old = devices.get(key)
            if old is None or (old.health, old.message, old.timeout) != (entry.health, entry.message, entry.timeout):
                changed.append(key)
            devices[key] = entry
            reported.add(key)
        for key, old in list(devices.items()):
            if key not in reported and old.health != UNKNOWN and now - old.last_updated > old.timeout:
                devices[key] = DeviceHealth(UNKNOWN, "", now, old.timeout)
                changed.append(key)
        return changed

    def clear_driver(self, driver: str) -> bool:
        """The driver's stream ended: forget its devices (``clearDriver``). True when there was anything."""
        return self.drivers.pop(driver, None) is not None

    def next_expiry(self) -> float | None:
        """The earliest wall-clock time still to come at which a stored health times out (None without any), so
        that a listener can look again then instead of polling."""
        now = self.clock()
        times = [e.last_updated + e.timeout for devices in self.drivers.values() for e in devices.values()]
        return min((t for t in times if t >= now), default=None)


Listener = Callable[[], None]


class HealthStreams:
    """One ``NodeWatchResources`` stream per registered plugin that lists the health service, feeding
    ``cache``; ``on_change`` is called after a report changed anything, after a stream ended, and when a stored
    health times out."""

    def __init__(self, cache: HealthInfoCache, on_change: Listener, retry_period: float = STREAM_RETRY_PERIOD) -> None:
        self.cache = cache
        self.on_change = on_change
        self.retry_period = retry_period
        self._tasks: dict[tuple[str, Path], asyncio.Task[None]] = {}
        self._expiry: asyncio.TimerHandle | None = None
        self.reports = 0
        """Reports received on every stream (a test's barrier: the kubelet has read the driver's list)."""
        self.opened = 0

    def start(self, driver: str, endpoint: Path, supported: Sequence[str]) -> None:
        """A plugin registered: watch its health when it lists the health service."""
        if HEALTH_SERVICE not in supported:
            return
        key = (driver, endpoint)
        old = self._tasks.pop(key, None)
        if old is not None:
            old.cancel()
        self._tasks[key] = asyncio.create_task(self._run(driver, endpoint), name=f"dra-health-{driver}")

    async def stop(self, driver: str, endpoint: Path) -> None:
        """The plugin went: its stream ends (and its devices are forgotten)."""
        await cancel_and_wait([self._tasks.pop((driver, endpoint), None)])

    async def stop_all(self) -> None:
        tasks, self._tasks = list(self._tasks.values()), {}
        await cancel_and_wait(tasks)
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    async def _run(self, driver: str, endpoint: Path) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self._watch(driver, endpoint)
            except grpc.aio.AioRpcError as exc:
                log.info("DRA health stream of %s ended: %s", driver, exc.details() or exc.code().name)
            finally:
                if self.cache.clear_driver(driver):
                    self._changed()
            await asyncio.sleep(max(0.0, started + self.retry_period - loop.time()))

    async def _watch(self, driver: str, endpoint: Path) -> None:
        async with grpc.aio.insecure_channel(f"unix://{endpoint}") as channel:
            stream = api_pb2_grpc.DRAResourceHealthStub(channel).NodeWatchResources(api_pb2.NodeWatchResourcesRequest())
            self.opened += 1
            async for response in stream:
                self.reports += 1
                if self.cache.update(driver, response):
                    self._changed()
                else:
                    self._arm_expiry()
            log.info("DRA health stream of %s ended by the plugin", driver)

    def _changed(self) -> None:
        self._arm_expiry()
        self.on_change()

    def _arm_expiry(self) -> None:
        """Call ``on_change`` when the next stored health times out (it then reads Unknown)."""
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        when = self.cache.next_expiry()
        if when is None:
            return
        with contextlib.suppress(RuntimeError):  # no running loop: nothing waits for it
            delay = max(0.0, when - self.cache.clock()) + 0.01
            self._expiry = asyncio.get_running_loop().call_later(delay, self._expired)

    def _expired(self) -> None:
        self._expiry = None
        self._changed()
