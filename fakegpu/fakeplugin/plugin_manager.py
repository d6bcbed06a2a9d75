"""Runs the device plugin servers for every resource and keeps them registered with the kubelet.

It reacts to both signs of a kubelet restart: ``kubelet.sock`` re-created (NVIDIA restarts all its
plugins then) and a plugin's own socket deleted (the kubelet removes every socket at start). It
tolerates a missing ``kubelet.sock`` and registers when it appears. A reload that fails leaves the
running inventory serving and records the error.

A socket path another live process serves (a second plugin on the same kubelet directory) is never taken
over: the resource waits, looking again with a capped backoff, and a socket removed again and again is
served again at a falling rate (``fakegpu.fakeplugin.socket_contention``), so two plugins do not fight.

Start, stop and registration are logged with NVIDIA's lines (``internal/plugin/server.go``,
``cmd/nvidia-device-plugin/main.go``), so log greps written for the real plugin carry over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fakegpu.fakeplugin.imex_channels import select_imex_channels
from fakegpu.fakeplugin.kubelet_registration import RegistrationError, register_with_kubelet
from fakegpu.fakeplugin.metrics import DevicePluginMetrics
from fakegpu.fakeplugin.resource_server import ResourceServer
from fakegpu.fakeplugin.socket_contention import PeerWaits, ReservePacing, wait_line
from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.runtime.plugin_registration import RegistrationService, RegistryRegistration, registry_socket_name
from fakegpu.runtime.unix_socket import SocketInUse, identity, listening_pid
from fakegpu.sharing.bug_modes import BugMode
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inventory import Inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.sharing.mps_daemon import PLUGIN_WAIT_ERROR, mps_daemon_error

log = logging.getLogger(__name__)

PLUGIN_SOCKET_PREFIX = "nvidia-"
PLUGIN_SOCKET_SUFFIX = ".sock"


def plugin_socket_name(resource: str) -> str:
    """``nvidia.com/gpu`` -> ``nvidia-gpu.sock`` in ``device-plugins/``, as NVIDIA's plugin names its sockets."""
    return PLUGIN_SOCKET_PREFIX + resource.split("/", 1)[1] + PLUGIN_SOCKET_SUFFIX


RegistrationMode = Literal["kubelet", "plugins-registry", "none"]
"""``none``: serve without registering, as NVIDIA does with an empty ``--kubelet-socket``."""


@dataclass
class ManagerStats:
    registrations: int = 0
    registration_failures: int = 0
    restarts: int = 0
    reserves: int = 0
    """Sockets served again after they were removed."""
    peer_waits: int = 0
    """Looks at a socket path that found another live process serving it."""
    reloads: int = 0
    reload_errors: list[str] = field(default_factory=list)
    last_registered: dict[str, float] = field(default_factory=dict)
    last_error: str = ""
    watch_steps: int = 0
    """Steps of the watch loop finished: once it grew by two, a step began after whatever came before
    (a test's barrier for "the plugins looked and did nothing")."""


class PluginManager:
    def __init__(
        self,
        live: LiveInventory,
        paths: KubeletPaths,
        *,
        registration: RegistrationMode = "kubelet",
        pre_start_required: bool = False,
        reload_inventory: Callable[[], Inventory] | None = None,
        watch_files: Sequence[Path] = (),
        retry_interval: float = 30.0,
        poll_interval: float = 0.05,
        on_call: Callable[[str, str, Sequence[str]], None] | None = None,
        metrics: DevicePluginMetrics | None = None,
        peer_waits: PeerWaits | None = None,
        reserve_pacing: ReservePacing | None = None,
        before_start: Callable[[], None] | None = None,
    ) -> None:
        """``before_start`` runs at the top of every :meth:`start` (the plugin stack gives the
        ``random-device-ids`` bug mode its fresh IDs there); a SpecError from it fails the start."""
        self.live = live
        self.metrics = metrics if metrics is not None else DevicePluginMetrics(live)
        self.paths = paths
        self.registration = registration
        self.pre_start_required = pre_start_required
        self.reload_inventory = reload_inventory
        self.watch_files = list(watch_files)
        self.retry_interval = retry_interval
        self.poll_interval = poll_interval
        self.on_call = on_call
        self.before_start = before_start
        self.servers: dict[str, ResourceServer] = {}
        self.registry: dict[str, RegistryRegistration] = {}
        self.registered: dict[str, bool] = {}
        self._next_retry: dict[str, float] = {}
        self.stats = ManagerStats()
        self.peer_waits = peer_waits if peer_waits is not None else PeerWaits()
        self.reserve_pacing = reserve_pacing if reserve_pacing is not None else ReservePacing()
        self._kubelet_identity: tuple[int, int] | None = None
        self._file_stamps: dict[Path, float | None] = {}
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._paced: set[str] = set()
        """Resources whose paced re-serve was logged (once per pause)."""
        self._removed_under: dict[str, tuple[int, int] | None] = {}
        """Per resource: the kubelet.sock identity at its socket's last removal (a new one: the kubelet restarted)."""

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Serve and register every resource; raises SpecError, serving nothing, if a required IMEX channel
        is missing (NVIDIA's plugin exits: ``error starting plugins: ...``)."""
        if self.before_start is not None:
            self.before_start()
        select_imex_channels(self.live.inventory)
        self._kubelet_identity = identity(self.paths.kubelet_socket)
        self._file_stamps = {p: _mtime(p) for p in self.watch_files}
        log.info("Starting Plugins.")
        async with self._lock:
            await self._reconcile()
        self._task = asyncio.create_task(self._watch(), name="fakegpu-plugin-watch")

    async def stop(self) -> None:
        await cancel_and_wait([self._task])
        self._task = None
        log.info("Stopping plugins.")
        async with self._lock:
            for name in list(self.servers):
                await self._stop_one(name)

    @property
    def running(self) -> bool:
        """True between start() and stop(): the watch loop serves and re-registers the plugins."""
        return self._task is not None and not self._task.done()

    def not_ready(self) -> str | None:
        """Why the node does not have every resource yet (one line), or ``None``: the ``/readyz`` answer.

        Ready once every resource served is registered with the kubelet: its ``Register`` call answered (or,
        in plugins-registry mode, its NotifyRegistrationStatus said registered). Not ready again while a
        registration is lost (kubelet.sock gone or re-created, socket removed) until it is registered again, and while a
        resource cannot be served at all (its MPS control daemon would not run). Registration ``none`` (no
        kubelet to register with) is ready once the servers serve. No devices at all is ready: NVIDIA's
        plugin then waits indefinitely with nothing to register."""
        if not self.running:
            return "the device plugin servers are not started yet"
        blocked = self.blocked()
        missing = [f"{name} is not served: {error}" for name, error in blocked.items()]
        kubelet_gone = self.registration == "kubelet" and identity(self.paths.kubelet_socket) is None
        unregistered = [
            n for n in self.wanted(blocked) if n not in self.servers or not self.registered.get(n) or kubelet_gone
        ]
        if self.registration == "none":
            unregistered = [n for n in unregistered if n not in self.servers]
        if unregistered:
            detail = ""
            refused = [r.service.error for n in unregistered if (r := self.registry.get(n)) and r.service.error]
            peers = [w.describe() for n in unregistered if (w := self.peer_waits.waiting.get(n)) is not None]
            if peers:
                detail = f" ({peers[0]})"
            elif kubelet_gone:  # the kubelet stopped (or never started): its registrations went with it
                detail = f" (waiting for {self.paths.kubelet_socket})"
            elif any(n in self._next_retry for n in unregistered):
                detail = f" (last error: {self.stats.last_error}; retrying every {self.retry_interval:.0f}s)"
            elif refused:
                detail = f" (the kubelet refused: {refused[0]})"
            missing.append(f"not registered with the kubelet: {', '.join(unregistered)}{detail}")
        return "; ".join(missing) or None

    def wanted(self, blocked: Mapping[str, str] | None = None) -> list[str]:
        """Resources to serve: those with at least one device (NVIDIA skips empty ones), except those whose
        MPS control daemon would not run (NVIDIA's Start fails in waitForDaemon; ``blocked``, computed here
        unless the caller already has it)."""
        if blocked is None:
            blocked = self.blocked()
        return [r.name for r in self.live.inventory.resources if r.devices and r.name not in blocked]

    def blocked(self) -> dict[str, str]:
        """Resources NVIDIA's plugin cannot start, with the MPS control daemon's start error
        (``fakegpu.sharing.mps_daemon``): more MPS replicas than an MPS server takes clients."""
        node = self.live.inventory.node
        found = ((r.name, mps_daemon_error(r, node)) for r in self.live.inventory.resources if r.devices)
        return {name: error for name, error in found if error is not None}

    # -- serving ---------------------------------------------------------------------------------
    def _socket_path(self, name: str) -> Path:
        return self.paths.device_plugins / plugin_socket_name(name)

    def _make_server(self, name: str) -> ResourceServer:
        def record(method: str, ids: Sequence[str]) -> None:
            if self.on_call is not None:
                self.on_call(name, method, ids)

        return ResourceServer(
            self.live,
            name,
            self._socket_path(name),
            pre_start_required=self.pre_start_required,
            on_call=record,
            metrics=self.metrics,
        )

    async def _start_one(self, name: str) -> None:
        server = self.servers.get(name) or self._make_server(name)
        self.servers[name] = server
        log.info("Starting GRPC server for '%s'", name)
        try:
            await server.start()
        except SocketInUse as exc:
            self.servers.pop(name, None)
            self._wait_for_peer(name, exc.path, exc.pid)
            return
        waited = self.peer_waits.done(name)
        if waited is not None:
            log.info("%s is free again after %d looks; serving '%s'", waited.path, waited.attempts, name)
        log.info("Starting to serve '%s' on %s", name, server.socket_path)
        self.registered[name] = False
        if self.registration == "none":
            log.info("Skipping registration with Kubelet")
        elif self.registration == "plugins-registry":
            service = RegistrationService(
                name, str(server.socket_path), ["v1beta1"], on_status=self._registry_status_callback(name)
            )
            reg = RegistryRegistration(self.paths.plugins_registry / registry_socket_name(name), service)
            old = self.registry.pop(name, None)
            if old is not None:
                await old.stop()
            try:
                await reg.start()
            except SocketInUse as exc:  # the peer serves the registration socket, if not the plugin's
                await self._stop_one(name)
                self._wait_for_peer(name, exc.path, exc.pid)
                return
            self.registry[name] = reg
        else:
            await self._register(name)

    def _wait_for_peer(self, name: str, path: Path, pid: int) -> None:
        """A live process serves ``name``'s socket path: look again later, never take it over."""
        self.stats.peer_waits += 1
        wait = self.peer_waits.found_peer(name, path, pid)
        self.registered.pop(name, None)
        self._next_retry.pop(name, None)
        (log.warning if wait.attempts == 1 else log.info)("%s", wait_line(wait))

    async def _stop_one(self, name: str) -> None:
        self.peer_waits.done(name)
        server = self.servers.pop(name, None)
        if server is not None:
            log.info("Stopping to serve '%s' on %s", name, server.socket_path)
            await server.stop()
        reg = self.registry.pop(name, None)
        if reg is not None:
            await reg.stop()
        self.registered.pop(name, None)
        self._next_retry.pop(name, None)

    async def _register(self, name: str) -> None:
        server = self.servers[name]
        kubelet = identity(self.paths.kubelet_socket)
        if kubelet is None:
            log.info("%s waits for %s", name, self.paths.kubelet_socket)
            return
        call = asyncio.create_task(
            register_with_kubelet(self.paths.kubelet_socket, name, server.socket_path.name, server.service.options),
            name=f"fakegpu-register-{name}",
        )
        try:
            while not call.done():
                await asyncio.wait({call}, timeout=self.poll_interval)
                if not call.done() and (identity(self.paths.kubelet_socket) != kubelet or not server.socket_intact()):
                    # The kubelet restarted under the call and wiped our socket: it cannot dial us back, so the
                    # call could only time out, leaving the node without these devices meanwhile. Drop it;
                    # the watch loop serves and registers again on its next step, with no retry delay.
                    log.info("%s: the kubelet restarted during registration; registering again", name)
                    return
            await call
        except RegistrationError as exc:
            self.stats.registration_failures += 1
            self.metrics.registration_failed(name)
            self.stats.last_error = str(exc)
            self._next_retry[name] = time.monotonic() + self.retry_interval
            log.error("Could not register device plugin: %s", exc)
            log.info("Failed to start one or more plugins. Retrying in %.0fs...", self.retry_interval)
            return
        finally:
            await cancel_and_wait([call])
        self.registered[name] = True
        self._next_retry.pop(name, None)
        self.stats.registrations += 1
        self.metrics.registered(name)
        self.stats.last_registered[name] = time.monotonic()
        log.info("Registered device plugin for '%s' with Kubelet", name)

    async def _reconcile(self) -> None:
        blocked = self.blocked()
        wanted = self.wanted(blocked)
        if not wanted and not self.servers and not blocked:
            log.info("No devices found. Waiting indefinitely.")
        for name in list(self.servers):
            if name not in wanted:
                if name not in blocked:
                    log.info("stopping %s: no longer in the inventory", name)
                await self._stop_one(name)
        for name, error in blocked.items():
            # The MPS control daemon (another pod on a real node) exits with this; the plugin then finds no
            # daemon to answer and leaves the resource unserved, retrying every 30 s to the same result.
            log.error("MPS control daemon for '%s' failed to start: %s", name, error)
            log.error("Failed to start plugin: %s", PLUGIN_WAIT_ERROR)
            self.stats.last_error = f"{name}: {error}"
        if blocked:
            log.info("Failed to start one or more plugins. Retrying in %.0fs...", self.retry_interval)
        for name in wanted:
            if name not in self.servers and name not in self.peer_waits.waiting:
                await self._start_one(name)
        for name in list(self.peer_waits.waiting):
            if name not in wanted:
                self.peer_waits.done(name)

    async def restart_all(self) -> None:
        """What NVIDIA does when kubelet.sock is created: stop every plugin, serve and register again."""
        async with self._lock:
            self.stats.restarts += 1
            log.info("Stopping plugins.")
            for name in list(self.servers):
                await self._stop_one(name)
            log.info("Starting Plugins.")
            await self._reconcile()

    def set_watch_files(self, paths: Sequence[Path]) -> None:
        """Watch other files from now on (the node's config label selected another config file)."""
        self.watch_files = list(paths)
        self._file_stamps = {p: _mtime(p) for p in self.watch_files}

    # -- reload ----------------------------------------------------------------------------------
    async def reload(self) -> bool:
        """Rebuild the inventory from its files; on error keep serving the last good one."""
        if self.reload_inventory is None:
            return False
        try:
            inventory = self.reload_inventory()
            # NVIDIA re-queries the channels on each restart of its plugins and exits if a required one is
            # gone; here the running inventory keeps serving instead, as with any rejected config.
            select_imex_channels(inventory)
        except SpecError as exc:
            self.stats.reload_errors.append(str(exc))
            self.metrics.reloaded(ok=False)
            log.error("config reload rejected, still serving the previous inventory: %s", exc)
            return False
        async with self._lock:
            # Stop servers of vanished resources first: their streams end with their last device list,
            # so the kubelet keeps the capacity and zeroes allocatable (stale until its grace period).
            remaining = {r.name for r in inventory.resources if r.devices}
            for name in list(self.servers):
                if name not in remaining:
                    await self._stop_one(name)
            self.live.replace(inventory)
            self.stats.reloads += 1
            self.metrics.reloaded(ok=True)
            await self._reconcile()
        for w in inventory.warnings:
            log.warning("%s", w)
        log.info("config reloaded: serving %s", ", ".join(self.wanted()) or "nothing")
        return True

    # -- watching --------------------------------------------------------------------------------
    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("plugin watch step failed; continuing")
            self.stats.watch_steps += 1

    async def _tick(self) -> None:
        """One step of the watch loop: reload on a changed input file, follow a kubelet restart, then keep
        every server served and registered."""
        if self._files_changed():
            await self.reload()
        current = identity(self.paths.kubelet_socket)
        if await self._follow_kubelet(current):
            return
        async with self._lock:
            await self._start_due_peers()
            for name, server in list(self.servers.items()):
                await self._keep_serving(name, server, current)

    def _files_changed(self) -> bool:
        """Whether a watched file changed since the last look (each one's stamp is updated)."""
        changed = False
        for path, stamp in self._file_stamps.items():
            now = _mtime(path)
            if now != stamp:
                self._file_stamps[path] = now
                changed = True
        return changed

    async def _follow_kubelet(self, current: tuple[int, int] | None) -> bool:
        """React to ``kubelet.sock`` as NVIDIA's inotify watch does; True when this step ends here (every
        plugin restarted, or the no-reregistration bug mode, which never looks further)."""
        if BugMode.NO_REREGISTRATION in self.live.bug_modes:
            # Bug-compatible: an old plugin that never notices a kubelet restart.
            self._kubelet_identity = current
            return True
        if current == self._kubelet_identity:
            return False
        self._kubelet_identity = current
        if current is None or self.registration != "kubelet":
            return False
        log.info("inotify: %s created, restarting.", self.paths.kubelet_socket)
        await self.restart_all()
        return True

    async def _start_due_peers(self) -> None:
        """Look again at the socket paths a live peer served: serve the ones freed that are still wanted."""
        for name in self.peer_waits.due():
            if name in self.wanted():
                await self._start_one(name)
            else:
                self.peer_waits.done(name)

    async def _keep_serving(self, name: str, server: ResourceServer, current: tuple[int, int] | None) -> None:
        """Serve ``name`` again if its socket was removed, renew a removed registration socket, or retry a
        failed registration once its retry time has come."""
        if not server.socket_intact():
            await self._serve_again(name, server)
        elif name in self.registry and not self.registry[name].socket_intact():
            await self._start_one_registry(name)
        elif (
            self.registration == "kubelet"
            and not self.registered.get(name)
            and current is not None
            and time.monotonic() >= self._next_retry.get(name, 0.0)
        ):
            await self._register(name)

    async def _serve_again(self, name: str, server: ResourceServer) -> None:
        """``name``'s socket was removed: serve (and register) it again, unless a peer or the pacing says wait."""
        if not await self._may_reserve(name, server.socket_path):
            return
        log.info("socket of %s was removed, serving and registering again", name)
        self.stats.reserves += 1
        self.reserve_pacing.reserved(name)
        if self.registration == "plugins-registry" and name in self.registry:
            # The kubelet's watcher still knows the registration socket; serving the device plugin socket
            # again is enough for it to reconnect. The metrics count the kubelet's NotifyRegistrationStatus
            # instead (_registry_status_callback).
            await server.stop()
            try:
                await server.start()
            except SocketInUse as exc:
                await self._stop_one(name)
                self._wait_for_peer(name, exc.path, exc.pid)
                return
            self.stats.registrations += 1
            self.stats.last_registered[name] = time.monotonic()
        else:
            await self._stop_one(name)
            await self._start_one(name)

    async def _may_reserve(self, name: str, path: Path) -> bool:
        """After ``name``'s socket was removed: serve it again now? Not while a live peer serves the path (stop
        ours and wait for the peer instead), nor before the pacing of repeated removals allows (removals that
        a kubelet restart explains are not paced: each start wipes the directory)."""
        pid = listening_pid(path)
        if pid is not None:
            await self._stop_one(name)
            self._wait_for_peer(name, path, pid)
            return False
        kubelet = identity(self.paths.kubelet_socket)
        if name not in self._removed_under or kubelet != self._removed_under[name]:
            # The kubelet restarted since the last removal (it wipes the directory each start): not a fight.
            self.reserve_pacing.forget(name)
        self._removed_under[name] = kubelet
        pause = self.reserve_pacing.wait_before_reserving(name)
        if pause > 0:
            if name not in self._paced:
                self._paced.add(name)
                log.warning(
                    "socket of %s was removed again soon after it was served; serving again in %.1f s", name, pause
                )
            return False
        self._paced.discard(name)
        return True

    async def _start_one_registry(self, name: str) -> None:
        server = self.servers[name]
        old = self.registry.pop(name)
        await old.stop()
        service = RegistrationService(
            name, str(server.socket_path), ["v1beta1"], on_status=self._registry_status_callback(name)
        )
        reg = RegistryRegistration(old.socket_path, service)
        self.registered[name] = False  # a new registration socket: registered once the kubelet says so
        await reg.start()
        self.registry[name] = reg

    def _registry_status_callback(self, name: str) -> Callable[[bool, str], None]:
        """plugins-registry mode: the kubelet's NotifyRegistrationStatus is the registration, so it is what
        the registration counters count and what readiness follows."""

        def on_status(registered: bool, error: str) -> None:
            if name in self.servers:
                self.registered[name] = registered
            if registered:
                self.metrics.registered(name)
            else:
                self.metrics.registration_failed(name)

        return on_status


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None
