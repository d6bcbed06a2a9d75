"""``fakegpu virtual-nodes --watch`` against the in-process API server: what someone breaks is repaired,
what someone deletes stays deleted."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, NodeStatus
from lightkube.types import CascadeType, PatchType

from fakegpu.cli.virtual_nodes_command import run_virtual_nodes
from fakegpu.sharing.labels import TIMESTAMP_LABEL
from fakegpu.virtual_nodes.controller import OWNED
from fakegpu.virtual_nodes.watcher import Watcher
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.eventually import eventually
from tests.integration.test_virtual_nodes import WRITES, at, slices_of, stamps
from tests.integration.virtual_nodes_harness import parse as parse_flags
from tests.integration.virtual_nodes_harness import strict_apiserver

NODES = [f"fakegpu-virtual-000{i}" for i in range(3)]


def parse(*argv: str) -> argparse.Namespace:
    """The flags, in the dra GPU mode unless they name one: the watch repairs slices, which only DRA nodes have."""
    if "--gpu-mode" in argv or "--delete" in argv:
        return parse_flags(*argv)
    return parse_flags("--gpu-mode", "dra", *argv)


BARRIER = "fakegpu.test/barrier"
"""An annotation nobody plans: changing it is a change every watch of the watcher sees and ignores."""
FOLLOWED = {"nodes": "nodes", "resourceslices": "slices"}
"""The API server's kinds and the watcher's names for them (``Watcher.last_seen``)."""


@dataclass
class Watching:
    server: FakeApiServer
    client: AsyncClient
    out: io.StringIO
    watcher: Watcher
    marks: int = 0

    def writes(self) -> int:
        return sum(self.server.count(v) for v in WRITES)

    def _mark(self, plural: str) -> int | None:
        """Change the barrier annotation of one of our objects of ``plural``; its new resourceVersion."""
        owned = [o for o in self.server.objects(plural) if OWNED.items() <= (o["metadata"].get("labels") or {}).items()]
        if not owned:
            return None
        self.marks += 1
        owned[0]["metadata"].setdefault("annotations", {})[BARRIER] = str(self.marks)
        return int(self.server.update_direct(owned[0])["metadata"]["resourceVersion"])

    async def looked_at_everything(self) -> None:
        """Wait until the watcher has looked at every change made so far and finished the repairs they asked
        for. The barrier: a change nobody plans to one of our nodes and one of our slices; each watch delivers
        its events in order, so once the watcher has seen those it has seen everything before them."""
        kinds = FOLLOWED if self.watcher.controller.options is not None else {"nodes": "nodes"}
        marks = {kind: rv for plural, kind in kinds.items() if (rv := self._mark(plural)) is not None}
        # A kind without a mark would leave only "the queue is empty", which holds before the watcher has
        # read that kind's events: a barrier that passes at once is no barrier.
        unmarked = [plural for plural, kind in kinds.items() if kind not in marks]
        assert not unmarked, f"no object of ours to mark among the {', '.join(unmarked)}: the barrier cannot hold"

        def idle() -> bool:
            seen = {kind: int(self.watcher.last_seen.get(kind) or 0) for kind in marks}
            return all(seen[kind] >= rv for kind, rv in marks.items()) and self.watcher.queue.pending() == 0

        await eventually(idle, "the watcher to look at every change and finish its repairs")

    async def settled(self, rounds: int = 20) -> None:
        """Wait until the watcher is idle and a round of looking wrote nothing (a repair's own writes come
        back as watch events, which must not cause more); fail if it still writes after ``rounds`` rounds."""
        for _ in range(rounds):
            before = self.writes()
            await self.looked_at_everything()
            if self.writes() == before:
                return
        raise AssertionError(f"the watcher still writes after {rounds} rounds of looking: {self.out.getvalue()}")

    async def resynced(self, count: int) -> None:
        """Wait for ``count`` more periodic resyncs; the last one began after this call."""
        resyncs = self.watcher.resyncs
        await eventually(lambda: self.watcher.resyncs >= resyncs + count, f"{count} more resyncs")


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    yield from strict_apiserver()


@pytest.fixture
async def watching(server: FakeApiServer) -> AsyncIterator[Watching]:
    client = server.client()
    stop = asyncio.Event()
    out = io.StringIO()
    args = parse("--count", "3", "--gpus", "2xh100-80gb", "--watch", "--resync-interval", "30")
    watchers: list[Watcher] = []
    task = asyncio.create_task(
        run_virtual_nodes(args, client=client, stop=stop, out=out, err=out, retry_pause=0.01, watching=watchers.append)
    )
    await eventually(lambda: server.open_watches >= 2 or task.done(), "two watches")
    assert not task.done(), out.getvalue()
    try:
        yield Watching(server, client, out, watchers[0])
    finally:
        stop.set()
        code = await asyncio.wait_for(task, 5)  # the controller stops before the server does
        await client.close()
    assert code == 0, out.getvalue()
    assert "watch stopped:" in out.getvalue()


async def test_a_deleted_node_is_not_recreated_and_its_slices_go(watching):
    server, client = watching.server, watching.client
    # Orphan the slices, as a cluster whose garbage collector is slow would: the watcher deletes them.
    await client.delete(Node, NODES[1], cascade=CascadeType.ORPHAN)
    assert len(slices_of(server, NODES[1])) == 1
    await eventually(lambda: slices_of(server, NODES[1]) == [], "the orphaned slices deleted")
    await watching.settled()
    assert server.get_object("nodes", NODES[1]) is None
    assert [n["metadata"]["name"] for n in server.objects("nodes")] == [NODES[0], NODES[2]]
    assert f"watch: node {NODES[1]} was deleted by someone; not re-creating it (1 ResourceSlice(s) deleted)" in (
        watching.out.getvalue()
    )


async def test_a_deleted_slice_of_a_live_node_is_recreated(watching):
    server = watching.server
    (old,) = slices_of(server, NODES[2])
    server.delete_direct("resourceslices", old["metadata"]["name"])
    await eventually(lambda: len(slices_of(server, NODES[2])) == 1, "the slice re-created")
    (new,) = slices_of(server, NODES[2])
    assert new["metadata"]["name"] != old["metadata"]["name"]
    assert new["spec"]["devices"] == old["spec"]["devices"]
    assert new["metadata"]["ownerReferences"] == old["metadata"]["ownerReferences"]
    await watching.settled()
    assert len(server.objects("resourceslices")) == 3


async def test_labels_capacity_and_the_ownership_label_are_put_back(watching):
    server, client = watching.server, watching.client
    await client.patch(
        Node,
        NODES[0],
        {"metadata": {"labels": {"nvidia.com/gpu.count": "1", "fakegpu.io/virtual-node": None, "team": "ml"}}},
        patch_type=PatchType.MERGE,
    )
    await client.patch(
        NodeStatus, NODES[0], {"status": {"allocatable": {"nvidia.com/gpu": "0"}}}, patch_type=PatchType.MERGE
    )

    def repaired() -> bool:
        node = server.get_object("nodes", NODES[0])
        assert node is not None, "a node that lost its label was taken for deleted"
        labels = node["metadata"]["labels"]
        return bool(
            labels.get("nvidia.com/gpu.count") == "2"
            and labels.get("fakegpu.io/virtual-node") == "true"
            and "nvidia.com/gpu" not in node["status"]["allocatable"]  # a DRA node offers no GPU capacity
        )

    await eventually(repaired, "the node repaired")
    await watching.settled()
    node = server.get_object("nodes", NODES[0])
    assert node is not None and node["metadata"]["labels"]["team"] == "ml"  # not ours: kept


async def test_a_quiet_cluster_gets_no_writes(watching):
    """Our own writes come back as watch events; they must not cause more writes."""
    await watching.settled()
    before = watching.writes()
    await watching.looked_at_everything()
    assert watching.writes() == before


async def test_an_expired_watch_lists_again_and_still_repairs(watching):
    server = watching.server
    await watching.settled()
    lists = server.count("list", "resourceslices")
    server.add_node("unrelated")  # moves the resourceVersion past what the watches saw
    server.compact()
    server.close_watches()  # they come back from their last resourceVersion: 410 Expired
    (old,) = slices_of(server, NODES[0])
    server.delete_direct("resourceslices", old["metadata"]["name"])
    await eventually(lambda: server.count("list", "resourceslices") > lists, "a new list")
    await eventually(lambda: len(slices_of(server, NODES[0])) == 1, "one slice")
    await eventually(lambda: server.open_watches >= 2, "two watches")
    assert server.get_object("nodes", "unrelated") is not None


async def test_watching_slices_a_server_trimmed_needs_no_repairs():
    """1.35 drops the MIG counters (gate off): a watch started over slices an earlier run wrote reads
    nothing per node and writes nothing. Without GFD's timestamp: a watch stamps its own start as GFD does,
    which is one label write per node whenever the second ticked between the runs, and not this test's subject."""
    server = FakeApiServer("1.35").start()
    client = server.client()
    out = io.StringIO()
    try:
        argv = ("--count", "2", "--gpus", "1xh100-80gb", "--mig-mode", "dynamic", "--gpu-mode", "dra", "--no-timestamp")
        assert await run_virtual_nodes(parse(*argv), client=client, out=out, err=out) == 0
        before = sum(server.count(v) for v in WRITES)
        stop = asyncio.Event()
        watchers: list[Watcher] = []
        task = asyncio.create_task(
            run_virtual_nodes(
                parse(*argv, "--watch"), client=client, stop=stop, out=out, err=out, watching=watchers.append
            )
        )
        await eventually(lambda: server.open_watches >= 2, "two watches")
        await Watching(server, client, out, watchers[0]).looked_at_everything()
        stop.set()
        assert await asyncio.wait_for(task, 5) == 0
        assert sum(server.count(v) for v in WRITES) == before
        assert server.count("get", "nodes") == 0, "the watcher re-read nodes whose slices were fine"
    finally:
        await client.close()
        server.stop()
    assert server.rejections == []


def devices(slices: list[dict[str, Any]]) -> list[str]:
    return sorted(d["name"] for s in slices for d in s["spec"].get("devices", []))


@contextlib.asynccontextmanager
async def watch_run(server: FakeApiServer, *argv: str) -> AsyncIterator[Watching]:
    """``fakegpu virtual-nodes <argv> --watch`` until the block ends; it must end cleanly."""
    client = server.client()
    stop = asyncio.Event()
    out = io.StringIO()
    args = parse(*argv, "--watch")
    watchers: list[Watcher] = []
    task = asyncio.create_task(
        run_virtual_nodes(args, client=client, stop=stop, out=out, err=out, retry_pause=0.01, watching=watchers.append)
    )
    try:
        await eventually(lambda: server.open_watches >= 2 or task.done(), "two watches")
        assert not task.done(), out.getvalue()
        yield Watching(server, client, out, watchers[0])
    finally:
        stop.set()
        code = await asyncio.wait_for(task, 5)
        await client.close()
    assert code == 0, out.getvalue()


async def test_slices_deleted_one_after_another_are_recreated_once(server):
    """Five DELETED events for one node while its repair runs: one more repair, never two at once (two
    workers on one node both created its five slices)."""
    fleet = ("--count", "2", "--gpus", "4xh100-80gb", "--mig-mode", "dynamic", "--gpu-mode", "dra")
    argv = (*fleet, "--resync-interval", "30")
    async with watch_run(server, *argv) as watching:
        name = NODES[0]
        planned = slices_of(server, name)
        assert len(planned) == 5  # one counter slice and one device slice per GPU
        for obj in planned:
            server.delete_direct("resourceslices", obj["metadata"]["name"])
            await asyncio.sleep(0.005)  # time passing: the deletions come one after another, during the repair
        await eventually(lambda: len(slices_of(server, name)) >= 5, "five slices")
        await watching.settled()
        assert len(slices_of(server, name)) == 5
        assert devices(slices_of(server, name)) == devices(planned)
        assert len(slices_of(server, NODES[1])) == 5


async def test_after_a_driver_change_only_the_new_drivers_slices_remain_and_the_watch_is_quiet(server):
    out = io.StringIO()
    client = server.client()
    try:
        old = parse("--count", "2", "--driver-name", "gpu.example.com")
        assert await run_virtual_nodes(old, client=client, out=out, err=out) == 0
    finally:
        await client.close()
    async with watch_run(server, "--count", "2", "--resync-interval", "0.1") as watching:
        assert {s["spec"]["driver"] for s in server.objects("resourceslices")} == {"gpu.nvidia.com"}
        assert len(server.objects("resourceslices")) == 2
        reads = server.count("get", "nodes")
        lists = server.count("list", "resourceslices")
        await watching.resynced(3)
        await watching.looked_at_everything()
        assert server.count("list", "resourceslices") > lists, "the resyncs ran"
        assert server.count("get", "nodes") == reads == 0, "the watcher keeps re-reading nodes"
        assert {s["spec"]["driver"] for s in server.objects("resourceslices")} == {"gpu.nvidia.com"}


async def test_a_slice_of_the_old_driver_showing_up_is_deleted_and_the_watch_goes_quiet(server):
    """One published under the old --driver-name while watching (another controller still running)."""
    async with watch_run(server, "--count", "1", "--resync-interval", "0.1") as watching:
        (ours,) = slices_of(server, NODES[0])
        stale = {k: v for k, v in ours.items() if k in ("apiVersion", "kind", "spec")}
        stale["metadata"] = {"generateName": "stale-", "labels": ours["metadata"]["labels"]}
        stale["spec"]["driver"] = "gpu.example.com"
        server.create_direct(stale)
        await eventually(lambda: len(slices_of(server, NODES[0])) == 1, "one slice")
        await watching.settled()
        reads = server.count("get", "nodes")
        await watching.resynced(3)
        await watching.looked_at_everything()
        assert server.count("get", "nodes") == reads, "the watcher keeps re-reading the node"
        (left,) = slices_of(server, NODES[0])
        assert left["metadata"]["name"] == ours["metadata"]["name"]


async def test_watch_stamps_the_nodes_with_its_start_and_keeps_that_stamp(server, monkeypatch):
    """``--watch`` is the long-running labeller: like GFD, which takes ``nvidia.com/gfd.timestamp`` when its
    run starts (NVIDIA/k8s-device-plugin ``cmd/gpu-feature-discovery/main.go``), it writes its start time
    over an older stamp and puts it back when someone changes it; a one-off run never refreshes it."""
    at(monkeypatch, 1_700_000_000)
    out = io.StringIO()
    args = parse("--count", "2", "--gpus", "1xl4")
    client = server.client()
    try:
        assert await run_virtual_nodes(args, client=client, out=out, err=out, retry_pause=0.01) == 0
    finally:
        await client.close()
    assert stamps(server) == {"1700000000"}
    at(monkeypatch, 1_700_000_600)
    async with watch_run(server, "--count", "2", "--gpus", "1xl4", "--resync-interval", "30"):
        assert stamps(server) == {"1700000600"}
        node = server.get_object("nodes", NODES[0])
        assert node is not None
        node["metadata"]["labels"][TIMESTAMP_LABEL] = "1"
        server.update_direct(node)
        await eventually(lambda: stamps(server) == {"1700000600"}, "the watch's stamp put back")
