"""Stopping the daemons a test runs as tasks in its own event loop, without hiding how they ended."""

from __future__ import annotations

import asyncio
from typing import Any


async def stop_and_wait(stop: asyncio.Event, *tasks: asyncio.Task[Any], timeout: float = 5.0) -> list[Any]:
    """Set ``stop`` and wait for every task; return their results (a daemon's exit status).

    A daemon that raises on shutdown, or does not stop within ``timeout`` seconds, fails the test: a
    shutdown error is a product bug, and a fixture that swallowed it would hide one.
    """
    stop.set()
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    assert not pending, f"{len(pending)} of {len(tasks)} daemon task(s) did not stop within {timeout}s: {pending}"
    return [task.result() for task in tasks]
