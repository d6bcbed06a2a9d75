"""The kubelet side of a DRA driver: the DRA socket and the plugins_registry registration socket.

As the Go helper does: serve the DRA socket first (DRAPlugin v1 and v1beta1, and the health service),
then the registration socket, whose GetInfo names the driver, the DRA socket and the supported
services (v1 first: the kubelet takes the first it supports). Sockets that vanish are served again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc

from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.runtime.directories import ensure_dir
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.runtime.plugin_registration import RegistrationService, RegistryRegistration, registry_socket_name
from fakegpu.runtime.socket_server import SocketServer
from fakegpu.runtime.unix_socket import SocketInUse, pid_text

log = logging.getLogger(__name__)

DRA_PLUGIN_TYPE = "DRAPlugin"
HEALTH_SERVICE = "v1alpha1.DRAResourceHealth"
SUPPORTED_SERVICES = ["v1.DRAPlugin", "v1beta1.DRAPlugin", HEALTH_SERVICE]


class DraKubeletPlugin:
    def __init__(
        self,
        driver: str,
        paths: KubeletPaths,
        add_services: Callable[[grpc.aio.Server], None],
        *,
        poll_interval: float = 0.1,
        services: Sequence[str] = SUPPORTED_SERVICES,
    ) -> None:
        """``services``: what GetInfo offers (a driver without a health stream leaves that out)."""
        self.driver = driver
        self.paths = paths
        self.dra_socket = paths.dra_socket(driver)
        self._dra = SocketServer(self.dra_socket, add_services)
        self.registration_service = RegistrationService(
            driver, str(self.dra_socket), list(services), plugin_type=DRA_PLUGIN_TYPE
        )
        self._registration = RegistryRegistration(
            paths.plugins_registry / registry_socket_name(driver), self.registration_service
        )
        self.poll_interval = poll_interval
        self.restarts = 0
        self.watch_steps = 0
        """Looks at the sockets finished: once it grew by two, one began after whatever came before."""
        self._task: asyncio.Task[None] | None = None
        self._peer: Path | None = None
        """The socket path another live process serves, while this driver waits for it."""

    @property
    def registration_socket(self) -> str:
        return str(self._registration.socket_path)

    async def start(self) -> None:
        ensure_dir(self.paths.plugins_registry)
        await self._dra.start()
        await self._registration.start()
        self._task = asyncio.create_task(self._watch(), name=f"dra-sockets-{self.driver}")
        log.info("DRA driver %s serving %s, registered via %s", self.driver, self.dra_socket, self.registration_socket)

    async def stop(self) -> None:
        """Remove both sockets: a kubelet keeps dialling a stale DRA socket (kubernetes#132660)."""
        await cancel_and_wait([self._task])
        self._task = None
        await self._registration.stop()
        await self._dra.stop()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                await self._serve_vanished()
            except SocketInUse as exc:
                # Another live driver took the path over: never take it back from it (the two would fight);
                # look again each poll, saying so once.
                if self._peer != exc.path:
                    log.warning("another process serves %s%s; waiting for it to stop", exc.path, pid_text(exc.pid))
                self._peer = exc.path
            else:
                self._peer = None
            self.watch_steps += 1

    async def _serve_vanished(self) -> None:
        if not self._dra.socket_intact():
            if self._peer is None:
                log.info("DRA socket %s vanished; serving it again", self.dra_socket)
            await self._dra.stop()
            await self._dra.start()
            self.restarts += 1
        if not self._registration.socket_intact():
            if self._peer is None:
                log.info("registration socket %s vanished; serving it again", self.registration_socket)
            # The kubelet (restarted, or its watcher lost the socket) registers the new one anew: until
            # its NotifyRegistrationStatus, the driver is not registered (readiness follows this).
            self.registration_service.registered = None
            self.registration_service.error = ""
            await self._registration.stop()
            await self._registration.start()
            self.restarts += 1
