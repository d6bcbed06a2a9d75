"""A daemon's shutdown ends even when a task swallows its cancellation."""

from __future__ import annotations

import asyncio
import threading

from fakegpu.runtime.bounded_run import run_bounded
from tests.timing import Timing


async def _stubborn() -> None:
    while True:
        try:
            await asyncio.sleep(10)  # time passing: a task that stalls
        except asyncio.CancelledError:
            continue  # like a connection cleanup that never completes


async def _main() -> int:
    asyncio.get_running_loop().create_task(_stubborn())
    await asyncio.sleep(0)  # time passing: one loop turn, so the stubborn task is running when main returns
    return 7


def test_shutdown_is_bounded(timing: Timing):
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(run_bounded(_main(), grace=0.3)), daemon=True)
    with timing.at_most(2.0, "shutdown with a task that swallows its cancellation"):
        runner.start()
        runner.join(30.0)  # a shutdown that hangs fails here instead of hanging the suite
    assert not runner.is_alive(), "shutdown hung on a task that swallows its cancellation"
    assert result == [7]
