"""Following live-inventory changes: as an async stream for the kubelet's watch RPCs, or as files kept current.

ListAndWatch (device plugin) and NodeWatchResources (DRA health) both send the full state at once
and again whenever it changes, and end cleanly when their server stops. The files containers see (the fake
nvidia-smi, the device plugin's CDI specs) are written at once and again after every change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Protocol

log = logging.getLogger(__name__)


class Subscribable(Protocol):
    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]: ...


def keep_current(source: Subscribable, update: Callable[[], object], what: str) -> Callable[[], None]:
    """Run ``update`` now (an error here is the caller's: a daemon must not serve without its files) and
    after every change of ``source``; later OSError or ValueError are logged ("cannot update <what>"), never
    raised into the source's other listeners. Returns the unsubscribe function."""
    update()

    def changed() -> None:
        try:
            update()
        except (OSError, ValueError) as exc:
            log.error("cannot update %s: %s", what, exc)

    return source.subscribe(changed)


async def state_changes(source: Subscribable, stopping: asyncio.Event) -> AsyncIterator[None]:
    """Yield once now and once after each change (several quick changes may merge into one)."""
    changed = asyncio.Event()
    unsubscribe = source.subscribe(changed.set)
    try:
        yield None
        while not stopping.is_set():
            waiters = [asyncio.ensure_future(changed.wait()), asyncio.ensure_future(stopping.wait())]
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()
            changed.clear()
            if stopping.is_set():
                return
            yield None
    finally:
        unsubscribe()
