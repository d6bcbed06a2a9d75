"""A whole fake GPU node in one process: the kubelet emulator plus fakegpu's device plugins.

The demo, the pytest plugin and the integration tests all use it, so they exercise the real servers
over real Unix sockets exactly as a kubelet would, and the plugin the ``fakegpu plugin`` daemon runs: both
build it with ``fakegpu.fakeplugin.plugin_stack``.

Its actions return only once the kubelet has seen their effect (``set_health``, ``inject_xid``,
``reload``, ``restart_plugins``, ``end_streams``): the plugins push device updates in their own tasks, so a
check made right after a plain inventory change would read the kubelet's old state and could pass on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lightkube import AsyncClient

from fakegpu.fakeplugin.call_log import CallLog
from fakegpu.fakeplugin.plugin_manager import RegistrationMode
from fakegpu.fakeplugin.plugin_stack import PluginStack
from fakegpu.kubelet.device_manager import ENDPOINT_STOP_GRACE_PERIOD
from fakegpu.kubelet.dra_manager import Backoff
from fakegpu.kubelet.dra_state import ClaimInfo
from fakegpu.kubelet.emulator import KubeletEmulator, PodResult
from fakegpu.kubelet.pod_claims import PodClaim
from fakegpu.kubelet.pod_status import container_statuses
from fakegpu.sharing.bug_modes import parse_bug_modes
from fakegpu.sharing.faults import FaultSpec, PlannedFault
from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.sharing.inventory import Inventory

log = logging.getLogger(__name__)


class FakeNode:
    """The kubelet emulator and the device plugin the ``fakegpu plugin`` daemon runs, built by the same
    ``PluginStack``: the same inputs (``CONFIG_FILE`` in ``env`` included) give the same devices, IDs,
    reloads, CDI specs (in ``cdi_root``, by default ``<root>/cdi``) and fake nvidia-smi files."""

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
        api_client: AsyncClient | None = None,
        prepare_backoff: Backoff | None = None,
        cdi_root: Path | None = None,
    ) -> None:
        """``api_client`` and ``prepare_backoff`` go to the kubelet emulator's DRA face: the client reads
        pod claims given without drivers, the backoff paces retries of claims that fail to prepare.
        Raises ``SpecError`` if the inputs describe no valid inventory."""
        self.root = root
        self.bug_modes = parse_bug_modes(bugs, "bugs")
        self.kubelet = KubeletEmulator(
            root, grace_period=grace_period, api_client=api_client, prepare_backoff=prepare_backoff
        )
        self.with_kubelet = with_kubelet
        self.calls = CallLog()
        self.cdi_root = cdi_root if cdi_root is not None else root / "cdi"
        """Where the plugin writes its CDI specs (with a CDI deviceListStrategy): the daemon's ``--cdi-root``."""
        self.stack = PluginStack(
            inputs,
            self.kubelet.paths,
            bug_modes=self.bug_modes,
            registration=registration,
            pre_start_required=pre_start_required,
            cdi_root=self.cdi_root,
            calls=self.calls,
        )
        self.live = self.stack.live
        self.plugins = self.stack.manager

    @property
    def inputs(self) -> InventoryInputs:
        """What the plugin serves from; set new inputs, then :meth:`reload` to serve them."""
        return self.stack.current.inputs

    @inputs.setter
    def inputs(self, inputs: InventoryInputs) -> None:
        self.stack.current.inputs = inputs

    @property
    def inventory(self) -> Inventory:
        return self.live.inventory

    async def start(self, timeout: float = 10.0) -> None:
        if self.with_kubelet:
            await self.kubelet.start()
        self.stack.write_files()
        await self.stack.start()
        if self.with_kubelet:
            await self.wait_synced(timeout)

    async def stop(self) -> None:
        await self.stack.stop()
        self.stack.close()
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

    def kubelet_current(self) -> bool:
        """True when the kubelet has seen the plugins' current devices: every resource it holds a live
        ListAndWatch stream for shows the health the plugins advertise now, and it holds no live stream of
        a resource the plugins no longer serve. Resources without a live stream (ended streams, a failed
        registration, the grace period) have nothing on the way, so they do not count."""
        for name, state in self.kubelet.manager.resources.items():
            if state.endpoint is None:
                continue
            server = self.plugins.servers.get(name)
            resource = self.live.resource(name)
            if server is None or not server.running or resource is None:
                return False  # the stream's end has not reached the kubelet yet
            want = {d.id: d.health for d in resource.devices}
            got = {i: d.health for i, d in state.devices.items()}
            if got != want:
                return False
        return True

    async def wait_kubelet_current(self, timeout: float = 5.0, what: str = "the change") -> float:
        """Wait until :meth:`kubelet_current`; returns seconds; TimeoutError naming ``what`` and the last view."""
        try:
            return await self.kubelet.wait_for(self.kubelet_current, timeout, f"the kubelet to see {what}")
        except TimeoutError as exc:
            raise TimeoutError(
                f"{exc}; kubelet allocatable {self.allocatable()}, plugins {self.expected()[1]}"
            ) from None

    def container_statuses(self, uid: str) -> list[dict[str, Any]]:
        """The pod's ``status.containerStatuses`` as a v1.36 kubelet writes them to the API server, each regular
        container's ``allocatedResourcesStatus`` (KEP-4680) included: per device-plugin resource it holds,
        ``{"name": "nvidia.com/gpu", "resources": [{"health": "Healthy", "resourceID": "GPU-..."}]}``; per DRA
        claim it names, ``claim:<name>`` with the CDI device IDs, the driver's health and message. Computed now
        from what the kubelet has seen: after a health change, wait with :meth:`wait_kubelet_current` first
        (``set_health`` and ``inject_xid`` do). KeyError for a pod the kubelet does not know."""
        return container_statuses(self.kubelet, uid)

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
        claims: Sequence[PodClaim | tuple[str, ...]] = (),
    ) -> PodResult:
        """Admit a pod on the emulated kubelet; name (default: the UID), namespace and annotations are
        what the pod resources API and the DCGM exporter report. ``claims`` (``(namespace, name, uid,
        *drivers)``) are prepared by the registered DRA drivers before the containers start; see
        ``KubeletEmulator.run_pod``."""
        return await self.kubelet.run_pod(
            uid, containers, name=name, namespace=namespace, annotations=annotations, claims=claims
        )

    def delete_pod(self, uid: str) -> None:
        self.kubelet.delete_pod(uid)

    async def remove_pod(self, uid: str) -> list[ClaimInfo]:
        """Delete the pod and unprepare the claims no pod uses any more; returns those claims."""
        return await self.kubelet.remove_pod(uid)

    async def set_health(self, target: str, healthy: bool, timeout: float = 5.0) -> list[str]:
        """Mark a device, a GPU (UUID or index) and everything on it healthy or unhealthy; returns the
        advertised IDs changed, once the kubelet shows the new health (``node.live.set_health`` does not wait)."""
        changed = self.live.set_health(target, healthy)
        await self.wait_kubelet_current(timeout, f"{target} {'healthy' if healthy else 'unhealthy'}")
        return changed

    async def inject_xid(self, target: str, xid: int, timeout: float = 5.0) -> list[str]:
        """An XID event (unhealthy unless the XID policy ignores it); returns the IDs changed, once the
        kubelet shows it."""
        changed = self.live.inject_xid(target, xid)
        await self.wait_kubelet_current(timeout, f"XID {xid} on {target}")
        return changed

    def fault(self, rpc: str, spec: FaultSpec) -> PlannedFault:
        """The next ``spec.times`` calls of ``rpc`` fail or stall. In effect on return: the plugins consult
        the plan on every call, so the next RPC the kubelet makes sees it."""
        return self.live.faults.inject(rpc, spec)

    async def end_streams(self, resource: str, timeout: float = 5.0) -> int:
        """End the ListAndWatch streams of ``resource`` while it keeps serving; returns how many ended,
        once the kubelet has seen them end (its devices unhealthy, allocatable 0). KeyError for a resource
        not served."""
        server = self.plugins.servers[resource]
        held = self.kubelet.manager.resources.get(resource)
        endpoint = held.endpoint if held is not None else None
        ended = server.service.end_streams()
        if endpoint is not None:
            await self.kubelet.wait_for(
                lambda: held is None or held.endpoint is not endpoint,
                timeout,
                f"the kubelet to see the ListAndWatch streams of {resource} end",
            )
        return ended

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

    async def stop_plugins(self, timeout: float = 5.0) -> None:
        """Stop every plugin server; returns once the kubelet has seen their streams end."""
        held = [(s, s.endpoint) for s in self.kubelet.manager.resources.values() if s.endpoint is not None]
        await self.stack.stop()
        if self.kubelet.running:
            await self.kubelet.wait_for(
                lambda: all(state.endpoint is not endpoint for state, endpoint in held),
                timeout,
                "the kubelet to see the plugins' streams end",
            )

    async def start_plugins(self, timeout: float = 5.0) -> None:
        """Start the plugin servers (they register as their mode says); returns once the kubelet holds the
        devices of every plugin it accepted (a registration refused or faulted leaves nothing to wait for).
        With ``random-device-ids`` the devices have fresh IDs, as after a restart of the buggy plugin."""
        self.stack.write_files()
        await self.stack.start()
        if self.kubelet.running:
            await self.wait_kubelet_current(timeout, "the plugins' devices")

    async def restart_plugins(self, timeout: float = 5.0) -> float:
        """Stop and start the plugins; returns seconds from the start until the kubelet has every device."""
        await self.stop_plugins(timeout)
        started = time.monotonic()
        await self.start_plugins(timeout)
        await self.wait_synced(timeout)
        return time.monotonic() - started

    async def reload(self, timeout: float = 5.0) -> bool:
        """Reload the inventory from ``inputs`` (the config manager's SIGHUP); True when accepted, then only
        once the kubelet has seen the new devices and the end of the resources that went away."""
        if not await self.plugins.reload():
            return False
        if self.kubelet.running:
            await self.wait_kubelet_current(timeout, "the reloaded inventory")
        return True

    async def settle(self, seconds: float = 0.05) -> None:
        """Deprecated: sleeping cannot show that nothing happened (the plugins may simply not have looked
        yet). Use :meth:`wait_plugins_looked` for "nothing happened", :meth:`wait_kubelet_current` for "the
        kubelet has seen the change"."""
        warnings.warn(
            "FakeNode.settle sleeps and proves nothing; use wait_plugins_looked() or wait_kubelet_current()",
            DeprecationWarning,
            stacklevel=2,
        )
        await asyncio.sleep(seconds)

    async def wait_plugins_looked(self, timeout: float = 5.0) -> None:
        """A barrier for "nothing happened": returns once the plugins' watch loop has begun and finished a
        step after this call (it checks the kubelet socket, the input files and re-registration), so
        whatever the plugins would do about a change made before the call they have done."""
        steps = self.plugins.stats.watch_steps
        await self.kubelet.wait_for(
            lambda: self.plugins.stats.watch_steps >= steps + 2, timeout, "the plugins' watch loop to look again"
        )
