"""The Node object of a virtual node, and the smallest patches that bring an existing Node in line.

A virtual node is a KWOK node: the ``kwok.x-k8s.io/node: fake`` annotation makes KWOK's controller keep it
Ready (without KWOK running in the cluster it stays NotReady), and the ``kwok.x-k8s.io/node=fake:NoSchedule``
taint, KWOK's convention, keeps ordinary pods away: rehearsal pods need the toleration
``{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}``.

What the tool owns on a Node, and compares before writing (so a second run writes nothing):

- labels: the usual node labels, ``fakegpu.io/virtual-node: "true"`` and
  ``fakegpu.io/virtual-node-prefix`` (how ``--delete`` finds the nodes of one ``--name-prefix``),
  ``fakegpu.io/virtual-node-pool``, ``fakegpu.io/virtual-node-gpu-mode`` (the pool's GPU mode) and GPU
  Feature Discovery's labels (``nvidia.com/gpu.clique`` on a node of a rack layout), and a rack layout's
  block / rack / host topology labels. ``nvidia.com/gfd.timestamp`` (when
  the labels were written) is compared only with ``--watch``, the long-running labeller that stamps the
  nodes with its start as GFD does; a one-off run keeps a stored timestamp, so a second run writes nothing;
- ``status.capacity`` / ``status.allocatable``: cpu, memory, pods and, in the ``device-plugin`` GPU mode
  only, one entry per device plugin resource (every device / the healthy ones), compared as quantities,
  since the API server rewrites them in canonical form;
- the KWOK taint and annotation;
- the annotation ``fakegpu.io/gpu-faults`` (``fakegpu.sharing.fault_record``): the faults its GPUs carry, which
  ``fakegpu virtual-nodes --fault`` and ``--recover`` change and every run reads back, so a re-run keeps them;
  capacity stays, allocatable drops by the devices they make unhealthy (``fakegpu.virtual_nodes.node_faults``);
- the annotation ``fakegpu.io/virtual-node-managed``, listing the label keys and resources it set, so a
  run with other GPUs removes the labels and resources the node no longer has;
- on an adopted node, the annotation ``fakegpu.io/virtual-node-prior``: the value every label, capacity
  and allocatable entry had before the tool first changed it (null when absent), and the KWOK taints before
  the tool replaced them, so ``--delete`` hands the node back as it was.

Anything else (KWOK's conditions and heartbeats, the TTL controller's ``node.alpha.kubernetes.io/ttl``,
other taints) belongs to someone else and is left alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.fault_record import FAULTS_ANNOTATION, encode_faults
from fakegpu.sharing.labels import TIMESTAMP_LABEL
from fakegpu.sharing.quantities import decimal_quantity, parse_quantity, same_quantity
from fakegpu.virtual_nodes.names import prefix_label_value
from fakegpu.virtual_nodes.pools import VirtualNode

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_VALUE = "fake"
TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"
OWNER_LABEL = "fakegpu.io/virtual-node"
OWNER_VALUE = "true"
POOL_LABEL = "fakegpu.io/virtual-node-pool"
PREFIX_LABEL = "fakegpu.io/virtual-node-prefix"
"""The ``--name-prefix`` as a label value (``names.prefix_label_value``): ``--delete`` selects on it."""
MODE_LABEL = "fakegpu.io/virtual-node-gpu-mode"
"""The pool's GPU mode (``pools.GPU_MODES``), so users and rehearsals select nodes by how they offer GPUs."""
ORIGIN_ANNOTATION = "fakegpu.io/virtual-node-origin"
"""``created`` (``--delete`` deletes the Node) or ``adopted`` (``--delete`` hands it back)."""
MANAGED_ANNOTATION = "fakegpu.io/virtual-node-managed"
PRIOR_ANNOTATION = "fakegpu.io/virtual-node-prior"
"""On an adopted node: what the tool changed, as it was before; ``--delete`` restores it."""
KWOK_TAINT = {"key": KWOK_ANNOTATION, "value": KWOK_VALUE, "effect": "NoSchedule"}
BASE_LABELS = (
    "type",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "node-role.kubernetes.io/agent",
)
"""Labels every KWOK node has; an adopted node adopted before the prior record existed keeps them when it
is handed back."""
BASE_RESOURCES = ("cpu", "memory", "pods")
WHOLE_GPU_RESOURCE = "nvidia.com/gpu"
"""Never advertised in a DRA mode, even when the node's own resources are MIG devices only."""

JSON = dict[str, Any]


@dataclass(frozen=True)
class NodeShape:
    """The non-GPU resources every virtual node reports (sane defaults for a GPU server)."""

    cpu: str = "32"
    memory: str = "256Gi"
    pods: str = "110"

    def __post_init__(self) -> None:
        for flag, value in (("--node-cpu", self.cpu), ("--node-memory", self.memory), ("--node-pods", self.pods)):
            try:
                amount = parse_quantity(value)
            except ValueError:
                raise SpecError(
                    flag, f"expected a Kubernetes quantity such as 32, 500m or 256Gi, found {value!r}"
                ) from None
            if amount <= 0:
                raise SpecError(flag, f"must be greater than zero, found {value!r}")
            if flag == "--node-pods" and amount.denominator != 1:
                raise SpecError(flag, f"must be a whole number (the API server requires an integer), found {value!r}")

    def resources(self) -> dict[str, str]:
        return dict(zip(BASE_RESOURCES, (self.cpu, self.memory, self.pods), strict=True))


@dataclass(frozen=True)
class DesiredNode:
    """Everything the tool owns on one Node."""

    name: str
    labels: Mapping[str, str]
    capacity: Mapping[str, str]
    allocatable: Mapping[str, str]
    kept_if_present: frozenset[str] = frozenset()
    """Labels whose stored value stands whatever it is (the GFD timestamp, unless ``--watch``)."""
    absent: frozenset[str] = frozenset()
    """GPU resources the node must not advertise, whoever set them (the DRA modes): an adopted node's own
    ``nvidia.com/gpu`` would otherwise be handed out next to the same GPUs' DRA devices. On an adopted
    node the value removed is recorded, and ``--delete`` gives it back."""
    faults: str | None = None
    """The ``fakegpu.io/gpu-faults`` annotation value (``fakegpu.sharing.fault_record``); None: no faults, and
    the annotation is removed."""
    managed: str = field(init=False)
    """The ``fakegpu.io/virtual-node-managed`` annotation value for these labels and resources."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "managed", _managed_record(self.labels, self.capacity))


def _managed_record(labels: Mapping[str, str], resources: Mapping[str, str]) -> str:
    return json.dumps({"labels": sorted(labels), "resources": sorted(resources)}, separators=(",", ":"))


def _previous_record(annotations: Mapping[str, str]) -> tuple[set[str], set[str]]:
    """Label keys and resources an earlier run set; an unreadable record counts as none."""
    try:
        record = json.loads(annotations.get(MANAGED_ANNOTATION) or "{}")
        return {str(k) for k in record.get("labels", [])}, {str(r) for r in record.get("resources", [])}
    except (ValueError, AttributeError, TypeError):
        return set(), set()


@dataclass
class Prior:
    """What the tool changed on an adopted node, as it was before: label and resource values (None: absent)
    and the KWOK taints (None: the taint list was not changed)."""

    labels: dict[str, str | None] = field(default_factory=dict)
    capacity: dict[str, str | None] = field(default_factory=dict)
    allocatable: dict[str, str | None] = field(default_factory=dict)
    taints: list[JSON] | None = None

    def part(self, name: str) -> dict[str, str | None]:
        return self.capacity if name == "capacity" else self.allocatable

    def text(self) -> str:
        record: JSON = {"labels": self.labels, "capacity": self.capacity, "allocatable": self.allocatable}
        if self.taints is not None:
            record["taints"] = self.taints
        return json.dumps(record, sort_keys=True, separators=(",", ":"))


def _values(record: Any) -> dict[str, str | None]:
    if not isinstance(record, dict):
        return {}
    return {str(k): (None if v is None else str(v)) for k, v in record.items()}


def read_prior(annotations: Mapping[str, str]) -> Prior | None:
    """The prior record; None when there is none (or it is unreadable)."""
    try:
        record = json.loads(annotations[PRIOR_ANNOTATION])
    except (KeyError, ValueError, TypeError):
        return None
    if not isinstance(record, dict):
        return None
    taints = record.get("taints")
    return Prior(
        labels=_values(record.get("labels")),
        capacity=_values(record.get("capacity")),
        allocatable=_values(record.get("allocatable")),
        taints=[dict(t) for t in taints if isinstance(t, dict)] if isinstance(taints, list) else None,
    )


def desired_node(node: VirtualNode, shape: NodeShape, *, refresh_timestamp: bool = False) -> DesiredNode:
    """The plan for one Node; ``refresh_timestamp`` (``--watch``) makes a stored GFD timestamp that differs
    from this run's a change to write.

    The GPU extended resources (``nvidia.com/gpu``, ``nvidia.com/mig-*``, shared or renamed ones) are in
    capacity only in the ``device-plugin`` mode: a node that also published the GPUs as DRA devices would
    let the scheduler hand each GPU out twice, once per path. So the DRA modes list them as ``absent``:
    removed whoever set them (an adopted node's own values are recorded for ``--delete``). Switching a
    pool's mode converges in place: a run in a DRA mode removes them, a run back in ``device-plugin`` mode
    sets them again, and the managed record drops or regains them with it.

    GFD's labels stay in every mode: on a real node GPU Feature Discovery labels the node whichever way its
    GPUs are allocated (NVIDIA's DRA driver runs beside GFD), and rehearsal pods select nodes by
    ``nvidia.com/gpu.product`` and friends whatever they request."""
    base = dict(zip(BASE_LABELS, ("kwok", node.name, "linux", "amd64", ""), strict=True))
    labels = {
        **base,
        OWNER_LABEL: OWNER_VALUE,
        PREFIX_LABEL: prefix_label_value(node.prefix),
        POOL_LABEL: node.pool,
        MODE_LABEL: node.mode,
        **node.gfd_labels,
        **node.topology_labels,
    }
    capacity = shape.resources()
    allocatable = shape.resources()
    absent: frozenset[str] = frozenset()
    if node.has_gpu_capacity:
        for resource in node.inventory.resources:
            capacity[resource.name] = decimal_quantity(len(resource.devices))
            allocatable[resource.name] = decimal_quantity(resource.healthy)
    else:
        absent = frozenset({WHOLE_GPU_RESOURCE, *(r.name for r in node.inventory.resources)})
    kept = frozenset() if refresh_timestamp else frozenset({TIMESTAMP_LABEL})
    return DesiredNode(node.name, labels, capacity, allocatable, kept, absent, faults=encode_faults(node.faults))


def new_node(desired: DesiredNode) -> JSON:
    """The Node to create. The API server keeps ``status`` on a Node create (nodes are the exception:
    ``nodeStrategy.PrepareForCreate`` does not reset it), so capacity is set in the same request."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": desired.name,
            "labels": dict(desired.labels),
            "annotations": {
                KWOK_ANNOTATION: KWOK_VALUE,
                TTL_ANNOTATION: "0",
                ORIGIN_ANNOTATION: "created",
                MANAGED_ANNOTATION: desired.managed,
                **({FAULTS_ANNOTATION: desired.faults} if desired.faults else {}),
            },
        },
        "spec": {"taints": [dict(KWOK_TAINT)]},
        "status": {"capacity": dict(desired.capacity), "allocatable": dict(desired.allocatable)},
    }


def _meta(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return node.get("metadata") or {}


def is_kwok(node: Mapping[str, Any]) -> bool:
    return (_meta(node).get("annotations") or {}).get(KWOK_ANNOTATION) == KWOK_VALUE


def is_ours(node: Mapping[str, Any]) -> bool:
    return is_kwok(node) and (_meta(node).get("labels") or {}).get(OWNER_LABEL) == OWNER_VALUE


def origin(node: Mapping[str, Any]) -> str | None:
    return (_meta(node).get("annotations") or {}).get(ORIGIN_ANNOTATION)


def _resource_patch(
    have: Mapping[str, Any],
    want: Mapping[str, str],
    stale: set[str],
    prior: dict[str, str | None] | None,
    absent: frozenset[str] = frozenset(),
) -> JSON:
    """The status entries to write; ``prior`` (on an adopted node) gets the value of each entry before its
    first change, and gives it back for an entry the plan no longer has. An ``absent`` entry is removed
    whoever set it; its prior value stays recorded for ``--delete``."""
    patch: JSON = {}
    for key, value in want.items():
        if not same_quantity(have.get(key), value):
            patch[key] = value
            if prior is not None and key not in prior:
                prior[key] = None if have.get(key) is None else str(have[key])
    for key in sorted(absent - set(want)):
        if key in have:
            patch[key] = None
            if prior is not None and key not in prior:
                prior[key] = str(have[key])
    for key in sorted(stale - set(want) - absent):
        if prior is not None and key in prior:
            before = prior.pop(key)
            if before is None and key in have:
                patch[key] = None
            elif before is not None and not same_quantity(have.get(key), before):
                patch[key] = before
        elif key in have:
            patch[key] = None
    return patch


@dataclass(frozen=True)
class NodeChanges:
    """Merge patches for the Node (labels, annotations, taints) and for its ``status`` subresource."""

    node: JSON | None
    status: JSON | None

    @property
    def empty(self) -> bool:
        return self.node is None and self.status is None


def node_changes(existing: Mapping[str, Any], desired: DesiredNode) -> NodeChanges:
    """What to patch so ``existing`` shows ``desired``; both patches None when it already does.

    Labels and resources an earlier run set that ``desired`` no longer has are removed (merge patch null),
    or on an adopted node given back the value they had before. The taint list is replaced as a whole by a
    merge patch, so that patch carries the resourceVersion it was computed from: a concurrent change then
    fails with a conflict instead of being lost. On a node not created by the tool, the prior record grows
    by every key changed for the first time, in the metadata patch, which is sent before the status one."""
    meta = _meta(existing)
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    old_labels, old_resources = _previous_record(annotations)
    # A node being adopted starts a record; one adopted before records existed keeps the old hand-back.
    adopted = origin(existing)
    prior = (read_prior(annotations) or Prior()) if adopted is None else read_prior(annotations)
    if adopted == "created":
        prior = None
    # In this order: each part records in ``prior`` what it changes first, and the annotations carry it.
    label_patch = _label_patch(labels, desired, old_labels, prior)
    patch: JSON = {}
    metadata: JSON = {}
    taints = _kwok_taints(existing, prior)
    if taints is not None:
        patch["spec"] = {"taints": taints}
        metadata["resourceVersion"] = meta.get("resourceVersion")
    status_patch = _status_patch(existing.get("status") or {}, desired, old_resources, prior)
    annotation_patch = _annotation_patch(annotations, desired, prior)

    if label_patch:
        metadata["labels"] = label_patch
    if annotation_patch:
        metadata["annotations"] = annotation_patch
    if metadata:
        patch["metadata"] = metadata
    return NodeChanges(patch or None, {"status": status_patch} if status_patch else None)


def _label_patch(labels: Mapping[str, str], desired: DesiredNode, old_labels: set[str], prior: Prior | None) -> JSON:
    """The labels to write: the planned ones that differ (a kept-if-present one only when absent), and
    those an earlier run set that the plan no longer has: removed, or given back their prior value."""
    patch: JSON = {}
    for key, value in desired.labels.items():
        if labels.get(key) != value and not (key in desired.kept_if_present and key in labels):
            patch[key] = value
            if prior is not None and key not in prior.labels:
                prior.labels[key] = labels.get(key)
    for key in sorted(old_labels - set(desired.labels)):
        if prior is not None and key in prior.labels:
            before = prior.labels.pop(key)
            if labels.get(key) != before:
                patch[key] = before
        elif key in labels:
            patch[key] = None
    return patch


def _kwok_taints(existing: Mapping[str, Any], prior: Prior | None) -> list[JSON] | None:
    """The whole taint list with the KWOK taint in place of any other KWOK one, or None when it is there
    already; ``prior`` gets the KWOK taints replaced (once)."""
    taints = list((existing.get("spec") or {}).get("taints") or [])
    if any(_is_kwok_taint(t) and t.get("value") == KWOK_VALUE for t in taints):
        return None
    if prior is not None and prior.taints is None:
        prior.taints = [dict(t) for t in taints if _is_kwok_taint(t)]
    return [*(t for t in taints if not _is_kwok_taint(t)), dict(KWOK_TAINT)]


def _status_patch(
    status: Mapping[str, Any], desired: DesiredNode, old_resources: set[str], prior: Prior | None
) -> JSON:
    """The capacity and allocatable entries to write (``_resource_patch`` of each)."""
    patch: JSON = {}
    for part, want in (("capacity", desired.capacity), ("allocatable", desired.allocatable)):
        changes = _resource_patch(
            status.get(part) or {},
            want,
            old_resources,
            prior.part(part) if prior is not None else None,
            desired.absent,
        )
        if changes:
            patch[part] = changes
    return patch


def _annotation_patch(annotations: Mapping[str, str], desired: DesiredNode, prior: Prior | None) -> JSON:
    """The tool's annotations that differ: the managed record, KWOK's, the origin (``adopted`` on a node
    that has none) and the prior record as it now stands."""
    patch: JSON = {}
    if annotations.get(MANAGED_ANNOTATION) != desired.managed:
        patch[MANAGED_ANNOTATION] = desired.managed
    if annotations.get(KWOK_ANNOTATION) != KWOK_VALUE:
        patch[KWOK_ANNOTATION] = KWOK_VALUE
    if ORIGIN_ANNOTATION not in annotations:
        patch[ORIGIN_ANNOTATION] = "adopted"
    if prior is not None and annotations.get(PRIOR_ANNOTATION) != prior.text():
        patch[PRIOR_ANNOTATION] = prior.text()
    if annotations.get(FAULTS_ANNOTATION) != desired.faults:
        patch[FAULTS_ANNOTATION] = desired.faults
    return patch


def _is_kwok_taint(taint: Mapping[str, Any]) -> bool:
    return taint.get("key") == KWOK_ANNOTATION and taint.get("effect") == "NoSchedule"


def release_changes(existing: Mapping[str, Any]) -> NodeChanges:
    """``--delete`` on an adopted node: put back what the prior record says every changed label, resource
    and KWOK taint was, and drop the tool's own label and annotations. A node adopted before the record
    existed loses the GPU labels and resources and keeps the rest (the basic KWOK labels, cpu/memory/pods,
    the taint)."""
    meta = _meta(existing)
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    old_labels, old_resources = _previous_record(annotations)
    prior = read_prior(annotations)
    status = existing.get("status") or {}
    metadata: JSON = {}
    patch: JSON = {}
    if prior is None:
        label_patch, status_patch = _forget_unrecorded(labels, status, old_labels, old_resources)
    else:
        label_patch, status_patch = _restore_recorded(labels, status, prior)
        if prior.taints is not None:
            taints = list((existing.get("spec") or {}).get("taints") or [])
            restored = [t for t in taints if not _is_kwok_taint(t)] + prior.taints
            if restored != taints:
                patch["spec"] = {"taints": restored}
                metadata["resourceVersion"] = meta.get("resourceVersion")
    ours = (MANAGED_ANNOTATION, ORIGIN_ANNOTATION, PRIOR_ANNOTATION, FAULTS_ANNOTATION)
    drop_annotations = {k: None for k in ours if k in annotations}
    if label_patch:
        metadata["labels"] = label_patch
    if drop_annotations:
        metadata["annotations"] = drop_annotations
    if metadata:
        patch["metadata"] = metadata
    return NodeChanges(patch or None, {"status": status_patch} if status_patch else None)


def _forget_unrecorded(
    labels: Mapping[str, str], status: Mapping[str, Any], old_labels: set[str], old_resources: set[str]
) -> tuple[JSON, JSON]:
    """Label and status patches for a node adopted before the prior record existed: the tool's labels and
    GPU resources go, the basic KWOK labels and cpu/memory/pods stay."""
    gone_labels = {*old_labels, OWNER_LABEL, POOL_LABEL, PREFIX_LABEL, MODE_LABEL} - set(BASE_LABELS)
    label_patch: JSON = {k: None for k in sorted(gone_labels) if k in labels}
    status_patch: JSON = {}
    for part in ("capacity", "allocatable"):
        have = status.get(part) or {}
        dropped = {k: None for k in sorted(old_resources - set(BASE_RESOURCES)) if k in have}
        if dropped:
            status_patch[part] = dropped
    return label_patch, status_patch


def _restore_recorded(labels: Mapping[str, str], status: Mapping[str, Any], prior: Prior) -> tuple[JSON, JSON]:
    """Label and status patches that put back what the prior record says (None: the entry was absent)."""
    # The ownership label goes whatever the record says: a handed-back node must not be taken for ours.
    wanted: dict[str, str | None] = {**prior.labels, OWNER_LABEL: None}
    label_patch: JSON = {k: v for k, v in sorted(wanted.items()) if labels.get(k) != v}
    status_patch: JSON = {}
    for part in ("capacity", "allocatable"):
        have = status.get(part) or {}
        restore: JSON = {}
        for key, before in sorted(prior.part(part).items()):
            if before is None:
                if key in have:
                    restore[key] = None
            elif not same_quantity(have.get(key), before):
                restore[key] = before
        if restore:
            status_patch[part] = restore
    return label_patch, status_patch
