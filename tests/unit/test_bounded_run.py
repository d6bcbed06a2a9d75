"""A daemon's shutdown ends even when a task swallows its cancellation."""

from __future__ import annotations

import asyncio
import time

from fakegpu.runtime.bounded_run import run_bounded


async def _stubborn() -> None:
    while True:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            continue  # like a connection cleanup that never completes


async def _main() -> int:
    asyncio.get_running_loop().create_task(_stubborn())
    await asyncio.sleep(0)
    return 7


def test_shutdown_is_bounded():
    started = time.monotonic()
    assert run_bounded(_main(), grace=0.3) == 7
    assert time.monotonic() - started < 2.0
