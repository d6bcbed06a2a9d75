"""The one reconcile loop: runs when dirty, resyncs on a timer, backs off while failing, resets on success."""

from __future__ import annotations

import asyncio

import pytest

import fakegpu.kube.reconcile_loop as loop_module
from fakegpu.kube.event_wait import wait_event
from fakegpu.kube.reconcile_loop import reconcile_forever
from tests.eventually import eventually


async def test_runs_when_dirty_and_not_before(monkeypatch):
    dirty = asyncio.Event()
    runs: list[int] = []
    waits: list[float] = []
    real_wait = wait_event

    async def recorded_wait(event: asyncio.Event, timeout: float) -> bool:
        waits.append(timeout)
        return await real_wait(event, timeout)

    async def reconcile() -> None:
        runs.append(1)

    monkeypatch.setattr(loop_module, "wait_event", recorded_wait)
    task = asyncio.create_task(reconcile_forever(dirty, 3600.0, reconcile, lambda exc, attempt, pause: None))
    try:
        # The barrier: the loop waits for a dirty mark or its hour-long resync; it could only have run before.
        await eventually(lambda: waits == [3600.0], "the loop to wait")
        assert runs == []  # nothing asked for it, and the resync period is an hour away
        dirty.set()
        await eventually(lambda: len(runs) == 1, "the run a dirty mark asks for")
        assert not dirty.is_set()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_resyncs_on_the_timer_without_being_asked():
    runs: list[int] = []

    async def reconcile() -> None:
        runs.append(1)

    task = asyncio.create_task(reconcile_forever(asyncio.Event(), 0.01, reconcile, lambda exc, attempt, pause: None))
    try:
        await eventually(lambda: len(runs) >= 3, "three resyncs")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_failures_are_reported_retried_with_growing_pauses_and_reset_on_success(monkeypatch):
    pauses: list[float] = []

    def recorded_pause(failures: int, first: float) -> float:
        pauses.append(first * 2 ** (failures - 1))  # the policy's shape, without its jitter
        return 0.001 * failures  # and no real wait (told to on_failure as the pause)

    monkeypatch.setattr(loop_module, "jittered_pause", recorded_pause)
    outcomes = [RuntimeError("a"), RuntimeError("b"), None, RuntimeError("c")]
    reported: list[tuple[str, int, float]] = []
    done = asyncio.Event()

    async def reconcile() -> None:
        if not outcomes:  # the script is over: every later run succeeds
            done.set()
            return
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    dirty = asyncio.Event()
    dirty.set()
    task = asyncio.create_task(
        reconcile_forever(
            dirty,
            0.01,
            reconcile,
            lambda exc, attempt, pause: reported.append((str(exc), attempt, pause)),
            first_pause=1.0,
        )
    )
    try:
        await asyncio.wait_for(done.wait(), 5.0)
        await eventually(lambda: len(pauses) == 3, "the pause after the last failure")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    # each failure is told with its count in a row and the pause before the next try
    assert reported == [("a", 1, 0.001), ("b", 2, 0.002), ("c", 1, 0.001)]
    # two failures in a row double the pause; the success in between resets it for "c"
    assert pauses == [1.0, 2.0, 1.0]
