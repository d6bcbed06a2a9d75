"""Bringing virtual nodes up (create or adopt), and taking them down (``--delete``).

Bring-up reads the cluster once (every Node and every ResourceSlice), then works on each planned node with
at most ``concurrency`` nodes in flight: create it, or adopt it when a KWOK node of that name exists, or
refuse it when a real node does; then make its pool of slices match (the driver's slices of the node,
whoever wrote them), and delete the slices this tool published for it under another ``--driver-name``.
Each step compares before writing, so a second run with the same arguments only reads. The same per-node
step (``sync``) serves the watcher, which calls it with what a watch event or a resync showed.

A slice create whose outcome is unknown (a 5xx or a broken connection after it was sent) is not repeated
blindly: the node's slices are listed again and the writes worked out anew, so no slice is published twice.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fakegpu.dra.resource_slices import MigMode, SliceOptions
from fakegpu.kube.discovery import layout_minor, served_api_version
from fakegpu.virtual_nodes.api import Api, ApiCallError, KubeconfigError
from fakegpu.virtual_nodes.names import DEFAULT_PREFIX, prefix_label_value
from fakegpu.virtual_nodes.node_manifest import (
    OWNER_LABEL,
    OWNER_VALUE,
    PREFIX_LABEL,
    DesiredNode,
    NodeShape,
    desired_node,
    is_kwok,
    is_ours,
    new_node,
    node_changes,
    origin,
    release_changes,
)
from fakegpu.virtual_nodes.pools import VirtualNode
from fakegpu.virtual_nodes.report import BringUpReport, DeleteReport, Outcome
from fakegpu.virtual_nodes.slice_set import signature, signatures, slice_writes, wanted_specs

log = logging.getLogger(__name__)

JSON = dict[str, Any]
MAX_CONFLICT_RETRIES = 3
OWNED = {OWNER_LABEL: OWNER_VALUE}


@dataclass(frozen=True)
class Settings:
    shape: NodeShape = field(default_factory=NodeShape)
    driver: str = "gpu.nvidia.com"
    mig_mode: MigMode = "static"
    server_minor: int | None = None
    """Kubernetes 1.<minor> whose slice layout to use; None reads the server's /version."""
    api_version: str | None = None
    """resource.k8s.io version for the slices; None picks the newest the server serves."""
    concurrency: int = 16
    name_prefix: str = DEFAULT_PREFIX
    refresh_timestamp: bool = False
    """``--watch``: the nodes carry this run's ``nvidia.com/gfd.timestamp``; else a stored one is kept."""


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _node_of(slice_obj: Mapping[str, Any]) -> str:
    return str((slice_obj.get("spec") or {}).get("nodeName") or "")


def _driver_of(slice_obj: Mapping[str, Any]) -> str:
    return str((slice_obj.get("spec") or {}).get("driver") or "")


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _labelled(obj: Mapping[str, Any]) -> bool:
    return _labels(obj).get(OWNER_LABEL) == OWNER_VALUE


class VirtualNodeController:
    def __init__(
        self,
        api: Api,
        nodes: Sequence[VirtualNode],
        settings: Settings,
        say: Callable[[str], None] = log.info,
    ) -> None:
        if settings.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {settings.concurrency}")
        self.api = api
        self.settings = settings
        self.say = say
        self.nodes = {v.name: v for v in nodes}
        self.desired: dict[str, DesiredNode] = {
            v.name: desired_node(v, settings.shape, refresh_timestamp=settings.refresh_timestamp) for v in nodes
        }
        self.options: SliceOptions | None = None
        """How slices are published; None when the server serves no ResourceSlices (or before discover)."""
        self.seen: set[str] = set()
        """Nodes that existed as virtual nodes during this run: a missing one was deleted by someone."""
        self.gone: set[str] = set()
        self.refused: set[str] = set()
        self.uids: dict[str, str] = {}
        self._accepted: dict[str, list[str]] = {}
        """Per node, the signatures of its slices as last found or written for the plan (what the server
        keeps may lack fields it dropped): the watcher compares events against them without a request."""
        self._wanted: dict[tuple[str, str], list[str]] = {}
        self._dropped_fields_reported = False
        self._slots = asyncio.Semaphore(settings.concurrency)
        self._fatal: KubeconfigError | None = None
        """Set when the credentials failed during bring-up: every other node would fail the same way."""

    # -- discovery -------------------------------------------------------------------------------------
    async def discover(self) -> None:
        """The slice layout and API version, from the flags or from the server."""
        minor = self.settings.server_minor
        if minor is None:
            minor = await self.api.server_minor()
        api_version = await self._api_version()
        if api_version is None:
            self.options = None
            self.say(
                f"Kubernetes 1.{minor}: the API server serves no resource.k8s.io ResourceSlices; "
                "publishing capacity and labels only"
            )
            return
        layout = layout_minor(minor, api_version)
        self.options = SliceOptions(
            driver=self.settings.driver, mig_mode=self.settings.mig_mode, server_minor=layout, api_version=api_version
        )
        self.say(f"Kubernetes 1.{minor}: ResourceSlices as {api_version} with the 1.{layout} layout")

    async def _api_version(self) -> str | None:
        """``--resource-api-version`` when given; else the newest version whose ResourceSlices the server lists."""
        if self.settings.api_version is not None:
            return self.settings.api_version
        return await served_api_version(self.api.slices_served)

    def slice_fields(self, node_name: str) -> dict[str, str]:
        """The field selector of a node's slices (every driver's: ``relevant`` picks this tool's)."""
        return {"spec.nodeName": node_name}

    def relevant(self, slices: Sequence[JSON]) -> list[JSON]:
        """The slices a managed node's sync looks at: the driver's (whoever wrote them, they are replaced)
        and the ones labelled as this tool's under another driver name (deleted)."""
        assert self.options is not None
        driver = self.options.driver
        return [s for s in slices if _driver_of(s) == driver or _labelled(s)]

    def managed(self, name: str) -> bool:
        """Planned, not refused as a real node, not deleted by someone."""
        return name in self.nodes and name not in self.refused and name not in self.gone

    # -- one node --------------------------------------------------------------------------------------
    async def sync(
        self,
        node: VirtualNode,
        existing: JSON | None,
        slices: Sequence[JSON],
        *,
        may_create: bool,
        counts: collections.Counter[str],
    ) -> Outcome:
        """Make one Node and its slices as planned; ``counts`` gets the slice writes.

        ``existing`` None means the Node does not exist: it is created when ``may_create``, else it was
        deleted by someone (GONE). A non-KWOK Node of that name is never touched (REFUSED)."""
        name = node.name
        desired = self.desired[name]
        if existing is None:
            if not may_create:
                return Outcome.GONE
            try:
                stored = await self.api.create_node(new_node(desired))
            except ApiCallError as exc:
                if exc.code != 409:
                    raise
                # Someone created it between our list and our create: treat it as found.
                again = await self.api.get_node(name)
                if again is None:
                    raise
                return await self.sync(node, again, slices, may_create=False, counts=counts)
            outcome = Outcome.CREATED
            stored, _ = await self._patch_node(name, stored, desired)  # a server that dropped status on create
        else:
            if not is_kwok(existing):
                self.refused.add(name)
                return Outcome.REFUSED
            adopting = not is_ours(existing)
            stored, changed = await self._patch_node(name, existing, desired)
            outcome = Outcome.ADOPTED if adopting else Outcome.UPDATED if changed else Outcome.UNCHANGED
        self.seen.add(name)
        uid = str(stored["metadata"]["uid"])
        self.uids[name] = uid
        slices_written = self.options is not None and await self._sync_slices(node, uid, slices, counts)
        if slices_written and outcome is Outcome.UNCHANGED:
            outcome = Outcome.UPDATED
        return outcome

    async def _patch_node(self, name: str, existing: JSON, desired: DesiredNode) -> tuple[JSON, bool]:
        """Patch what differs; on a conflict (the taint list changed meanwhile) read the Node again."""
        for attempt in range(MAX_CONFLICT_RETRIES):
            changes = node_changes(existing, desired)
            if changes.empty:
                return existing, False
            try:
                if changes.node is not None:
                    existing = await self.api.patch_node(name, changes.node)
                if changes.status is not None:
                    existing = await self.api.patch_node(name, changes.status, status=True)
                return existing, True
            except ApiCallError as exc:
                if exc.code != 409 or attempt == MAX_CONFLICT_RETRIES - 1:
                    raise
                again = await self.api.get_node(name)
                if again is None:
                    raise ApiCallError(f"node {name} was deleted while being updated", 404) from None
                existing = again
        raise AssertionError("unreachable")

    def wanted_signatures(self, node: VirtualNode, uid: str) -> list[str]:
        """The signatures of the node's slices as planned (cached: the plan does not change in a run)."""
        assert self.options is not None
        key = (node.name, uid)
        if key not in self._wanted:
            self._wanted[key] = sorted(signature(s, uid, True) for s in wanted_specs(node, self.options))
        return self._wanted[key]

    def accepted(self, name: str) -> list[str]:
        """The signatures of a node's slices as last found right, or as the server returned our last write."""
        return self._accepted.get(name, [])

    def slices_as_planned(self, name: str, slices: Sequence[JSON]) -> bool:
        """Whether a node's stored slices need no write (the planned ones, or what the server kept of them)."""
        uid = self.uids.get(name)
        if uid is None or self.options is None:
            return False
        have = signatures(slices)
        return have == self.wanted_signatures(self.nodes[name], uid) or have == self._accepted.get(name)

    async def _sync_slices(
        self, node: VirtualNode, uid: str, slices: Sequence[JSON], counts: collections.Counter[str]
    ) -> bool:
        options = self.options
        assert options is not None
        version = options.api_version
        current = self.relevant(slices)
        wrote = False
        for attempt in range(MAX_CONFLICT_RETRIES):
            # Slices this tool published under another --driver-name: ours by label, not of this plan.
            foreign = [_name(s) for s in current if _driver_of(s) != options.driver]
            current = [s for s in current if _driver_of(s) == options.driver]
            writes = slice_writes(node, options, current, uid, self._accepted.get(node.name))
            writes.delete = [*foreign, *writes.delete]
            if writes.empty:
                self._accepted[node.name] = signatures(current)
                return wrote
            wrote = True
            try:
                stored = []
                for obj in writes.replace:
                    stored.append(await self.api.replace_slice(version, obj))
                    counts["updated"] += 1
                for obj in writes.create:
                    stored.append(await self.api.create_slice(version, obj))
                    counts["created"] += 1
                for slice_name in writes.delete:
                    if await self.api.delete_slice(version, slice_name):
                        counts["deleted"] += 1
            except ApiCallError as exc:
                retry = exc.code in (404, 409) or exc.uncertain
                if not retry or attempt == MAX_CONFLICT_RETRIES - 1:
                    raise
                if exc.uncertain:  # the server may be struggling: pause as the request retries do
                    await asyncio.sleep(self.api.backoff * 2**attempt)
                # Look before writing again: a create whose answer was lost may have happened.
                listed, _ = await self.api.list_slices(version, fields=self.slice_fields(node.name))
                current = self.relevant(listed)
                continue
            kept = signatures(stored)
            self._accepted[node.name] = kept
            if kept != self.wanted_signatures(node, uid) and not self._dropped_fields_reported:
                self._dropped_fields_reported = True
                self.say(
                    "warning: the API server dropped fields of the ResourceSlices (partitionable devices or "
                    "device taints need the DRAPartitionableDevices / DRADeviceTaints feature gates before "
                    "Kubernetes 1.36); the scheduler will not see MIG counters or taints"
                )
            return True
        raise AssertionError("unreachable")

    async def delete_slices_of(self, node_name: str) -> int:
        """Delete this tool's slices of a node that is gone (a real cluster's GC would do it too, later)."""
        if self.options is None:
            return 0
        version = self.options.api_version
        found, _ = await self.api.list_slices(version, labels=OWNED, fields={"spec.nodeName": node_name})
        deleted = 0
        for obj in found:
            if await self.api.delete_slice(version, _name(obj)):
                deleted += 1
        return deleted

    # -- bring-up --------------------------------------------------------------------------------------
    async def bring_up(self) -> BringUpReport:
        report = BringUpReport()
        started = time.perf_counter()
        nodes, _ = await self.api.list_nodes()
        existing = {_name(n): n for n in nodes}
        by_node: dict[str, list[JSON]] = collections.defaultdict(list)
        if self.options is not None:
            # Every slice, in one list like the nodes: the driver's and, under any driver, this tool's.
            slices, _ = await self.api.list_slices(self.options.api_version)
            for obj in self.relevant(slices):
                by_node[_node_of(obj)].append(obj)
        prefix = prefix_label_value(self.settings.name_prefix)
        report.leftovers = sorted(
            name
            for name, n in existing.items()
            if is_ours(n) and _labels(n).get(PREFIX_LABEL) == prefix and name not in self.nodes
        )
        self.say(
            f"found {len(existing)} node(s) in the cluster, {sum(1 for n in self.nodes if n in existing)} of the "
            f"{len(self.nodes)} planned"
        )
        await asyncio.gather(
            *(
                self._bring_up_one(node, existing.get(name), by_node.get(name, []), report)
                for name, node in self.nodes.items()
            )
        )
        report.seconds = time.perf_counter() - started
        if self._fatal is not None:
            raise self._fatal
        return report

    async def _bring_up_one(
        self, node: VirtualNode, existing: JSON | None, slices: list[JSON], report: BringUpReport
    ) -> None:
        async with self._slots:
            started = time.perf_counter()
            try:
                if self._fatal is not None:
                    raise self._fatal
                outcome = await self.sync(node, existing, slices, may_create=True, counts=report.slices)
            except ApiCallError as exc:
                outcome = Outcome.FAILED
                report.problems[node.name] = str(exc)
            except KubeconfigError as exc:
                self._fatal = self._fatal or exc
                outcome = Outcome.FAILED
                report.problems[node.name] = str(exc)
            report.durations[node.name] = time.perf_counter() - started
        report.outcomes[node.name] = outcome
        if outcome is Outcome.REFUSED:
            report.problems[node.name] = (
                f"a Node named {node.name} exists and is not a KWOK node (no annotation kwok.x-k8s.io/node: "
                "fake); it was left alone"
            )

    # -- deletion --------------------------------------------------------------------------------------
    async def delete_all(self) -> DeleteReport:
        """Delete every virtual node this tool created with this name prefix (the prefix label, matched
        exactly) and its slices, and hand back the ones it adopted. Only Nodes with the ownership label,
        the prefix label and the KWOK annotation are touched."""
        report = DeleteReport()
        started = time.perf_counter()
        prefix = self.settings.name_prefix
        if not prefix:
            raise ValueError("deleting needs a name prefix: an empty one would select every virtual node")
        value = prefix_label_value(prefix)
        labelled, _ = await self.api.list_nodes(labels={**OWNED, PREFIX_LABEL: value})
        ours = [n for n in labelled if is_kwok(n)]
        names = {_name(n) for n in ours}
        api_version = await self._api_version()
        slices: list[JSON] = []
        if api_version is not None:
            found, _ = await self.api.list_slices(api_version, labels=OWNED)
            # Slices of the selected nodes, and slices with this prefix whose node is already gone.
            slices = [s for s in found if _node_of(s) in names or _labels(s).get(PREFIX_LABEL) == value]
        self.say(f"found {len(ours)} virtual node(s) and {len(slices)} ResourceSlice(s) of --name-prefix {prefix}")

        async def remove_slice(obj: JSON) -> None:
            assert api_version is not None
            async with self._slots:
                try:
                    if await self.api.delete_slice(api_version, _name(obj)):
                        report.slices_deleted += 1
                except ApiCallError as exc:
                    report.problems[_name(obj)] = str(exc)

        async def remove_node(obj: JSON) -> None:
            name = _name(obj)
            async with self._slots:
                try:
                    if origin(obj) == "adopted":
                        if await self._release(name, obj):
                            report.nodes_released += 1
                    elif await self.api.delete_node(name):
                        report.nodes_deleted += 1
                except ApiCallError as exc:
                    report.problems[name] = str(exc)

        await asyncio.gather(*(remove_slice(s) for s in slices))
        await asyncio.gather(*(remove_node(n) for n in ours))
        report.seconds = time.perf_counter() - started
        return report

    async def _release(self, name: str, node: JSON) -> bool:
        """Hand an adopted node back as it was; a conflict (the taint list changed meanwhile) reads it again.
        False when it was deleted meanwhile. The status goes first: the metadata patch drops the record of
        what to restore, so a failure in between leaves the node ours, to be handed back by the next run."""
        for attempt in range(MAX_CONFLICT_RETRIES):
            changes = release_changes(node)
            try:
                if changes.status is not None:
                    await self.api.patch_node(name, changes.status, status=True)
                if changes.node is not None:
                    await self.api.patch_node(name, changes.node)
                return True
            except ApiCallError as exc:
                if exc.code != 409 or attempt == MAX_CONFLICT_RETRIES - 1:
                    raise
                again = await self.api.get_node(name)
                if again is None:
                    return False
                node = again
        raise AssertionError("unreachable")
