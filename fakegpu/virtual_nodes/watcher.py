"""``--watch``: keep the virtual nodes as planned until told to stop.

Two list-then-watch loops (this tool's Nodes and ResourceSlices, by the ownership label) look at every
event without calling the API: only a node whose labels, capacity or taint differ from the plan, a slice
that differs or was deleted, or a node that was deleted, is queued. Workers (``concurrency`` of them) then
read that one node and its slices and run the controller's per-node step on them:

- a node someone changed is put back (labels, capacity, allocatable, taint);
- a deleted slice of a live node is re-created;
- a node someone deleted is not re-created (it is logged and forgotten), and its slices are deleted, as a
  real cluster's garbage collector would do eventually; slices of this tool whose node is gone are deleted
  the same way.

A periodic resync (two lists) catches whatever a watch missed. A node that is momentarily absent from the
label-selected watch (someone removed the label) is told apart from a deleted one by reading it.

Nodes wait in a ``WorkQueue`` with client-go's guarantees: a node is queued at most once, and never handed to
two workers at once; one queued again while being repaired is repaired again when that repair is done (two
repairs of one node at once would both create its missing slices). A watch that fails is started again
after the pause of ``fakegpu.kube.backoff`` (the loop of ``fakegpu.kube.watch_loop``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Sequence
from typing import Any

from fakegpu.dra.slice_digest import SliceKey
from fakegpu.kube.watch_loop import list_then_watch
from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.virtual_nodes.api import ApiCallError, KubeconfigError
from fakegpu.virtual_nodes.controller import OWNED, VirtualNodeController
from fakegpu.virtual_nodes.imex_daemons import ImexDaemons, imex_daemons_for
from fakegpu.virtual_nodes.node_manifest import node_changes
from fakegpu.virtual_nodes.report import Outcome

log = logging.getLogger(__name__)

JSON = dict[str, Any]


class WorkQueue:
    """Node names to repair, as client-go's workqueue keeps keys: a name waits at most once, and a name a
    worker is on is not handed out again until ``done``; added meanwhile, it waits for that."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._dirty: set[str] = set()
        """Names that need a repair that has not started."""
        self._processing: set[str] = set()

    def add(self, name: str) -> None:
        if name in self._dirty:
            return
        self._dirty.add(name)
        if name not in self._processing:
            self._queue.put_nowait(name)

    async def get(self) -> str:
        name = await self._queue.get()
        self._processing.add(name)
        self._dirty.discard(name)
        return name

    def done(self, name: str) -> None:
        self._processing.discard(name)
        if name in self._dirty:
            self._queue.put_nowait(name)

    def __len__(self) -> int:
        return self._queue.qsize()

    def pending(self) -> int:
        """Names queued or being worked on: 0 once every repair asked for is done."""
        return len(self._dirty | self._processing)


class Watcher:
    def __init__(self, controller: VirtualNodeController, *, resync_interval: float = 60.0) -> None:
        self.controller = controller
        self.api = controller.api
        self.say = controller.say
        self.resync_interval = resync_interval
        self.stats: collections.Counter[str] = collections.Counter()
        """What the watch repaired: nodes re-applied, nodes gone, slices created/updated/deleted, errors."""
        self.queue = WorkQueue()
        self.last_seen: dict[str, str] = {}
        """Per followed kind (``nodes``, ``slices``): the resourceVersion of the last watch event looked at.
        Each watch delivers its events in order, so once a change's version is reached, everything before
        it was looked at too (a test's barrier; with ``queue.pending() == 0``, the watcher is idle)."""
        self.resyncs = 0
        """Periodic resyncs finished."""
        self._labelled: set[str] = set()
        """Names of the Nodes with the ownership label, as the node list and watch last showed them."""
        self.imex: ImexDaemons | None = imex_daemons_for(controller)
        """The virtual nodes' IMEX daemons, on a fleet with NVLink cliques (``fakegpu.virtual_nodes.imex_daemons``)."""

    # -- running ---------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Watch and repair until ``stop`` is set."""
        loops = [self._watch_nodes()]
        if self.controller.options is not None:
            loops.append(self._watch_slices())
        tasks = [asyncio.create_task(loop) for loop in loops]
        tasks.append(asyncio.create_task(self._resync_loop()))
        tasks += [asyncio.create_task(loop()) for loop in (self.imex.loops() if self.imex is not None else [])]
        tasks += [asyncio.create_task(self._worker()) for _ in range(self.controller.settings.concurrency)]
        try:
            await stop.wait()
        finally:
            await cancel_and_wait(tasks)

    def _enqueue(self, name: str) -> None:
        if name:
            self.queue.add(name)

    # -- what to look at -------------------------------------------------------------------------------
    def _node_differs(self, obj: JSON) -> bool:
        name = str(obj["metadata"]["name"])
        return self.controller.managed(name) and not node_changes(obj, self.controller.desired[name]).empty

    def check_nodes(self, nodes: Sequence[JSON]) -> None:
        """Queue every managed node that is missing from a list of ours, or differs from the plan."""
        listed = {str(n["metadata"]["name"]): n for n in nodes}
        self._labelled = set(listed)
        for name in self.controller.nodes:
            if not self.controller.managed(name):
                continue
            node = listed.get(name)
            if node is None or self._node_differs(node):
                self._enqueue(name)

    def check_slices(self, slices: Sequence[SliceKey]) -> None:
        """Queue managed nodes whose slices are not as planned, and the nodes of slices nobody manages."""
        by_node: dict[str, list[SliceKey]] = collections.defaultdict(list)
        for key in slices:
            by_node[key.node].append(key)
        for name in self.controller.nodes:
            if self.controller.managed(name) and not self.controller.slices_as_planned(name, by_node.get(name, [])):
                self._enqueue(name)
        for name in by_node:
            if not self.controller.managed(name) and name not in self._labelled:
                self._enqueue(name)

    def _slice_event(self, event: str, key: SliceKey) -> None:
        self.last_seen["slices"] = key.resource_version
        name = key.node
        if not self.controller.managed(name):
            if name not in self._labelled:  # maybe a slice whose node is gone
                self._enqueue(name)
            return
        if self.controller.uids.get(name) is None:
            self._enqueue(name)
            return
        planned = self.controller.planned_slice(name, key)
        # A planned slice deleted is missing now; one not planned (a stale one, or another driver's that
        # the repair itself deleted) leaves nothing to do when it goes.
        if planned == (event == "DELETED"):
            self._enqueue(name)

    def _node_event(self, event: str, obj: JSON) -> None:
        self.last_seen["nodes"] = str(obj["metadata"].get("resourceVersion", ""))
        name = str(obj["metadata"]["name"])
        if event == "DELETED":
            self._labelled.discard(name)
            self._enqueue(name)
            return
        self._labelled.add(name)
        if self._node_differs(obj):
            self._enqueue(name)

    # -- loops -----------------------------------------------------------------------------------------
    async def _watch_nodes(self) -> None:
        await list_then_watch(
            lambda: self.api.list_nodes(labels=OWNED),
            lambda version: self.api.watch_nodes(labels=OWNED, resource_version=version),
            on_list=self.check_nodes,
            on_event=self._node_event,
            on_failure=lambda exc, pause: log.warning("node watch ended (%s); watching again in %.0f s", exc, pause),
        )

    async def _watch_slices(self) -> None:
        options = self.controller.options
        assert options is not None
        await list_then_watch(
            lambda: self.api.list_slices(options.api_version, labels=OWNED),
            lambda version: self.api.watch_slices(options.api_version, labels=OWNED, resource_version=version),
            on_list=self.check_slices,
            on_event=self._slice_event,
            on_failure=lambda exc, pause: log.warning(
                "ResourceSlice watch ended (%s); watching again in %.0f s", exc, pause
            ),
        )

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.resync_interval)
            try:
                await self.resync()
            except (ApiCallError, KubeconfigError) as exc:
                log.warning("resync failed (%s); trying again in %.0f s", exc, self.resync_interval)
            except Exception:  # a bug must not end the resyncs silently
                log.exception("resync failed; trying again in %.0f s", self.resync_interval)
            else:
                self.resyncs += 1

    async def resync(self) -> None:
        """List both kinds and queue whatever is not as planned."""
        nodes, _ = await self.api.list_nodes(labels=OWNED)
        self.check_nodes(nodes)
        if self.controller.options is not None:
            slices, _ = await self.api.list_slices(self.controller.options.api_version, labels=OWNED)
            self.check_slices(slices)

    async def _worker(self) -> None:
        while True:
            name = await self.queue.get()
            try:
                await self.repair(name)
            except (ApiCallError, KubeconfigError) as exc:
                self.stats["errors"] += 1
                self.say(f"error: watch: {exc}")
            except Exception:  # a bug must not silently cost a worker
                self.stats["errors"] += 1
                log.exception("repairing node %s failed", name)
            finally:
                self.queue.done(name)

    # -- repairing -------------------------------------------------------------------------------------
    async def repair(self, name: str) -> None:
        controller = self.controller
        if not controller.managed(name):
            await self._remove_orphans(name)
            return
        node = controller.nodes[name]
        existing = await self.api.get_node(name)
        slices: list[SliceKey] = []
        if controller.options is not None:
            slices, _ = await self.api.list_slices(controller.options.api_version, fields=controller.slice_fields(name))
        counts: collections.Counter[str] = collections.Counter()
        outcome = await controller.sync(node, existing, slices, may_create=name not in controller.seen, counts=counts)
        self.stats.update({f"slices {k}": v for k, v in counts.items()})
        if outcome is Outcome.GONE:
            controller.gone.add(name)
            deleted = await controller.delete_slices_of(name)
            self.stats["nodes gone"] += 1
            self.stats["slices deleted"] += deleted
            self.say(
                f"watch: node {name} was deleted by someone; not re-creating it ({deleted} ResourceSlice(s) deleted)"
            )
        elif outcome is Outcome.REFUSED:
            self.say(f"watch: node {name} is now a non-KWOK node; leaving it alone")
        elif outcome in (Outcome.CREATED, Outcome.UPDATED, Outcome.ADOPTED):
            self.stats["nodes repaired"] += 1
            done = ", ".join(f"{v} ResourceSlice(s) {k}" for k, v in sorted(counts.items()))
            self.say(f"watch: node {name} {outcome.value}" + (f" ({done})" if done else ""))

    async def _remove_orphans(self, name: str) -> None:
        """Slices of this tool for a node that is not (or no longer) managed: deleted once the Node is gone."""
        if name in self.controller.nodes and name not in self.controller.gone:
            return  # a refused name: its slices, if any, are not ours to judge
        if await self.api.get_node(name) is not None:
            return
        deleted = await self.controller.delete_slices_of(name)
        if deleted:
            self.stats["slices deleted"] += deleted
            self.say(f"watch: deleted {deleted} ResourceSlice(s) of node {name}, which is gone")
