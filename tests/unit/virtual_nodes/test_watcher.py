"""The watcher's queue: one node is never repaired by two workers at once, and a node queued while being
repaired is repaired again afterwards. A resync that breaks does not end the resyncs (the watches' backoff is
tested in tests/unit/kube)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Any, cast

import pytest

from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.virtual_nodes.api import Api
from fakegpu.virtual_nodes.controller import Settings, VirtualNodeController
from fakegpu.virtual_nodes.watcher import Watcher, WorkQueue
from tests.eventually import eventually


def make_watcher(concurrency: int = 4, resync_interval: float = 60.0) -> Watcher:
    controller = VirtualNodeController(Api(cast(Any, None)), [], Settings(concurrency=concurrency), say=lambda _: None)
    return Watcher(controller, resync_interval=resync_interval)


async def test_the_queue_hands_a_name_to_one_worker_at_a_time():
    queue = WorkQueue()
    queue.add("a")
    queue.add("a")
    assert len(queue) == 1
    name = await queue.get()
    queue.add("a")  # changed again while being worked on: waits for the worker
    assert len(queue) == 0
    queue.done(name)
    assert len(queue) == 1 and await queue.get() == "a"
    queue.done("a")
    assert len(queue) == 0


async def test_events_during_a_repair_never_start_a_second_repair_of_the_node():
    watcher = make_watcher(concurrency=4)
    running: collections.Counter[str] = collections.Counter()
    most: collections.Counter[str] = collections.Counter()
    repairs: collections.Counter[str] = collections.Counter()
    release = asyncio.Event()

    async def repair(name: str) -> None:
        running[name] += 1
        most[name] = max(most[name], running[name])
        repairs[name] += 1
        await release.wait()
        running[name] -= 1

    watcher.repair = repair  # type: ignore[method-assign]
    workers = [asyncio.create_task(watcher._worker()) for _ in range(4)]
    try:
        watcher._enqueue("node-a")
        await asyncio.sleep(0.01)
        for _ in range(5):  # five slices deleted one after another while the first repair runs
            watcher._enqueue("node-a")
            await asyncio.sleep(0.01)
        watcher._enqueue("node-b")
        await asyncio.sleep(0.01)
        assert most["node-a"] == 1, "two workers repaired the same node at once"
        assert running["node-b"] == 1, "another node waits for no one"
        release.set()
        await eventually(
            lambda: not any(running.values()) and len(watcher.queue) == 0, "the workers idle", 1.0, interval=0.01
        )
        # The events that came during the first repair are handled by exactly one more.
        assert repairs == {"node-a": 2, "node-b": 1}
        assert most["node-a"] == 1
    finally:
        await cancel_and_wait(workers)


async def test_a_failing_repair_does_not_lose_the_node():
    watcher = make_watcher(concurrency=1)
    calls: list[str] = []

    async def repair(name: str) -> None:
        calls.append(name)
        raise RuntimeError("a bug")

    watcher.repair = repair  # type: ignore[method-assign]
    worker = asyncio.create_task(watcher._worker())
    try:
        watcher._enqueue("node-a")
        await asyncio.sleep(0.02)
        watcher._enqueue("node-a")
        await asyncio.sleep(0.02)
        assert calls == ["node-a", "node-a"] and watcher.stats["errors"] == 2
    finally:
        await cancel_and_wait([worker])


async def test_a_resync_that_breaks_unexpectedly_does_not_end_the_resyncs(caplog: pytest.LogCaptureFixture):
    watcher = make_watcher(resync_interval=0.01)
    attempts = 0

    async def resync() -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise RuntimeError("an unexpected bug")

    watcher.resync = resync  # type: ignore[method-assign]
    task = asyncio.create_task(watcher._resync_loop())
    try:
        await eventually(lambda: attempts >= 3, "three resyncs", 1.0, interval=0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert attempts >= 3
    assert "an unexpected bug" in caplog.text
