"""Waiting for an asyncio.Event with a timeout, in loops (the reconcile loop, its kin) stopped by cancellation.

``asyncio.wait_for(event.wait(), t)`` looks like the obvious way, but on Python 3.11 it can swallow a
cancellation that arrives just as its timeout fires: the loop goes round again and the task that cancelled it
waits for ever (the compute-domain controller's stop hung on it). ``asyncio.timeout`` has no such race.
"""

from __future__ import annotations

import asyncio
import contextlib


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass; whether it was set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()
