"""The kubelet's plugin watcher over ``plugins_registry/``: sockets that appear are asked GetInfo,
validated by the handler for their type, and told the outcome with NotifyRegistrationStatus.

Device plugins are handled by the emulator; DRA plugins (type ``DRAPlugin``) by ``dra_plugins.DraPluginRegistry``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2, api_pb2_grpc
from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.runtime.unix_socket import identity

log = logging.getLogger(__name__)

RegisterHandler = Callable[[api_pb2.PluginInfo, Path], Awaitable[None]]
DeregisterHandler = Callable[[api_pb2.PluginInfo], Awaitable[None]]


class RegistrationRejected(Exception):
    """The handler refused the plugin; the text goes back in NotifyRegistrationStatus.error."""


@dataclass
class PluginHandler:
    register: RegisterHandler
    deregister: DeregisterHandler


@dataclass
class _Known:
    identity: tuple[int, int]
    info: api_pb2.PluginInfo | None


class PluginWatcher:
    def __init__(self, registry_dir: Path, handlers: dict[str, PluginHandler], poll_interval: float = 0.1) -> None:
        self.registry_dir = registry_dir
        self.handlers = handlers
        self.poll_interval = poll_interval
        self.known: dict[Path, _Known] = {}
        self.events: list[tuple[str, str, str]] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.registry_dir.mkdir(parents=True, exist_ok=True)
        self._task = asyncio.create_task(self._run(), name="plugin-watcher")

    async def stop(self) -> None:
        await cancel_and_wait([self._task])
        self._task = None
        self.known.clear()

    async def _run(self) -> None:
        while True:
            try:
                await self.scan()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("plugin watcher scan failed; continuing")
            await asyncio.sleep(self.poll_interval)

    async def scan(self) -> None:
        present: dict[Path, tuple[int, int]] = {}
        for path in sorted(self.registry_dir.iterdir()) if self.registry_dir.is_dir() else []:
            if path.name.startswith("."):
                continue  # as the kubelet's plugin watcher: dot files are ignored (a socket not yet in place)
            ident = identity(path)
            if ident is not None:
                present[path] = ident
        for path, known in list(self.known.items()):
            if present.get(path) != known.identity:
                del self.known[path]
                if known.info is not None and known.info.type in self.handlers:
                    self.events.append(("deregister", known.info.type, known.info.name))
                    await self.handlers[known.info.type].deregister(known.info)
        for path, ident in present.items():
            if path not in self.known:
                self.known[path] = _Known(ident, None)
                self.known[path].info = await self._register(path)

    async def _register(self, path: Path) -> api_pb2.PluginInfo | None:
        async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
            stub = api_pb2_grpc.RegistrationStub(channel)
            try:
                info = await stub.GetInfo(api_pb2.InfoRequest(), timeout=5)
            except grpc.aio.AioRpcError as exc:
                log.error("GetInfo on %s failed: %s", path, exc.details())
                return None
            handler = self.handlers.get(info.type)
            error = ""
            if handler is None:
                error = f"no handler registered for plugin type: {info.type} at socket {path}"
            else:
                endpoint = Path(info.endpoint) if info.endpoint else path
                try:
                    await handler.register(info, endpoint)
                except RegistrationRejected as exc:
                    error = str(exc)
            self.events.append(("register" if not error else "rejected", info.type, info.name))
            with contextlib.suppress(grpc.aio.AioRpcError):
                await stub.NotifyRegistrationStatus(
                    api_pb2.RegistrationStatus(plugin_registered=not error, error=error), timeout=5
                )
            return info if not error else None
