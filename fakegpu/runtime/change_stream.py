"""Turning live-inventory change callbacks into an async stream, for the kubelet's watch RPCs.

ListAndWatch (device plugin) and NodeWatchResources (DRA health) both send the full state at once
and again whenever it changes, and end cleanly when their server stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Protocol


class Subscribable(Protocol):
    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]: ...


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
