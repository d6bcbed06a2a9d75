"""Stopping background asyncio tasks without letting one stuck task hold up shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


async def cancel_and_wait(tasks: Iterable[asyncio.Task[None] | None], timeout: float = 2.0) -> None:
    """Cancel every task and wait for them, at most ``timeout`` seconds (a watch blocked on a dead
    connection may not notice the cancellation at once)."""
    pending = [t for t in tasks if t is not None]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=timeout)
