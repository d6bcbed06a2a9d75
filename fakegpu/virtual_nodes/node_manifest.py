"""The Node object of a virtual node, and the smallest patches that bring an existing Node in line.

A virtual node is a KWOK node: the ``kwok.x-k8s.io/node: fake`` annotation makes KWOK's controller keep it
Ready (without KWOK running in the cluster it stays NotReady), and the ``kwok.x-k8s.io/node=fake:NoSchedule``
taint, KWOK's convention, keeps ordinary pods away: rehearsal pods need the toleration
``{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}``.

What the tool owns on a Node, and compares before writing (so a second run writes nothing):

- labels: the usual node labels, ``fakegpu.io/virtual-node: "true"`` (how ``--delete`` finds its nodes),
  ``fakegpu.io/virtual-node-pool`` and GPU Feature Discovery's labels;
- ``status.capacity`` / ``status.allocatable``: cpu, memory, pods and one entry per device plugin
  resource (every device / the healthy ones), compared as quantities, since the API server rewrites
  them in canonical form;
- the KWOK taint and annotation;
- the annotation ``fakegpu.io/virtual-node-managed``, listing the label keys and resources it set, so a
  run with other GPUs removes the labels and resources the node no longer has, and ``--delete`` can hand an
  adopted node back without them.

Anything else (KWOK's conditions and heartbeats, the TTL controller's ``node.alpha.kubernetes.io/ttl``,
other taints) belongs to someone else and is left alone.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dra.quantities import decimal_quantity, parse_quantity
from fakegpu.virtual_nodes.pools import VirtualNode
from sharing.errors import SpecError

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_VALUE = "fake"
TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"
OWNER_LABEL = "fakegpu.io/virtual-node"
OWNER_VALUE = "true"
POOL_LABEL = "fakegpu.io/virtual-node-pool"
ORIGIN_ANNOTATION = "fakegpu.io/virtual-node-origin"
"""``created`` (``--delete`` deletes the Node) or ``adopted`` (``--delete`` hands it back)."""
MANAGED_ANNOTATION = "fakegpu.io/virtual-node-managed"
KWOK_TAINT = {"key": KWOK_ANNOTATION, "value": KWOK_VALUE, "effect": "NoSchedule"}
BASE_LABELS = (
    "type",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "node-role.kubernetes.io/agent",
)
"""Labels every KWOK node has; an adopted node keeps them when it is handed back."""
BASE_RESOURCES = ("cpu", "memory", "pods")

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

    def resources(self) -> dict[str, str]:
        return dict(zip(BASE_RESOURCES, (self.cpu, self.memory, self.pods), strict=True))


@dataclass(frozen=True)
class DesiredNode:
    """Everything the tool owns on one Node."""

    name: str
    labels: Mapping[str, str]
    capacity: Mapping[str, str]
    allocatable: Mapping[str, str]
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


def desired_node(node: VirtualNode, shape: NodeShape) -> DesiredNode:
    base = dict(zip(BASE_LABELS, ("kwok", node.name, "linux", "amd64", ""), strict=True))
    labels = {
        **base,
        OWNER_LABEL: OWNER_VALUE,
        POOL_LABEL: node.pool,
        **node.gfd_labels,
    }
    capacity = shape.resources()
    allocatable = shape.resources()
    for resource in node.inventory.resources:
        capacity[resource.name] = decimal_quantity(len(resource.devices))
        allocatable[resource.name] = decimal_quantity(resource.healthy)
    return DesiredNode(node.name, labels, capacity, allocatable)


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


def same_quantity(have: Any, want: str) -> bool:
    if have is None:
        return False
    try:
        return parse_quantity(str(have)) == parse_quantity(want)
    except ValueError:
        return str(have) == want


def _resource_patch(have: Mapping[str, Any], want: Mapping[str, str], stale: set[str]) -> JSON:
    patch: JSON = {k: v for k, v in want.items() if not same_quantity(have.get(k), v)}
    patch.update({k: None for k in sorted(stale) if k in have and k not in want})
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

    Labels and resources an earlier run set that ``desired`` no longer has are removed (merge patch null).
    The taint list is replaced as a whole by a merge patch, so that patch carries the resourceVersion it
    was computed from: a concurrent change then fails with a conflict instead of being lost."""
    meta = _meta(existing)
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    old_labels, old_resources = _previous_record(annotations)

    label_patch: JSON = {k: v for k, v in desired.labels.items() if labels.get(k) != v}
    label_patch.update({k: None for k in sorted(old_labels) if k in labels and k not in desired.labels})
    annotation_patch: JSON = {}
    if annotations.get(MANAGED_ANNOTATION) != desired.managed:
        annotation_patch[MANAGED_ANNOTATION] = desired.managed
    if annotations.get(KWOK_ANNOTATION) != KWOK_VALUE:
        annotation_patch[KWOK_ANNOTATION] = KWOK_VALUE
    if ORIGIN_ANNOTATION not in annotations:
        annotation_patch[ORIGIN_ANNOTATION] = "adopted"

    patch: JSON = {}
    metadata: JSON = {}
    if label_patch:
        metadata["labels"] = label_patch
    if annotation_patch:
        metadata["annotations"] = annotation_patch
    taints = list((existing.get("spec") or {}).get("taints") or [])
    if not any(_is_kwok_taint(t) and t.get("value") == KWOK_VALUE for t in taints):
        kept = [t for t in taints if not _is_kwok_taint(t)]
        patch["spec"] = {"taints": [*kept, dict(KWOK_TAINT)]}
        metadata["resourceVersion"] = meta.get("resourceVersion")
    if metadata:
        patch["metadata"] = metadata

    status = existing.get("status") or {}
    capacity = _resource_patch(status.get("capacity") or {}, desired.capacity, old_resources)
    allocatable = _resource_patch(status.get("allocatable") or {}, desired.allocatable, old_resources)
    status_patch: JSON = {}
    if capacity:
        status_patch["capacity"] = capacity
    if allocatable:
        status_patch["allocatable"] = allocatable
    return NodeChanges(patch or None, {"status": status_patch} if status_patch else None)


def _is_kwok_taint(taint: Mapping[str, Any]) -> bool:
    return taint.get("key") == KWOK_ANNOTATION and taint.get("effect") == "NoSchedule"


def release_changes(existing: Mapping[str, Any]) -> NodeChanges:
    """``--delete`` on an adopted node: take back the GPU labels and resources and the tool's own label and
    annotations; the Node keeps the basic KWOK labels, cpu/memory/pods, the KWOK annotation and the taint."""
    meta = _meta(existing)
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    old_labels, old_resources = _previous_record(annotations)
    gone_labels = {*old_labels, OWNER_LABEL, POOL_LABEL} - set(BASE_LABELS)
    drop_labels = {k: None for k in sorted(gone_labels) if k in labels}
    drop_annotations = {k: None for k in (MANAGED_ANNOTATION, ORIGIN_ANNOTATION) if k in annotations}
    metadata: JSON = {}
    if drop_labels:
        metadata["labels"] = drop_labels
    if drop_annotations:
        metadata["annotations"] = drop_annotations
    status = existing.get("status") or {}
    status_patch: JSON = {}
    for part in ("capacity", "allocatable"):
        dropped = {k: None for k in sorted(old_resources - set(BASE_RESOURCES)) if k in (status.get(part) or {})}
        if dropped:
            status_patch[part] = dropped
    return NodeChanges({"metadata": metadata} if metadata else None, {"status": status_patch} if status_patch else None)
