"""A whole fake GPU node in one process: the kubelet emulator plus fakegpu's device plugins.

The demo, the pytest plugin and the integration tests all use it, so they exercise the real servers
over real Unix sockets exactly as a kubelet would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fakegpu.fakeplugin.plugin_manager import PluginManager, RegistrationMode
from fakegpu.kubelet.device_manager import ENDPOINT_STOP_GRACE_PERIOD
from fakegpu.kubelet.emulator import KubeletEmulator, PodResult
from fakegpu.sharing.bug_modes import parse_bug_modes
from fakegpu.sharing.health import XidPolicy
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.inventory import Inventory
from fakegpu.sharing.live_inventory import LiveInventory

log = logging.getLogger(__name__)


@dataclass
class CallLog:
    """Every RPC the plugins received, in order: (resource, method, device IDs)."""

    calls: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)

    def record(self, resource: str, method: str, ids: Sequence[str]) -> None:
        self.calls.append((resource, method, tuple(ids)))

    def methods(self, resource: str | None = None) -> list[str]:
        return [m for r, m, _ in self.calls if resource is None or r == resource]


class FakeNode:
    def __init__(
        self,
        root: Path,
        inputs: InventoryInputs,
        *,
        registration: RegistrationMode = "kubelet",
        pre_start_required: bool = False,
        grace_period: float = ENDPOINT_STOP_GRACE_PERIOD,
        with_kubelet: bool = True,
        bugs: Iterable[str] = (),
    ) -> None:
        self.root = root
        self.bug_modes = parse_bug_modes(bugs, "bugs")
        if "random-device-ids" in self.bug_modes:
            inputs = dataclasses.replace(inputs, id_salt=uuid.uuid4().hex)
        self.inputs = inputs
        self.kubelet = KubeletEmulator(root, grace_period=grace_period)
        self.with_kubelet = with_kubelet
        self.calls = CallLog()
        inventory = load_inventory(inputs)
        self.live = LiveInventory(inventory, XidPolicy.from_env(inputs.env), self.bug_modes)
        watch = [Path(p) for p in (inputs.config_file, inputs.node_spec, inputs.mig_config) if p]
        self.plugins = PluginManager(
            self.live,
            self.kubelet.paths,
            registration=registration,
            pre_start_required=pre_start_required,
            reload_inventory=lambda: load_inventory(self.inputs),
            watch_files=watch,
            on_call=self.calls.record,
        )

    @property
    def inventory(self) -> Inventory:
        return self.live.inventory

    async def start(self, timeout: float = 10.0) -> None:
        if self.with_kubelet:
            await self.kubelet.start()
        await self.plugins.start()
        if self.with_kubelet:
            await self.wait_synced(timeout)

    async def stop(self) -> None:
        await self.plugins.stop()
        if self.kubelet.running:
            await self.kubelet.stop()

    async def __aenter__(self) -> FakeNode:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- what the kubelet sees -----------------------------------------------------------------
    def expected(self) -> tuple[dict[str, int], dict[str, int]]:
        """Capacity and allocatable the kubelet should report for the resources the plugins serve."""
        served = set(self.plugins.wanted())
        capacity = {r.name: len(r.devices) for r in self.inventory.resources if r.name in served}
        allocatable = {r.name: r.healthy for r in self.inventory.resources if r.name in served}
        return capacity, allocatable

    def synced(self) -> bool:
        capacity, allocatable = self.expected()
        got_cap, got_alloc = self.kubelet.capacity(), self.kubelet.allocatable()
        return all(got_cap.get(k) == v for k, v in capacity.items()) and all(
            got_alloc.get(k) == v for k, v in allocatable.items()
        )

    async def wait_synced(self, timeout: float = 5.0) -> float:
        """Wait until the kubelet's capacity and allocatable match the inventory; returns seconds."""
        return await self.kubelet.wait_for(self.synced, timeout, "the kubelet to see every fake device")

    def capacity(self) -> dict[str, int]:
        return self.kubelet.capacity()

    def allocatable(self) -> dict[str, int]:
        return self.kubelet.allocatable()

    # -- actions -------------------------------------------------------------------------------
    async def run_pod(
        self,
        uid: str,
        containers: Mapping[str, Mapping[str, int]],
        *,
        name: str | None = None,
        namespace: str = "default",
        annotations: Mapping[str, str] | None = None,
    ) -> PodResult:
        """Admit a pod on the emulated kubelet; name (default: the UID), namespace and annotations are
        what the pod resources API and the DCGM exporter report."""
        return await self.kubelet.run_pod(uid, containers, name=name, namespace=namespace, annotations=annotations)

    def delete_pod(self, uid: str) -> None:
        self.kubelet.delete_pod(uid)

    def set_health(self, target: str, healthy: bool) -> list[str]:
        """Mark a device, a GPU (UUID or index) and everything on it healthy or unhealthy."""
        return self.live.set_health(target, healthy)

    async def restart_kubelet(self, timeout: float = 5.0) -> float:
        """Restart the kubelet emulator; returns seconds from its new start until every resource is
        registered again and its devices pushed."""
        await self.kubelet.stop()
        before = self.plugins.stats.registrations
        await self.kubelet.start()
        started = time.monotonic()
        wanted = len(self.plugins.wanted())
        await self.kubelet.wait_for(
            lambda: self.plugins.stats.registrations >= before + wanted and self.synced(),
            timeout,
            "plugins to re-register after a kubelet restart",
        )
        return time.monotonic() - started

    async def restart_plugins(self, timeout: float = 5.0) -> float:
        await self.plugins.stop()
        if "random-device-ids" in self.bug_modes:
            self.inputs = dataclasses.replace(self.inputs, id_salt=uuid.uuid4().hex)
            self.live.replace(load_inventory(self.inputs))
        started = time.monotonic()
        await self.plugins.start()
        await self.wait_synced(timeout)
        return time.monotonic() - started

    async def reload(self) -> bool:
        return await self.plugins.reload()

    async def settle(self, seconds: float = 0.05) -> None:
        await asyncio.sleep(seconds)
