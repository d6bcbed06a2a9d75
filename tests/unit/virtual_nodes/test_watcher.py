"""The watcher's queue: one node is never repaired by two workers at once, and a node queued while being
repaired is repaired again afterwards. A resync that breaks does not end the resyncs (the watches' backoff is
tested in tests/unit/kube).

The watcher runs as ``--watch`` runs it (``Watcher.run``, its node watch against the in-process API server);
nodes are queued the public way, by handing it slices of nodes it does not manage (``check_slices``, what a
resync does), and its ``repair`` and ``resync`` are replaced by recording ones.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator

import pytest

from fakegpu.dra.slice_digest import SliceKey
from fakegpu.virtual_nodes.api import Api
from fakegpu.virtual_nodes.controller import Settings, VirtualNodeController
from fakegpu.virtual_nodes.watcher import Watcher, WorkQueue
from tests.apiserver.serving import serving
from tests.eventually import eventually


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    with serving() as server:
        client = server.client()
        try:
            yield Api(client)
        finally:
            await client.close()


def make_watcher(api: Api, concurrency: int = 4, resync_interval: float = 60.0) -> Watcher:
    controller = VirtualNodeController(api, [], Settings(concurrency=concurrency), say=lambda _: None)
    return Watcher(controller, resync_interval=resync_interval)


@contextlib.asynccontextmanager
async def running(watcher: Watcher) -> AsyncIterator[None]:
    """``watcher.run`` until the block ends; it must stop when told to."""
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 5.0)


def orphan_slices(node: str) -> list[SliceKey]:
    """A slice of a node the watcher does not manage: the node is queued for a look."""
    return [SliceKey("s", "1", node, "gpu.nvidia.com", node, 1, None, None, {})]


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


async def test_events_during_a_repair_never_start_a_second_repair_of_the_node(api: Api):
    watcher = make_watcher(api, concurrency=4)
    running_now: collections.Counter[str] = collections.Counter()
    most: collections.Counter[str] = collections.Counter()
    repairs: collections.Counter[str] = collections.Counter()
    release = asyncio.Event()

    async def repair(name: str) -> None:
        running_now[name] += 1
        most[name] = max(most[name], running_now[name])
        repairs[name] += 1
        await release.wait()
        running_now[name] -= 1

    watcher.repair = repair  # type: ignore[method-assign]
    async with running(watcher):
        watcher.check_slices(orphan_slices("node-a"))
        await eventually(lambda: running_now["node-a"] == 1, "the first repair of node-a")
        for _ in range(5):  # five slices deleted one after another while the first repair runs
            watcher.check_slices(orphan_slices("node-a"))
        watcher.check_slices(orphan_slices("node-b"))
        # The barrier: names are handed out in the order they were queued, so once node-b's repair runs, a
        # second repair of node-a queued before it has started too.
        await eventually(lambda: running_now["node-b"] == 1 or most["node-a"] > 1, "node-b's repair")
        assert most["node-a"] == 1, "two workers repaired the same node at once"
        assert running_now["node-b"] == 1, "another node waits for no one"
        release.set()
        await eventually(lambda: not any(running_now.values()) and watcher.queue.pending() == 0, "the workers idle")
        # The events that came during the first repair are handled by exactly one more.
        assert repairs == {"node-a": 2, "node-b": 1}
        assert most["node-a"] == 1


async def test_a_failing_repair_does_not_lose_the_node(api: Api):
    watcher = make_watcher(api, concurrency=1)
    calls: list[str] = []

    async def repair(name: str) -> None:
        calls.append(name)
        raise RuntimeError("a bug")

    watcher.repair = repair  # type: ignore[method-assign]
    async with running(watcher):
        watcher.check_slices(orphan_slices("node-a"))
        await eventually(lambda: len(calls) >= 1 and watcher.queue.pending() == 0, "the first repair done")
        watcher.check_slices(orphan_slices("node-a"))
        await eventually(lambda: len(calls) >= 2 and watcher.queue.pending() == 0, "the second repair done")
        assert calls == ["node-a", "node-a"] and watcher.stats["errors"] == 2


async def test_a_resync_that_breaks_unexpectedly_does_not_end_the_resyncs(api: Api, caplog: pytest.LogCaptureFixture):
    watcher = make_watcher(api, resync_interval=0.01)
    attempts = 0

    async def resync() -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise RuntimeError("an unexpected bug")

    watcher.resync = resync  # type: ignore[method-assign]
    async with running(watcher):
        await eventually(lambda: attempts >= 3, "three resyncs", interval=0.01)
    assert attempts >= 3
    assert "an unexpected bug" in caplog.text
