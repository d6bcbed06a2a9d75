"""``wait_event``: set or timed out, and a cancellation always reaches the waiting task."""

from __future__ import annotations

import asyncio

from fakegpu.kube.event_wait import wait_event


async def test_true_once_set_false_after_the_timeout():
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_event(event, 5.0) is True


async def test_a_loop_of_short_waits_stops_when_cancelled():
    """The race ``asyncio.wait_for`` loses on Python 3.11: cancelling as a timeout fires. Cancel a loop of
    1 ms waits many times at varied moments; every cancel must end the task."""
    event = asyncio.Event()

    async def loop() -> None:
        while True:
            await wait_event(event, 0.001)

    for i in range(200):
        task = asyncio.create_task(loop())
        await asyncio.sleep(0.001 * (i % 3))  # time passing: cancel at varied moments of the waits
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=2.0)
        assert done == {task}, f"cancel {i} did not stop the loop"
        assert task.cancelled()
