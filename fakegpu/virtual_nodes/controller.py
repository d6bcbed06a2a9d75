"""Bringing virtual nodes up (create or adopt), and taking them down (``--delete``), at fleet scale.

Bring-up reads the cluster once, in pages, keeping of each object only what the reconcile needs: of a
planned Node the patches that would bring it in line (usually none), of a slice its ``SliceKey`` (name,
resourceVersion, pool generation, owner and the digest of the wish it was written for). Memory therefore
does not grow with the size of what is listed. Then each planned node, with at most ``concurrency`` in
flight (halved on a 429, see ``fakegpu.kube.adaptive_limit``): create it, or adopt it when a KWOK node of
that name exists, or refuse it when a real node does; then make its pool of slices match, or remove them in
the ``device-plugin`` GPU mode (a node offers its GPUs one way: capacity or DRA devices, never both). A
pool's slices are built once per pool (``slice_template``) and compared by digest, so a second run with the
same arguments only reads. The same per-node step (``sync``) serves the watcher.

A slice create whose outcome is unknown (a 5xx or a broken connection after it was sent) is not repeated
blindly: the node's slices are listed again and the writes worked out anew, so no slice is published twice.

``--delete`` hands adopted nodes back, then deletes the created ones in one collection delete by label; the
garbage collector takes their slices (owner references), and one more collection delete takes whatever
slices of the prefix it has not (an adopted node's, or all of them on a server without the collector). The
first request (the served-version probe, a one-item list of the prefix's slices) says whether there are any
slices to wait for or sweep at all: deleting nothing costs three reads. What it is doing is in ``step``, for
the progress line: on a loaded server the collection deletes take minutes.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightkube.operators import in_

from fakegpu.dra.compute_domain.devices import COMPUTE_DOMAIN_DRIVER
from fakegpu.dra.compute_domain.resources import DRIVER_NAMESPACE
from fakegpu.dra.feature_gates import FeatureGates
from fakegpu.dra.resource_slices import MigMode, SliceOptions
from fakegpu.dra.slice_digest import SliceKey, plan_digest
from fakegpu.dra.slice_write_plan import PoolWish, SliceWritePlan, dropped_fields_warning, plan_slice_writes, take_over
from fakegpu.kube.adaptive_limit import AdaptiveLimit
from fakegpu.kube.discovery import layout_minor, served_api_version
from fakegpu.kube.lean_requests import Stored
from fakegpu.sharing.fault_record import FAULTS_ANNOTATION, NodeFaults, decode_faults
from fakegpu.virtual_nodes.api import Api, ApiCallError, KubeconfigError
from fakegpu.virtual_nodes.extended_classes import is_ours as is_our_class
from fakegpu.virtual_nodes.extended_classes import plan_classes, wanted_classes
from fakegpu.virtual_nodes.names import DEFAULT_PREFIX, prefix_label_values
from fakegpu.virtual_nodes.node_faults import with_faults
from fakegpu.virtual_nodes.node_manifest import (
    OWNER_LABEL,
    OWNER_VALUE,
    PREFIX_LABEL,
    DesiredNode,
    NodeChanges,
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
from fakegpu.virtual_nodes.slice_template import (
    PoolTemplate,
    SliceBody,
    slice_bodies,
    slice_drivers,
    wanted_drivers,
)

log = logging.getLogger(__name__)

JSON = dict[str, Any]
MAX_CONFLICT_RETRIES = 3
OWNED = {OWNER_LABEL: OWNER_VALUE}
GC_WAIT = 30.0
"""How long ``--delete`` follows the garbage collector removing the deleted nodes' slices, at most."""
GC_STALL = 2.0
"""How long without progress before ``--delete`` stops waiting for the collector and deletes the rest."""
GC_POLL = 0.5


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
    feature_gates: FeatureGates = field(default_factory=FeatureGates)
    """``--feature-gates``: the slices are what NVIDIA's driver publishes with these gates (NVMLDeviceHealthCheck:
    GPUs a node spec starts unhealthy carry NVIDIA's taints; DRAListTypeAttributes, FabricManagerPartitioning:
    attributes)."""
    compute_domain_namespace: str = DRIVER_NAMESPACE
    """``--watch``: where the virtual nodes' IMEX daemons write their ComputeDomainCliques."""


@dataclass(frozen=True)
class Existing:
    """What the reconcile keeps of a listed Node: not the Node, the patches that would bring it in line."""

    uid: str
    kwok: bool
    ours: bool
    changes: NodeChanges


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _labelled(key: SliceKey) -> bool:
    return key.labels.get(OWNER_LABEL) == OWNER_VALUE


class VirtualNodeController:
    def __init__(
        self,
        api: Api,
        nodes: Sequence[VirtualNode],
        settings: Settings,
        say: Callable[[str], None] = log.info,
    ) -> None:
        self.api = api
        self.settings = settings
        self.say = say
        self.limit = AdaptiveLimit(settings.concurrency)
        api.limit = self.limit
        self.nodes = {v.name: v for v in nodes}
        self.bases = dict(self.nodes)
        """The planned nodes without faults: a node's faults are laid on its base (``set_faults``)."""
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
        self.done = 0
        """Nodes (or, deleting, objects) finished so far: what a progress line shows against ``total``."""
        self.total = 0
        self.step = ""
        """What a long ``--delete`` is waiting for, for the progress line (empty when nothing long)."""
        api.notice = lambda line: say(f"warning: {line}")
        self._templates: dict[str, PoolTemplate] = {}
        self._dropped_fields_checked = False
        self._node_status_kept: bool | None = None
        """Whether the server kept a created Node's status, once one answer said; until then creates ask
        for the whole answer, after it for the identity alone."""
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
            driver=self.settings.driver,
            mig_mode=self.settings.mig_mode,
            server_minor=layout,
            api_version=api_version,
            feature_gates=self.settings.feature_gates,
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

    def relevant(self, keys: Sequence[SliceKey]) -> list[SliceKey]:
        """The slices a managed node's sync looks at: the driver's and the compute-domain driver's (whoever
        wrote them, they are replaced) and the ones labelled as this tool's under another driver name
        (deleted)."""
        assert self.options is not None
        drivers = (self.options.driver, COMPUTE_DOMAIN_DRIVER)
        return [k for k in keys if k.driver in drivers or _labelled(k)]

    def managed(self, name: str) -> bool:
        """Planned, not refused as a real node, not deleted by someone."""
        return name in self.nodes and name not in self.refused and name not in self.gone

    def template(self, node: VirtualNode) -> PoolTemplate:
        """The slices of the node's pool, built at first use (one build, plus one to check the derivation)."""
        assert self.options is not None
        template = self._templates.get(node.pool)
        if template is None:
            members = [v for v in self.nodes.values() if v.pool == node.pool]
            template = self._templates[node.pool] = PoolTemplate(members, self.options)
        return template

    # -- faults ----------------------------------------------------------------------------------------
    def set_faults(self, name: str, faults: NodeFaults, *, record: str | None = None) -> None:
        """Plan node ``name`` with ``faults`` on its GPUs (``fakegpu.virtual_nodes.node_faults``): its
        allocatable, labels, slices and the annotation that records them. ``record`` keeps a stored annotation
        this run cannot read as it is, rather than overwrite it."""
        node = with_faults(self.bases[name], faults)
        self.nodes[name] = node
        desired = desired_node(node, self.settings.shape, refresh_timestamp=self.settings.refresh_timestamp)
        if record is not None:
            desired = dataclasses.replace(desired, faults=record)
        self.desired[name] = desired

    def adopt_faults(self, obj: Mapping[str, Any]) -> bool:
        """Take the faults a listed or watched Node records (another run's ``--fault``, a scenario step) into
        its plan, so no run takes them away; whether the plan changed. An unreadable record is warned about
        and left alone."""
        name = _name(obj)
        if name not in self.bases:
            return False
        value = ((obj.get("metadata") or {}).get("annotations") or {}).get(FAULTS_ANNOTATION) or None
        if value == self.desired[name].faults:
            return False
        try:
            faults = decode_faults(value, f"node {name}")
        except ValueError as exc:
            self.say(f"warning: {exc}; its faults are left as they are and not shown")
            self.set_faults(name, {}, record=value)
            return True
        count = len(self.bases[name].inventory.node.gpus)
        extra = sorted(i for i in faults if i >= count)
        if extra:
            self.say(
                f"warning: node {name}: annotation {FAULTS_ANNOTATION} names GPU(s) {', '.join(map(str, extra))}; "
                f"the node has {count} GPU(s): those faults are kept but change nothing"
            )
        self.set_faults(name, faults)
        return True

    # -- one node --------------------------------------------------------------------------------------
    def existing_of(self, obj: JSON) -> Existing:
        name = _name(obj)
        meta = obj.get("metadata") or {}
        changes = node_changes(obj, self.desired[name]) if is_kwok(obj) else NodeChanges(None, None)
        return Existing(str(meta.get("uid") or ""), is_kwok(obj), is_ours(obj), changes)

    async def sync(
        self,
        node: VirtualNode,
        existing: JSON | Existing | None,
        slices: Sequence[SliceKey],
        *,
        may_create: bool,
        counts: collections.Counter[str],
    ) -> Outcome:
        """Make one Node and its slices as planned; ``counts`` gets the slice writes. The outcome is the
        Node's: a node whose slices alone were written is unchanged (the slice counts say the rest).

        ``existing`` None means the Node does not exist: it is created when ``may_create``, else it was
        deleted by someone (GONE). A non-KWOK Node of that name is never touched (REFUSED)."""
        name = node.name
        node = self.nodes[name]  # with the faults its caller adopted
        desired = self.desired[name]
        if isinstance(existing, dict):
            existing = self.existing_of(existing)
        if existing is None:
            if not may_create:
                return Outcome.GONE
            try:
                stored = await self.api.create_node(new_node(desired), identity_only=self._node_status_kept is not None)
            except ApiCallError as exc:
                if exc.code != 409:
                    raise
                # Someone created it between our list and our create: treat it as found.
                again = await self.api.get_node(name)
                if again is None:
                    raise
                return await self.sync(node, again, slices, may_create=False, counts=counts)
            outcome = Outcome.CREATED
            uid = stored.metadata.uid
            if self._node_status_kept is None:
                self._node_status_kept = bool(stored.status_dict().get("capacity"))
            if not self._node_status_kept:  # a server that dropped status on create
                status = {"capacity": dict(desired.capacity), "allocatable": dict(desired.allocatable)}
                await self.api.patch_node(name, {"status": status}, status=True)
        else:
            if not existing.kwok:
                self.refused.add(name)
                return Outcome.REFUSED
            uid, changed = await self._patch_node(name, existing, desired)
            outcome = Outcome.ADOPTED if not existing.ours else Outcome.UPDATED if changed else Outcome.UNCHANGED
        self.seen.add(name)
        self.uids[name] = uid
        if self.options is not None:
            await self._sync_slices(node, uid, slices, counts)
        return outcome

    async def _patch_node(self, name: str, existing: Existing, desired: DesiredNode) -> tuple[str, bool]:
        """Patch what differs; on a conflict (the taint list changed meanwhile) read the Node again."""
        for attempt in range(MAX_CONFLICT_RETRIES):
            changes = existing.changes
            if changes.empty:
                return existing.uid, False
            try:
                if changes.node is not None:
                    await self.api.patch_node(name, changes.node)
                if changes.status is not None:
                    await self.api.patch_node(name, changes.status, status=True)
                return existing.uid, True
            except ApiCallError as exc:
                if exc.code != 409 or attempt == MAX_CONFLICT_RETRIES - 1:
                    raise
                again = await self.api.get_node(name)
                if again is None:
                    raise ApiCallError(f"node {name} was deleted while being updated", 404) from None
                existing = self.existing_of(again)
        raise AssertionError("unreachable")

    def slices_as_planned(self, name: str, keys: Sequence[SliceKey], uid: str | None = None) -> bool:
        """Whether a node's stored slices need no write: the wish's digest on each of the planned number
        of slices under the node's UID (``uid``, or the one this run saw), and none of this tool's under another
        driver; none at all for a node whose GPUs are capacity."""
        uid = uid or self.uids.get(name)
        if uid is None or self.options is None:
            return False
        return all(plan.empty for _, plan in self._slice_plans(self.nodes[name], uid, self.relevant(keys)))

    def planned_slice(self, name: str, key: SliceKey) -> bool:
        """Whether one stored slice is part of the node's plan (its digest and owner): what a watch event
        about it is measured against."""
        uid = self.uids.get(name)
        node = self.nodes[name]
        if uid is None or self.options is None or not node.publishes_slices:
            return False
        if key.driver not in slice_drivers(node, self.options):
            return False
        return key.digest in self.template(node).digests(node, key.driver) and key.owner_uid == uid

    async def _sync_slices(
        self, node: VirtualNode, uid: str, keys: Sequence[SliceKey], counts: collections.Counter[str]
    ) -> bool:
        options = self.options
        assert options is not None
        version = options.api_version
        current = self.relevant(keys)
        wrote = False
        for attempt in range(MAX_CONFLICT_RETRIES):
            plans = self._slice_plans(node, uid, current)
            if all(plan.empty for _, plan in plans):
                return wrote
            replace, create, delete = self._slice_writes(node, uid, plans, options)
            wrote = True
            try:
                await self._write_slices(version, replace, create, delete, counts)
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
            return True
        raise AssertionError("unreachable")

    def _slice_plans(
        self, node: VirtualNode, uid: str, current: Sequence[SliceKey]
    ) -> list[tuple[str, SliceWritePlan]]:
        """Per driver's pool, the writes that bring the node's stored slices (``current``, the relevant ones) in
        line; none when they hold the wish. Each driver's slices are a pool of their own (one pool per node and
        driver, named after the node, as the kubelet plugins build it), with their own digest and generation: a
        GPU fault writes the gpu.nvidia.com pool only. Slices this tool published under another --driver-name,
        a compute-domain slice of a node off the fabric, and every slice of a node whose GPUs are capacity (the
        device-plugin mode) are deleted (with the GPU pool's writes). Slices are compared one by one (a digest
        each): one changed slice of a complete pool is updated alone at the same generation, as Kubernetes'
        ResourceSlice controller does; any other change writes the pool anew at the next generation."""
        assert self.options is not None
        if not node.publishes_slices:
            return [("", plan_slice_writes(PoolWish((), frozenset(), "", uid), current))]
        template = self.template(node)
        wanted = wanted_drivers(node, self.options, template.count_of(node))
        drivers = slice_drivers(node, self.options)
        gpu = self.options.driver
        plans = []
        for driver in sorted(drivers, key=lambda d: d != gpu):
            mine = [k for k in current if k.driver == driver or (driver == gpu and k.driver not in drivers)]
            # Built once: a faulted node's digests compare its slice texts with the template's. The pool digest
            # is not stamped (each slice carries its own).
            digests = template.digests(node, driver)
            wish = PoolWish(
                tuple(d for d in wanted if d == driver),
                frozenset({driver}),
                plan_digest(digests),
                uid,
                (node.name, node.name),
                digests,
            )
            plans.append((driver, plan_slice_writes(wish, mine)))
        return plans

    def _slice_writes(
        self, node: VirtualNode, uid: str, plans: Sequence[tuple[str, SliceWritePlan]], options: SliceOptions
    ) -> tuple[list[SliceBody], list[SliceBody], list[str]]:
        """The plans' writes as bodies: the slices to replace (named as the stored slices they update), those
        to create, and the names of those to delete."""
        deletes = [name for _, plan in plans for name in plan.deletes]
        if not any(plan.writes for _, plan in plans):
            return [], [], deletes
        template = self.template(node)
        generations = {driver: plan.generation for driver, plan in plans}
        objects = slice_bodies(node, options, template.wanted(node), generations, uid)
        at: dict[str, list[int]] = collections.defaultdict(list)
        for index, driver in enumerate(wanted_drivers(node, options, template.count_of(node))):
            at[driver].append(index)
        replace: list[SliceBody] = []
        create: list[SliceBody] = []
        for driver, plan in plans:
            for write in plan.writes:
                obj = objects[at[driver][write.index]]
                if write.replaces is None:
                    create.append(obj)
                else:
                    take_over(obj.metadata, write.replaces)
                    replace.append(obj)
        return replace, create, deletes

    async def _write_slices(
        self,
        version: str,
        replace: Sequence[SliceBody],
        create: Sequence[SliceBody],
        delete: Sequence[str],
        counts: collections.Counter[str],
    ) -> None:
        """Replace, create, then delete; ``counts`` gets each write done (so a failure part-way counts what
        happened before it)."""
        for obj in replace:
            whole = not self._dropped_fields_checked
            self._check_dropped(obj, await self.api.replace_slice(version, obj, identity_only=not whole))
            counts["updated"] += 1
        for obj in create:
            whole = not self._dropped_fields_checked
            self._check_dropped(obj, await self.api.create_slice(version, obj, identity_only=not whole))
            counts["created"] += 1
        for slice_name in delete:
            if await self.api.delete_slice(version, slice_name):
                counts["deleted"] += 1

    def _check_dropped(self, sent: SliceBody, stored: Stored) -> None:
        """Once per run: whether the server kept the fields of the first slice written (it drops those of
        disabled feature gates); comparing every write would cost more than writing."""
        if self._dropped_fields_checked:
            return
        self._dropped_fields_checked = True
        warning = dropped_fields_warning(sent.spec_dict(), stored.spec_dict())
        if warning is not None:
            self.say(f"warning: {warning}")

    async def delete_slices_of(self, node_name: str) -> int:
        """Delete this tool's slices of a node that is gone (a real cluster's GC would do it too, later)."""
        if self.options is None:
            return 0
        return await self._delete_slices(self.options.api_version, node_name)

    async def _delete_slices(self, version: str, node_name: str) -> int:
        found, _ = await self.api.list_slices(version, labels=OWNED, fields={"spec.nodeName": node_name})
        deleted = 0
        for key in found:
            if await self.api.delete_slice(version, key.name):
                deleted += 1
        return deleted

    # -- bring-up --------------------------------------------------------------------------------------
    async def bring_up(self) -> BringUpReport:
        report = BringUpReport()
        started = time.perf_counter()
        self.done, self.total = 0, len(self.nodes)
        existing: dict[str, Existing] = {}
        prefixes = set(prefix_label_values(self.settings.name_prefix))
        listed = 0
        async for page in self.api.node_pages():
            for obj in page:
                listed += 1
                name = _name(obj)
                if name in self.nodes:
                    self.adopt_faults(obj)
                    existing[name] = self.existing_of(obj)
                elif is_ours(obj) and _labels(obj).get(PREFIX_LABEL) in prefixes:
                    report.leftovers.append(name)
        report.leftovers.sort()
        by_node: dict[str, list[SliceKey]] = collections.defaultdict(list)
        if self.options is not None:
            # Every slice, a page at a time: the driver's and, under any driver, this tool's.
            async for keys in self.api.slice_pages(self.options.api_version):
                for key in self.relevant(keys):
                    if key.node in self.nodes:
                        by_node[key.node].append(key)
        self.say(f"found {listed} node(s) in the cluster, {len(existing)} of the {len(self.nodes)} planned")
        await self._ensure_classes(report)
        await asyncio.gather(
            *(
                self._bring_up_one(node, existing.get(name), by_node.pop(name, []), report)
                for name, node in self.nodes.items()
            )
        )
        report.seconds = time.perf_counter() - started
        report.throttles = self.limit.throttles
        report.lowest_concurrency = self.limit.lowest
        if self._fatal is not None:
            raise self._fatal
        return report

    async def _ensure_classes(self, report: BringUpReport) -> None:
        """The DeviceClasses of the dra-extended mode, created or brought in line (someone else's are only
        warned about)."""
        if self.options is None:
            return
        version = self.options.api_version
        wanted = wanted_classes((n.mode for n in self.nodes.values()), self.options.driver, version)
        if not wanted:
            return
        plan = plan_classes(wanted, await self.api.list_device_classes(version))
        for warning in plan.warnings:
            self.say(f"warning: {warning}")
        for obj in plan.create:
            await self.api.create_device_class(version, obj)
            report.device_classes["created"] += 1
        for obj in plan.replace:
            await self.api.replace_device_class(version, obj)
            report.device_classes["replaced"] += 1

    async def _bring_up_one(
        self, node: VirtualNode, existing: Existing | None, slices: list[SliceKey], report: BringUpReport
    ) -> None:
        async with self.limit.slot():
            started = time.perf_counter()
            try:
                if self._fatal is not None:
                    raise self._fatal
                written: collections.Counter[str] = collections.Counter()
                try:
                    outcome = await self.sync(node, existing, slices, may_create=True, counts=written)
                finally:
                    report.note_slices(node.name, written)
            except ApiCallError as exc:
                outcome = Outcome.FAILED
                report.problems[node.name] = str(exc)
            except KubeconfigError as exc:
                self._fatal = self._fatal or exc
                outcome = Outcome.FAILED
                report.problems[node.name] = str(exc)
            report.durations[node.name] = time.perf_counter() - started
        self.done += 1
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
        the prefix label and the KWOK annotation are touched: a labelled Node without the annotation loses the
        ownership label before the collection delete, and is reported."""
        report = DeleteReport()
        started = time.perf_counter()
        prefix = self.settings.name_prefix
        if not prefix:
            raise ValueError("deleting needs a name prefix: an empty one would select every virtual node")
        selector: dict[str, Any] = {**OWNED, PREFIX_LABEL: in_(prefix_label_values(prefix))}
        api_version, slices_left = await self._prefix_slices(selector)
        adopted, created, strangers = await self._labelled_nodes(selector)
        self.say(f"found {len(created) + len(adopted)} virtual node(s) of --name-prefix {prefix}")
        self.done, self.total = 0, len(created) + len(adopted)
        await asyncio.gather(*(self._hand_back(obj, api_version, report) for obj in adopted))
        for name in strangers:
            # Labelled as ours but no KWOK node (someone took the annotation off): not ours to delete, so
            # it loses the label the collection delete selects on.
            await self.api.patch_node(name, {"metadata": {"labels": {OWNER_LABEL: None}}})
            report.problems[name] = "labelled as a virtual node but not a KWOK node: left alone, label removed"
        if created:
            self.step = f"deleting {len(created)} node(s)"
            await self._delete_created(created, selector, report)
            self.done = self.total
        if api_version is not None:
            if slices_left:
                await self._sweep_slices(api_version, selector, report, waiting=bool(created))
            self.step = ""
            report.classes_kept = sorted(
                str(c["metadata"]["name"]) for c in await self.api.list_device_classes(api_version) if is_our_class(c)
            )
        report.seconds = time.perf_counter() - started
        return report

    async def _prefix_slices(self, selector: Mapping[str, Any]) -> tuple[str | None, bool]:
        """The resource.k8s.io version of the slices (None when none is served) and whether any slice of the
        prefix is stored, in one request when ``--resource-api-version`` is given or the newest version is
        served: the version probe is a one-item list of the prefix's slices. None left means nothing to
        wait for or sweep: deleting the nodes adds none, and handing one back deletes its own."""
        found: dict[str, bool] = {}

        async def probe(version: str) -> bool:
            try:
                found[version] = await self.api.first_slice(version, labels=selector) is not None
            except ApiCallError as exc:
                if exc.code == 404:
                    return False
                raise
            return True

        version = self.settings.api_version
        if version is not None:
            found[version] = await self.api.first_slice(version, labels=selector) is not None
        else:
            version = await served_api_version(probe)
        return version, found.get(version or "", False)

    async def _labelled_nodes(self, selector: Mapping[str, Any]) -> tuple[list[JSON], list[str], list[str]]:
        """The Nodes ``selector`` picks, as listed: adopted ones (whole, to hand back), the names of created
        ones, and the names of strangers (labelled as ours, but not KWOK nodes)."""
        adopted: list[JSON] = []
        created: list[str] = []
        strangers: list[str] = []
        async for page in self.api.node_pages(labels=selector):
            for obj in page:
                if not is_kwok(obj):
                    strangers.append(_name(obj))
                elif origin(obj) == "adopted":
                    adopted.append(obj)
                else:
                    created.append(_name(obj))
        return adopted, created, strangers

    async def _hand_back(self, obj: JSON, api_version: str | None, report: DeleteReport) -> None:
        """Release one adopted node and delete this tool's slices of it; a failure is the node's problem."""
        name = _name(obj)
        async with self.limit.slot():
            try:
                if await self._release(name, obj):
                    report.nodes_released += 1
                if api_version is not None:  # no garbage collector takes these: the node stays
                    report.slices_deleted += await self._delete_slices(api_version, name)
            except ApiCallError as exc:
                report.problems[name] = str(exc)
        self.done += 1

    async def _delete_created(self, created: Sequence[str], selector: Mapping[str, Any], report: DeleteReport) -> None:
        """Delete the created nodes in one collection delete; one by one on a server that refuses that."""

        async def remove(name: str) -> None:
            async with self.limit.slot():
                try:
                    if await self.api.delete_node(name):
                        report.nodes_deleted += 1
                except ApiCallError as exc:
                    report.problems[name] = str(exc)
            self.done += 1

        try:
            await self.api.delete_nodes(selector)
            report.nodes_deleted = len(created)
        except ApiCallError as exc:
            if exc.code != 405:
                raise
            self.say(f"the API server refused to delete nodes by collection ({exc}); deleting them one by one")
            await asyncio.gather(*(remove(n) for n in created))

    async def _sweep_slices(
        self, api_version: str, selector: Mapping[str, Any], report: DeleteReport, *, waiting: bool
    ) -> None:
        """Slices of the prefix no collector took (a node gone before this run, or a server without one):
        deleted by collection, or one by one on a server that refuses that."""
        if not await self._left_after_collector(api_version, selector, waiting=waiting):
            return
        report.swept = True
        self.step = "deleting the ResourceSlices left"
        try:
            await self.api.delete_slices(api_version, selector)
        except ApiCallError as exc:
            if exc.code != 405:
                raise
            keys, _ = await self.api.list_slices(api_version, labels=selector)
            for key in keys:
                if await self.api.delete_slice(api_version, key.name):
                    report.slices_deleted += 1

    async def _left_after_collector(self, api_version: str, selector: Mapping[str, Any], *, waiting: bool) -> bool:
        """Whether slices of the prefix are left once the garbage collector has taken the deleted nodes' ones,
        or has stopped making progress (a bare API server has none). One-item pages: the server does not
        count a selected list, but the first slice left changes while the collector works."""
        first = await self.api.first_slice(api_version, labels=selector)
        if first is None or not waiting:
            return first is not None
        self.step = "waiting for the garbage collector to delete their ResourceSlices"
        deadline = time.monotonic() + GC_WAIT
        progress_at = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - progress_at < GC_STALL:
            await asyncio.sleep(GC_POLL)
            now = await self.api.first_slice(api_version, labels=selector)
            if now is None:
                return False
            if now.name != first.name:
                progress_at = time.monotonic()
            first = now
        return True

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
