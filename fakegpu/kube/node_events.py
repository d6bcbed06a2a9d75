"""GPU faults and recoveries as core/v1 Events on the Node, so ``kubectl describe node`` shows them.

NVIDIA's device plugin and DRA driver record no Events for XIDs (their health only reaches the kubelet's
device list and the ResourceSlices' taints); node-problem-detector and NVIDIA NVSentinel are what put GPU
problems on the Node. fakegpu's daemons do it themselves, so a rehearsal sees on the Node what a cluster
with such a detector would show. The reasons and messages are ``fakegpu.sharing.fault_notices``'.

core/v1, not events.k8s.io/v1: ``kubectl describe node`` lists core/v1 Events (``searchEvents`` in
kubernetes/kubectl ``pkg/describe/describe.go``, field selector on ``involvedObject``, once with the Node's UID
and once with its name as UID, as the kubelet sets it) and the count it prints is the core ``count``, which
is what client-go's ``tools/record`` recorder bumps; both API versions show the same stored objects.

Repeats are coalesced as ``tools/record`` does (kubernetes/kubernetes
``staging/src/k8s.io/client-go/tools/record/events_cache.go`` at commit 00080d4, ``eventLogger``): an Event with
the same source, involved object, type, reason and message as one already written is a PATCH of that
object's ``count`` (+1) and ``lastTimestamp``, found in an LRU of 4096 keys; a patch answered 404 (the
server's one-hour Event TTL ran out) writes a new Event. Events are named ``<node>.<hex nanoseconds>`` in
namespace ``default``, as the recorder names and places Events of cluster-scoped objects. The aggregator of
that file (ten Events differing only in message within ten minutes become one "combined from similar
events") and its spam filter are not reproduced.

An API server that is away, slow or refuses never blocks or stops the daemon: notices queue (bounded;
the oldest are dropped), each call has a timeout, and a failure is logged once until a write succeeds again.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final, cast

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Event
from lightkube.types import PatchType

from fakegpu.kube.backoff import RETRY_PAUSE, jittered_pause
from fakegpu.kube.client import api_failure, client_target
from fakegpu.kube.event_wait import wait_event
from fakegpu.sharing.fault_notices import EMPTY_SNAPSHOT, FaultNotice, FaultSnapshot, fault_notices
from fakegpu.sharing.live_inventory import LiveInventory

log = logging.getLogger(__name__)

DEVICE_PLUGIN_COMPONENT: Final = "fakegpu-device-plugin"
DRA_COMPONENT: Final = "fakegpu-dra"
EVENT_NAMESPACE: Final = "default"
"""client-go's ``makeEvent``: an object without a namespace (a Node) gets its Events in ``default``."""
CACHE_ENTRIES: Final = 4096
"""``maxLruCacheEntries`` of ``events_cache.go``."""
CALL_TIMEOUT: Final = 5.0
QUEUE_LIMIT: Final = 1000
"""Notices kept while the API server is away; older ones are dropped (with one log line)."""


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeEventRecorder:
    """Writes notices as Events on one Node, counting repeats on the Event already written."""

    def __init__(
        self,
        client: AsyncClient,
        node_name: str,
        component: str,
        node_uid: Callable[[], str | None] = lambda: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``node_uid`` is the Node's UID when the daemon knows it (else the node's name stands for it, as the
        kubelet writes its own node Events; ``kubectl describe node`` finds both)."""
        self.client = client
        self.node_name = node_name
        self.component = component
        self.node_uid = node_uid
        self.clock = clock
        self._seen: collections.OrderedDict[tuple[str, str, str], tuple[str, int]] = collections.OrderedDict()
        """(type, reason, message) -> (the Event's name, its count): ``eventLogger``'s cache."""
        self.created = 0
        self.patched = 0

    def body(self, notice: FaultNotice, name: str, now: float) -> dict[str, Any]:
        """The Event as client-go's recorder fills it for a Node."""
        stamp = _timestamp(now)
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": EVENT_NAMESPACE},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Node",
                "name": self.node_name,
                "uid": self.node_uid() or self.node_name,
            },
            "reason": notice.reason,
            "message": notice.message,
            "type": "Warning" if notice.warning else "Normal",
            "source": {"component": self.component, "host": self.node_name},
            "reportingComponent": self.component,
            "reportingInstance": self.node_name,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }

    async def record(self, notice: FaultNotice) -> None:
        """Write one notice (create, or count a repeat); raises what the API server answered."""
        key = ("Warning" if notice.warning else "Normal", notice.reason, notice.message)
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None:
            name, count = seen
            patch = {"count": count + 1, "lastTimestamp": _timestamp(now)}
            try:
                await asyncio.wait_for(
                    self.client.patch(Event, name, patch, namespace=EVENT_NAMESPACE, patch_type=PatchType.MERGE),
                    CALL_TIMEOUT,
                )
                self._remember(key, name, count + 1)
                self.patched += 1
                return
            except ApiError as exc:
                if exc.status.code != 404:
                    raise
        name = f"{self.node_name}.{time.time_ns():x}"
        event = cast(Event, Event.from_dict(self.body(notice, name, now)))
        await asyncio.wait_for(self.client.create(event), CALL_TIMEOUT)
        self._remember(key, name, 1)
        self.created += 1

    def _remember(self, key: tuple[str, str, str], name: str, count: int) -> None:
        self._seen[key] = (name, count)
        self._seen.move_to_end(key)
        while len(self._seen) > CACHE_ENTRIES:
            self._seen.popitem(last=False)


def snapshot(live: LiveInventory) -> FaultSnapshot:
    return FaultSnapshot(live.conditions(), live.health_events())


class NodeFaultEvents:
    """Follows a live inventory and records every fault and recovery it sees as an Event on the Node.

    Subscribes to the inventory (not to the commands that change it), so faults from ``fakegpu ctl``, a
    scenario, an ``after_calls`` trigger or a reload are all recorded. The listener only computes the notices
    and queues them (once per turn of the event loop); one task writes them."""

    def __init__(self, live: LiveInventory, recorder: NodeEventRecorder, retry_interval: float = RETRY_PAUSE) -> None:
        self.live = live
        self.recorder = recorder
        self.retry_interval = retry_interval
        """The pause after a first failed write; it doubles with each further failure in a row."""
        self._in_a_row = 0
        self._last = EMPTY_SNAPSHOT
        self._queue: collections.deque[FaultNotice] = collections.deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe: Callable[[], None] = lambda: None
        self._failing = False
        self._scheduled = False
        self.dropped = 0
        self.failures = 0

    def start(self) -> None:
        self._unsubscribe = self.live.subscribe(self._changed)
        self._changed()
        self._task = asyncio.create_task(self._run(), name="node-fault-events")

    async def stop(self) -> None:
        self._unsubscribe()
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task], timeout=2.0)
            self._task = None

    @property
    def pending(self) -> int:
        return len(self._queue)

    def _changed(self) -> None:
        """The inventory changed: look once this turn of the event loop is over, so a fault that reports
        several XIDs (several announcements) is one notice."""
        if self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # changed outside the loop (a test driving the inventory by hand): look now
            self._look()
            return
        self._scheduled = True
        loop.call_soon(self._look)

    def _look(self) -> None:
        self._scheduled = False
        now = snapshot(self.live)
        notices = fault_notices(self.live.inventory.node, self._last, now)
        self._last = now
        if not notices:
            return
        self._queue.extend(notices)
        while len(self._queue) > QUEUE_LIMIT:
            self._queue.popleft()
            self.dropped += 1
            if self.dropped == 1:
                log.warning("node %s: too many GPU fault Events waiting; dropping the oldest", self.recorder.node_name)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                notice = self._queue.popleft()
                if not await self._write(notice):
                    self._queue.appendleft(notice)
                    break
            if self._queue:  # the server is away: retry after a pause (or sooner, on the next notice)
                await wait_event(self._wake, jittered_pause(self._in_a_row, first=self.retry_interval))
                self._wake.set()

    async def _write(self, notice: FaultNotice) -> bool:
        try:
            await self.recorder.record(notice)
        except Exception as exc:  # whatever the server or the network does, the daemon never sees it
            self.failures += 1
            self._in_a_row += 1
            if not self._failing:
                self._failing = True
                target = client_target(self.recorder.client)
                log.warning(
                    "recording GPU fault Event %s on node %s failed (logged once until a write works again): %s",
                    notice.reason,
                    self.recorder.node_name,
                    api_failure(exc, target),
                )
            # Refused for good (no RBAC, Events not served, invalid): skip that one and go on with the rest.
            return isinstance(exc, ApiError) and exc.status.code in (403, 404, 422)
        self._in_a_row = 0
        if self._failing:
            self._failing = False
            log.info("recording GPU fault Events on node %s works again", self.recorder.node_name)
        return True
