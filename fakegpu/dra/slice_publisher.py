"""Publishing the node's devices as ResourceSlices through lightkube, and keeping them published.

One pool per node, slices owned by the Node. The desired slices are rebuilt from the live inventory
whenever it changes; when they differ from what the API server holds, the pool generation is bumped
in every slice and slices are updated, created or deleted to match. Slices that vanish (the kubelet
deletes a node's slices at its start and 30 s after the driver disconnects) are noticed through a
watch and re-created; a periodic resync catches anything a watch missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.operators import BinaryOperator, SequenceOperator
from lightkube.resources.core_v1 import Node

from fakegpu.dra.metrics import DraMetrics
from fakegpu.dra.resource_slices import SliceOptions, build_slice_specs, slice_objects
from fakegpu.kube.discovery import (
    SLICE_KINDS,
    SUPPORTED_API_VERSIONS,
    layout_minor,
    minor_from_kubelet_version,
    served_api_version,
    serves_slices,
)
from fakegpu.kube.reconcile_loop import reconcile_forever
from fakegpu.kube.watch_loop import collect, list_then_watch
from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.sharing.live_inventory import LiveInventory

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


def _strip_generation(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec without what differs between what we send and what the server stores for the same wish:
    the pool generation, and taints' ``timeAdded`` (the server fills it in)."""
    pool = dict(spec.get("pool", {}))
    pool.pop("generation", None)
    devices = []
    for device in spec.get("devices") or []:
        holder = device.get("basic", device)
        if not holder.get("taints"):
            devices.append(device)
            continue
        taints = [{k: v for k, v in t.items() if k != "timeAdded"} for t in holder["taints"]]
        holder = {**holder, "taints": taints}
        devices.append({**device, "basic": holder} if "basic" in device else holder)
    out = {**spec, "pool": pool}
    if "devices" in spec:
        out["devices"] = devices
    return out


def _log_publish_failure(exc: Exception) -> None:
    if isinstance(exc, PublishError):
        log.error("%s; retrying", exc)
    else:  # the API server may be unreachable for a while
        log.error("publishing ResourceSlices failed: %s; retrying", exc)


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
    ) -> None:
        self.client = client
        self.live = live
        self.options = options
        self.metrics = metrics
        self.auto_api_version = auto_api_version
        self.auto_server_version = auto_server_version
        self.resync_interval = resync_interval
        self.stats = PublisherStats()
        self.generation = 0
        self.node_uid: str | None = None
        self._sent: list[dict[str, Any]] = []
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

    async def _list_ours(self) -> tuple[list[Any], str]:
        """Our slices, and the list's resourceVersion for a watch to start from."""
        return await collect(self.client.list(self.kind, fields=self._fields()))

    async def _ours(self) -> list[Any]:
        found, _ = await self._list_ours()
        return sorted(found, key=lambda s: s.metadata.name)

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
        node = self.live.inventory.node
        unhealthy = self.live.unhealthy()
        existing = await self._ours()
        wanted = [_strip_generation(s) for s in build_slice_specs(node, self.options, unhealthy, generation=0)]
        have = [_strip_generation(s.to_dict()["spec"]) for s in existing]
        names = [s.metadata.name for s in existing]
        generations = {s.spec.pool.generation for s in existing if s.spec and s.spec.pool}
        # Unchanged when the server holds what we want, or still holds the very slices we last wrote for
        # the same wish (it may have dropped fields of a disabled feature gate: rewriting would loop).
        ours_untouched = names == self._written_names and generations == {self.generation}
        if have == wanted or (ours_untouched and wanted == self._sent):
            self.stats.unchanged += 1
            return False
        self.generation = max([self.generation, *generations]) + 1
        specs = build_slice_specs(node, self.options, unhealthy, generation=self.generation)
        objects = slice_objects(node, self.options, specs, node_uid=self.node_uid)
        stored: list[Any] = []
        for i, obj in enumerate(objects):
            if i < len(existing):
                current = existing[i]
                obj["metadata"]["name"] = current.metadata.name
                obj["metadata"]["resourceVersion"] = current.metadata.resourceVersion
                obj["metadata"].pop("generateName", None)
                stored.append(await self.client.replace(self.kind.from_dict(obj)))
                self.stats.updates += 1
            else:
                stored.append(await self.client.create(self.kind.from_dict(obj)))
                self.stats.creates += 1
        for stale in existing[len(objects) :]:
            with contextlib.suppress(ApiError):
                await self.client.delete(self.kind, stale.metadata.name)
            self.stats.deletes += 1
        self._sent = wanted
        self._written_names = sorted(s.metadata.name for s in stored)
        if [_strip_generation(s.to_dict()["spec"]) for s in stored] != wanted:
            message = (
                f"the API server dropped fields of the ResourceSlices for node {self.node_name} (partitionable "
                "devices or device taints need the DRAPartitionableDevices / DRADeviceTaints feature gates before "
                "Kubernetes 1.36); the scheduler will not see MIG counters or taints"
            )
            if message not in self.stats.errors:
                self.stats.errors.append(message)
                log.error("%s", message)
        self.stats.publishes += 1
        log.info(
            "published %d ResourceSlice(s) for node %s, pool generation %d",
            len(objects),
            self.node_name,
            self.generation,
        )
        return True

    async def delete_all(self) -> int:
        """Remove this driver's slices for this node (``--delete`` and tests)."""
        count = 0
        for s in await self._ours():
            with contextlib.suppress(ApiError):
                await self.client.delete(self.kind, s.metadata.name)
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
        await reconcile_forever(self._dirty, self.resync_interval, self.publish, _log_publish_failure)

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

    def _listed(self, _slices: Sequence[Any]) -> None:
        self._dirty.set()

    def _slice_event(self, event: str, _obj: Any) -> None:
        if event == "DELETED":
            self.stats.recreations += 1
            self._dirty.set()
