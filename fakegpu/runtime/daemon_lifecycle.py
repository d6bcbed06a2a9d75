"""The lifecycle both daemons share: stop signals, then what they serve started in order and stopped in reverse.

``fakegpu plugin`` and ``fakegpu dra`` serve the same things around their face (the device plugin manager,
the DRA driver): the nvidia-smi files, written before any device is handed out; the metrics endpoint and
the fake dcgm-exporter; the admin socket. They start in that order, the face last, and stop the other way
round, the endpoints last, so nothing is asked about a face that is gone.

SIGINT, SIGTERM and SIGQUIT end ``wait()`` from the moment the context is entered (a daemon that waits for
its Node's config label must stop too); SIGHUP reloads once a face says how. On the way out the signal
handlers are removed first, so a second signal during shutdown ends the process the default way
(``run_bounded`` bounds what a plain return leaves behind), and everything handed over is stopped, started
or not: a start that failed leaves the others holding sockets or clients from their construction.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterable, Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Final, Protocol, Self

STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT)
RELOAD_SIGNAL: Final = signal.SIGHUP


class Service(Protocol):
    """Anything a daemon serves from ``start()`` to ``stop()``."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def _stop_in_order(*groups: Sequence[Service]) -> None:
    for group in groups:
        for service in group:
            await service.stop()


class DaemonLifecycle:
    """``async with DaemonLifecycle(stop) as daemon:`` build the face, then ``await daemon.serve(...)`` and
    ``await daemon.wait()``; leaving the block (stop signal, error or return) undoes everything in reverse."""

    def __init__(self, stop: asyncio.Event | None = None) -> None:
        self.stop = stop or asyncio.Event()
        self._stack = AsyncExitStack()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "use DaemonLifecycle as an async context manager"
        return self._loop

    async def __aenter__(self) -> Self:
        self._loop = asyncio.get_running_loop()
        await self._stack.__aenter__()
        for sig in STOP_SIGNALS:
            self._loop.add_signal_handler(sig, self.stop.set)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        for sig in (*STOP_SIGNALS, RELOAD_SIGNAL):
            self.loop.remove_signal_handler(sig)
        return await self._stack.__aexit__(exc_type, exc, tb)

    def on_reload(self, reload: Callable[[], object]) -> None:
        """SIGHUP calls ``reload`` (which must not raise: it runs as a signal handler of the loop)."""
        self.loop.add_signal_handler(RELOAD_SIGNAL, reload)

    def cleanup(self, undo: Callable[[], object]) -> None:
        """Call ``undo`` on the way out, after everything registered later (e.g. stop following the inventory)."""
        self._stack.callback(undo)

    async def serve_first(self, service: Service | None) -> None:
        """Start ``service`` now, before anything else exists, and stop it after everything else: the health
        endpoint, which must answer the kubelet's probes from the daemon's first moment to its last."""
        if service is None:
            return
        self._stack.push_async_callback(service.stop)
        await service.start()

    async def serve(self, *faces: Service, admin: Service | None = None, endpoints: Iterable[Service] = ()) -> None:
        """Start ``endpoints`` (metrics, then DCGM: each created only once the one before it serves), then
        ``admin``, then ``faces`` in order. On the way out the faces stop in reverse, then the admin socket,
        then the endpoints created, in order."""
        created: list[Service] = []
        first = [*reversed(faces), *([admin] if admin is not None else [])]
        self._stack.push_async_callback(_stop_in_order, first, created)
        for endpoint in endpoints:
            created.append(endpoint)
            await endpoint.start()
        if admin is not None:
            await admin.start()
        for face in faces:
            await face.start()

    async def wait(self) -> None:
        """Until SIGINT, SIGTERM, SIGQUIT or the caller's ``stop`` event."""
        await self.stop.wait()
