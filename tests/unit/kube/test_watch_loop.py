"""The one list-then-watch loop: the watch starts at the list's resourceVersion, a 410 lists again at once,
other failures back off with a pause that grows until a list succeeds again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import Status

from fakegpu.kube.watch_loop import expired, list_then_watch

FIRST = 0.01


def gone() -> ApiError:
    return ApiError(status=Status(code=410, reason="Expired", message="too old resource version"))


class Script:
    """Lists and watches that do what a test says, and a record of what the loop did with them."""

    def __init__(
        self, lists: list[Exception | tuple[list[str], str]], watches: list[list[tuple[str, str]] | Exception]
    ):
        self.lists = lists
        self.watches = watches
        self.listed: list[Sequence[str]] = []
        self.events: list[tuple[str, str]] = []
        self.watched_from: list[str] = []
        self.failures: list[tuple[str, float]] = []
        self.done = asyncio.Event()

    async def list_objects(self) -> tuple[list[str], str]:
        if not self.lists:
            self.done.set()
            await asyncio.Event().wait()
        step = self.lists.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    async def watch_from(self, version: str) -> AsyncIterator[tuple[str, str]]:
        self.watched_from.append(version)
        step = self.watches.pop(0)
        if isinstance(step, Exception):
            raise step
        for event in step:
            yield event

    async def run(self) -> None:
        task = asyncio.create_task(
            list_then_watch(
                self.list_objects,
                self.watch_from,
                on_list=self.listed.append,
                on_event=lambda event, obj: self.events.append((event, obj)),
                on_failure=lambda exc, pause: self.failures.append((str(exc), pause)),
                first_pause=FIRST,
            )
        )
        try:
            await asyncio.wait_for(self.done.wait(), 5.0)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_objects_are_listed_then_watched_from_the_lists_version():
    script = Script(
        lists=[(["a", "b"], "7"), (["a"], "9")],
        watches=[[("ADDED", "c"), ("DELETED", "b")], []],
    )
    await script.run()
    assert script.listed == [["a", "b"], ["a"]]
    assert script.watched_from == ["7", "9"], "a watch that ended cleanly lists again, then watches from there"
    assert script.events == [("ADDED", "c"), ("DELETED", "b")]
    assert script.failures == []


async def test_an_expired_watch_lists_again_at_once():
    script = Script(lists=[(["a"], "7"), (["a"], "12")], watches=[gone(), []])
    await script.run()
    assert script.watched_from == ["7", "12"]
    assert script.failures == [("too old resource version", 0.0)]


async def test_failures_back_off_more_each_time_until_a_list_succeeds():
    down = ConnectionError("connection refused")
    script = Script(lists=[down, down, down, (["a"], "7"), down], watches=[RuntimeError("watch broke")])
    await script.run()
    pauses = [pause for _, pause in script.failures]
    ceilings = [FIRST, 2 * FIRST, 4 * FIRST, FIRST, 2 * FIRST]
    assert len(pauses) == len(ceilings)
    assert all(ceiling / 2 <= pause <= ceiling for pause, ceiling in zip(pauses, ceilings, strict=True)), pauses
    assert [text for text, _ in script.failures] == ["connection refused"] * 3 + ["watch broke", "connection refused"]


def test_only_410_counts_as_expired():
    assert expired(gone())
    assert not expired(ApiError(status=Status(code=500, message="boom")))
    assert not expired(ConnectionError())
