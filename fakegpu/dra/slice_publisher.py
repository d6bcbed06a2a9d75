"""Publishing the node's devices as ResourceSlices through lightkube, and keeping them published.

One pool per node, slices owned by the Node. The wished slices are built once per state of the live
inventory (its health, the options, the Node's UID) and digested (``fakegpu.dra.slice_digest``); every slice
written carries the digest in its ``fakegpu.io/slice-plan`` annotation. Whether the API server holds the wish
is then read from the listed slices' metadata alone (listed in pages, each slice reduced to its key as its page
arrives), so a re-publish with nothing changed costs a list and no rebuilding, sorting or comparing of devices.
When it does not hold the wish, the writes are the ones ``fakegpu.dra.slice_write_plan`` plans (as for the
virtual nodes): the pool generation bumped in every slice, existing names reused in name order, the rest
created or deleted. Slices without the annotation (written by an older fakegpu, or by someone else) never
match: they are rewritten once, and carry it from then on.

Slices that vanish (the kubelet deletes a node's slices at its start and 30 s after the driver disconnects)
are noticed through a watch and re-created; a periodic resync catches anything a watch missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.operators import BinaryOperator, SequenceOperator
from lightkube.resources.core_v1 import Node

from fakegpu.dra.health_taints import DeviceTaints
from fakegpu.dra.metrics import DraMetrics
from fakegpu.dra.resource_slices import SliceOptions, build_slice_specs, slice_objects
from fakegpu.dra.slice_digest import PLAN_ANNOTATION, SliceKey, plan_digest, slice_key
from fakegpu.dra.slice_write_plan import PoolWish, dropped_fields_warning, plan_slice_writes, take_over
from fakegpu.kube.backoff import jittered_pause, retry_note
from fakegpu.kube.client import ApiTarget, api_failure, client_target
from fakegpu.kube.discovery import (
    SLICE_KINDS,
    SUPPORTED_API_VERSIONS,
    layout_minor,
    minor_from_kubelet_version,
    served_api_version,
    serves_slices,
)
from fakegpu.kube.lean_requests import SliceHead, Stored, all_pages, write_serialized
from fakegpu.kube.page_sizes import SLICE_KEY_PAGE
from fakegpu.kube.reconcile_loop import reconcile_forever
from fakegpu.kube.watch_loop import list_then_watch
from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.sharing.inventory import Inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.sharing.node import Node as InventoryNode

SpecBuilder = Callable[[InventoryNode, SliceOptions, Mapping[str, Any]], list[dict[str, Any]]]
"""The slice specs of a node's pool (pool generation 0) from the node, the options and the devices' health
(the GPU driver's: each UUID's taints, ``fakegpu.dra.health_taints``)."""
FIRST_PUBLISH_RETRY = 0.5
"""A driver that starts before its API server is reachable tries again soon, then backs off."""


def _gpu_specs(node: InventoryNode, opts: SliceOptions, taints: DeviceTaints) -> list[dict[str, Any]]:
    return build_slice_specs(node, opts, taints, generation=0)


def _no_health() -> Mapping[str, Any]:
    """No health taints: what NVIDIA publishes with its ``NVMLDeviceHealthCheck`` gate off."""
    return {}


log = logging.getLogger(__name__)

MAX_CONFLICT_RETRIES = 5


class PublishError(Exception):
    """The API server refused the slices; the text says what and why."""


@dataclass
class PublisherStats:
    publishes: int = 0
    unchanged: int = 0
    creates: int = 0
    updates: int = 0
    deletes: int = 0
    conflicts: int = 0
    recreations: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Plan:
    """The wish for one state of the inputs: the slice specs (pool generation 0) and their digest."""

    inventory: Inventory
    inputs: tuple[Any, ...]
    """What else the specs depend on: the devices' health, the options and the owner's UID."""
    specs: list[dict[str, Any]]
    digest: str


def _serialised(spec: dict[str, Any]) -> str:
    """A spec without its pool generation, as canonical JSON: what the digest is made of."""
    pool = {k: v for k, v in spec["pool"].items() if k != "generation"}
    return json.dumps({**spec, "pool": pool}, sort_keys=True, separators=(",", ":"))


def _body(obj: dict[str, Any]) -> bytes:
    """A slice serialised once, for a write that skips lightkube's model round trip (``lean_requests``)."""
    return json.dumps(obj, separators=(",", ":")).encode()


def _with_generation(spec: dict[str, Any], generation: int) -> dict[str, Any]:
    return {**spec, "pool": {**spec["pool"], "generation": generation}}


def log_publish_failure(exc: Exception, attempt: int, pause: float, target: ApiTarget | None) -> str:
    """``publishing ResourceSlices failed (attempt 3, next in 4 s): <error> (API server ..., kubeconfig ...)``:
    logged; the error's part is returned (the readiness answer's last error)."""
    error = api_failure(exc, target)
    log.error("publishing ResourceSlices failed (%s): %s", retry_note(attempt, pause), error)
    return error


async def start_when_reachable(
    publisher: SlicePublisher, on_failure: Callable[[str], None], first_pause: float = FIRST_PUBLISH_RETRY
) -> None:
    """Start ``publisher``, retrying with backoff until the API server takes the slices; ``on_failure``
    gets each attempt's error (the readiness answer's last error)."""
    failures = 0
    while True:
        try:
            await publisher.start()
            return
        except Exception as exc:  # the API server may be unreachable or refuse for a while
            failures += 1
            pause = jittered_pause(failures, first=first_pause)
            on_failure(log_publish_failure(exc, failures, pause, client_target(publisher.client)))
            await asyncio.sleep(pause)


class SlicePublisher:
    def __init__(
        self,
        client: AsyncClient,
        live: LiveInventory,
        options: SliceOptions,
        *,
        auto_api_version: bool = True,
        auto_server_version: bool = True,
        resync_interval: float = 30.0,
        metrics: DraMetrics | None = None,
        build_specs: SpecBuilder = _gpu_specs,
        health: Callable[[], Mapping[str, Any]] = _no_health,
    ) -> None:
        """``build_specs``: what the pool holds (the GPU driver's devices unless another driver's are given);
        ``health``: what it is given of the devices' health, read on every change (none by default)."""
        self.client = client
        self.build_specs = build_specs
        self.health = health
        self.live = live
        self.options = options
        self.metrics = metrics
        self.auto_api_version = auto_api_version
        self.auto_server_version = auto_server_version
        self.resync_interval = resync_interval
        self.stats = PublisherStats()
        self.generation = 0
        self.node_uid: str | None = None
        self._plan: _Plan | None = None
        self._written_names: list[str] = []
        self._dirty = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._unsubscribe: Callable[[], None] = lambda: None

    @property
    def node_name(self) -> str:
        return self.live.inventory.node.name

    @property
    def published_slices(self) -> list[str]:
        """Names of the slices this publisher last wrote."""
        return list(self._written_names)

    @property
    def kind(self) -> Any:
        return SLICE_KINDS[self.options.api_version]

    # -- discovery -------------------------------------------------------------------------------
    async def discover(self) -> None:
        """Node UID (slices are owned by the Node), the newest served API version, and the slice layout.

        The layout follows the node's kubelet version, which stands in for the cluster's (the Node is read
        anyway; ``--server-version`` overrides it on skewed clusters); if the API server is newer or older
        than its kubelet, the first publish that is refused for its layout switches between combined (1.34)
        and split (1.35+) slices, see ``publish``."""
        node = await self.client.get(Node, self.node_name)
        self.node_uid = node.metadata.uid if node.metadata else None
        info = node.status.nodeInfo if node.status else None
        minor = self.options.server_minor
        if self.auto_server_version and info is not None:
            minor = minor_from_kubelet_version(info.kubeletVersion) or minor
        api_version = self.options.api_version
        if self.auto_api_version:
            served = await served_api_version(lambda version: serves_slices(self.client, version))
            if served is None:
                raise PublishError("the API server serves no resource.k8s.io version with ResourceSlices")
            api_version = served
        minor = layout_minor(minor, api_version)
        self.options = replace(self.options, api_version=api_version, server_minor=minor)
        log.info(
            "publishing ResourceSlices as %s for Kubernetes 1.%d (node %s)",
            self.options.api_version,
            self.options.server_minor,
            self.node_name,
        )

    # -- publishing ------------------------------------------------------------------------------
    def _fields(self) -> dict[str, str | BinaryOperator | SequenceOperator]:
        """This driver's slices for this node (the kubelet deletes with the same selector)."""
        return {"spec.nodeName": self.node_name, "spec.driver": self.options.driver}

    async def _list_ours(self) -> tuple[list[SliceKey], str]:
        """The keys of our slices, in name order, and the list's resourceVersion for a watch to start from.

        Listed in pages of ``SLICE_KEY_PAGE``, decoded as ``SliceHead`` (no device is decoded) and reduced to
        keys as each page arrives."""
        keys: list[SliceKey] = []
        version = ""
        async for page in all_pages(
            self.client, self.kind, limit=SLICE_KEY_PAGE, fields=self._fields(), decode_as=SliceHead
        ):
            keys += [slice_key(s) for s in page.items]
            version = page.resource_version
        return sorted(keys, key=lambda k: k.name), version

    async def _ours(self) -> list[SliceKey]:
        found, _ = await self._list_ours()
        return found

    def _wish(self) -> _Plan:
        """The wished slices, rebuilt and digested only when what they depend on changed."""
        inventory = self.live.inventory
        inputs = (tuple(sorted(self.health().items())), self.options, self.node_uid)
        plan = self._plan
        if plan is not None and plan.inventory is inventory and plan.inputs == inputs:
            return plan
        specs = self.build_specs(inventory.node, self.options, dict(inputs[0]))
        digest = plan_digest([self.node_uid or "", *(_serialised(spec) for spec in specs)])
        self._plan = _Plan(inventory, inputs, specs, digest)
        return self._plan

    async def publish(self) -> bool:
        """Make the API server hold exactly the desired slices; returns True when something changed."""
        try:
            changed = await self._publish_with_retries()
        except Exception:
            if self.metrics is not None:
                self.metrics.published("failure")
            raise
        if self.metrics is not None:
            self.metrics.published("success" if changed else "unchanged")
        return changed

    async def _publish_with_retries(self) -> bool:
        switched = False
        for _ in range(MAX_CONFLICT_RETRIES):
            try:
                return await self._publish_once()
            except ApiError as exc:
                if exc.status.code == 409:
                    self.stats.conflicts += 1
                    continue
                if exc.status.code == 422 and not switched and self._switch_layout(exc.status.message or ""):
                    switched = True
                    continue
                message = f"publishing ResourceSlices for node {self.node_name} failed: {exc.status.message}"
                self.stats.errors.append(message)
                raise PublishError(message) from None
        raise PublishError(f"publishing ResourceSlices for node {self.node_name}: too many update conflicts")

    def _switch_layout(self, message: str) -> bool:
        """A 1.35+ server refuses combined slices, a 1.34 one refuses counters in another slice: the
        kubelet's version was not the API server's, so use the other layout."""
        if self.options.mig_mode != "dynamic" or "ounter" not in message:
            return False
        minor = 35 if self.options.server_minor <= 34 else 34
        first, last = SUPPORTED_API_VERSIONS[self.options.api_version]
        if not first <= minor <= last:
            return False
        log.warning(
            "the API server refused the 1.%d slice layout (%s); using the 1.%d layout",
            self.options.server_minor,
            message,
            minor,
        )
        self.options = replace(self.options, server_minor=minor)
        return True

    async def _publish_once(self) -> bool:
        wish = self._wish()
        existing = await self._ours()
        driver = self.options.driver
        pool = PoolWish((driver,) * len(wish.specs), frozenset({driver}), wish.digest, self.node_uid)
        plan = plan_slice_writes(pool, existing, last_generation=self.generation)
        if plan.empty:
            self.stats.unchanged += 1
            return False
        node = self.live.inventory.node
        self.generation = plan.generation
        specs = [_with_generation(spec, self.generation) for spec in wish.specs]
        objects = slice_objects(node, self.options, specs, node_uid=self.node_uid)
        names: list[str] = []
        for i, write in enumerate(plan.writes):
            obj = objects[write.index]
            metadata = obj["metadata"]
            metadata["annotations"] = {PLAN_ANNOTATION: wish.digest}
            if write.replaces is not None:
                take_over(metadata, write.replaces)
                stored = await write_serialized(self.client, self.kind, _body(obj), name=write.replaces.name)
                self.stats.updates += 1
            else:
                stored = await write_serialized(self.client, self.kind, _body(obj))
                self.stats.creates += 1
            if i == 0:
                self._check_kept(stored, wish.specs[write.index])
            names.append(stored.metadata.name)
        for stale in plan.deletes:
            with contextlib.suppress(ApiError):
                await self.client.delete(self.kind, stale)
            self.stats.deletes += 1
        self._written_names = sorted(names)
        self.stats.publishes += 1
        log.info(
            "published %d ResourceSlice(s) for node %s, pool generation %d",
            len(objects),
            self.node_name,
            self.generation,
        )
        return True

    def _check_kept(self, stored: Stored, sent: dict[str, Any]) -> None:
        """Report once when the API server dropped fields of what was written (disabled feature gates).

        The first slice written stands for the pool: it is the counters slice of a dynamic-MIG layout, or holds
        devices, so it loses what the others would. Such a server keeps the digest annotation all the same, so
        the next publish finds the pool unchanged instead of rewriting it forever."""
        message = dropped_fields_warning(sent, stored.spec_dict(), self.node_name)
        if message is not None and message not in self.stats.errors:
            self.stats.errors.append(message)
            log.error("%s", message)

    async def delete_all(self) -> int:
        """Remove this driver's slices for this node (``--delete`` and tests)."""
        count = 0
        for key in await self._ours():
            with contextlib.suppress(ApiError):
                await self.client.delete(self.kind, key.name)
                count += 1
        return count

    # -- running ---------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.discover()
        await self.publish()
        self._unsubscribe = self.live.subscribe(self._dirty.set)
        self._tasks = [
            asyncio.create_task(self._reconcile_loop(), name="slice-reconcile"),
            asyncio.create_task(self._watch_loop(), name="slice-watch"),
        ]

    async def stop(self) -> None:
        """Cancel the loops; a watch stuck on a dead connection must not hold shutdown (2 s at most)."""
        self._unsubscribe()
        await cancel_and_wait(self._tasks)
        self._tasks = []

    def request_publish(self) -> None:
        self._dirty.set()

    async def _reconcile_loop(self) -> None:
        target = client_target(self.client)
        await reconcile_forever(
            self._dirty,
            self.resync_interval,
            self.publish,
            lambda exc, attempt, pause: log_publish_failure(exc, attempt, pause, target),
        )

    async def _watch_loop(self) -> None:
        """List, then watch from the list's resourceVersion: a deletion between our publish and the
        watch's start is caught by the check the list triggers, any later one by the watch."""
        await list_then_watch(
            self._list_ours,
            lambda version: self.client.watch(self.kind, fields=self._fields(), resource_version=version),
            on_list=self._listed,
            on_event=self._slice_event,
            on_failure=lambda exc, _pause: log.warning("ResourceSlice watch ended (%s); watching again", exc),
        )

    def _listed(self, _slices: Sequence[SliceKey]) -> None:
        self._dirty.set()

    def _slice_event(self, event: str, _obj: Any) -> None:
        if event == "DELETED":
            self.stats.recreations += 1
            self._dirty.set()
