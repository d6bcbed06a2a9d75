"""One virtual node's ResourceSlices: what they should be, and what to write to get there.

The slices are those ``fakegpu dra`` would publish for the same node (``fakegpu.dra.resource_slices`` builds
both), plus the ``fakegpu.io/virtual-node`` label, and owned by the Node (``controller: true``) so a real
cluster's garbage collector removes them with it. Slices are compared without the pool generation and in
any order (before 1.36 their names are random, so name order says nothing); only when they differ is the
generation bumped and every slice of the pool rewritten, as the DRA publisher does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fakegpu.dra.resource_slices import SliceOptions, build_slice_specs, slice_objects
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.virtual_nodes.names import prefix_label_value
from fakegpu.virtual_nodes.node_manifest import OWNER_LABEL, OWNER_VALUE, PREFIX_LABEL
from fakegpu.virtual_nodes.pools import VirtualNode

JSON = dict[str, Any]
PLAN_ANNOTATION = "fakegpu.io/slice-plan"


def wanted_specs(node: VirtualNode, options: SliceOptions, generation: int = 0) -> list[JSON]:
    """The pool's slice specs; devices a node spec marks unhealthy carry the XID taint (1.36+)."""
    unhealthy = LiveInventory(node.inventory).unhealthy()
    return build_slice_specs(node.inventory.node, options, unhealthy, generation=generation)


def _without_generation(spec: Mapping[str, Any]) -> JSON:
    """The spec as a wish: no pool generation, no taint ``timeAdded`` (the server fills it in)."""
    out = json.loads(json.dumps(spec))
    out.get("pool", {}).pop("generation", None)
    for device in out.get("devices") or []:
        for taint in device.get("basic", device).get("taints") or []:
            taint.pop("timeAdded", None)
    return dict(out)


def signature(spec: Mapping[str, Any], owner_uid: str | None, labelled: bool) -> str:
    return json.dumps(
        {"spec": _without_generation(spec), "owner": owner_uid, "labelled": labelled},
        sort_keys=True,
        separators=(",", ":"),
    )


def _owner_and_label(obj: Mapping[str, Any]) -> tuple[str | None, bool]:
    meta = obj.get("metadata") or {}
    owners = [
        ref.get("uid")
        for ref in meta.get("ownerReferences") or []
        if ref.get("kind") == "Node" and ref.get("controller") is True
    ]
    labelled = (meta.get("labels") or {}).get(OWNER_LABEL) == OWNER_VALUE
    return (str(owners[0]) if len(owners) == 1 else None), labelled


def stored_signature(obj: Mapping[str, Any]) -> str:
    """What a stored slice amounts to: its spec, the UID of its controlling Node, and our label."""
    owner, labelled = _owner_and_label(obj)
    return signature(obj.get("spec") or {}, owner, labelled)


def plan_digest(wanted: Sequence[str]) -> str:
    """A short digest of a pool's wanted signatures (which include the owning Node's UID)."""
    return hashlib.sha256("\n".join(sorted(wanted)).encode()).hexdigest()[:32]


def written_for(existing: Sequence[Mapping[str, Any]], digest: str, count: int, node_uid: str) -> bool:
    """Whether ``existing`` is one complete write of the plan ``digest``: as many slices as planned, one
    generation, each with the digest, our owner and our label."""
    if len(existing) != count:
        return False
    generations = {int(((s.get("spec") or {}).get("pool") or {}).get("generation") or 0) for s in existing}
    return len(generations) == 1 and all(
        ((s.get("metadata") or {}).get("annotations") or {}).get(PLAN_ANNOTATION) == digest
        and _owner_and_label(s) == (node_uid, True)
        for s in existing
    )


def immutable_fields(obj: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """What an update of a ResourceSlice may not change: driver, node name and pool name."""
    spec = obj.get("spec") or {}
    return spec.get("driver"), spec.get("nodeName"), (spec.get("pool") or {}).get("name")


def signatures(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    return sorted(stored_signature(o) for o in objects)


@dataclass
class SliceWrites:
    """The writes that make a node's pool hold the wanted slices: replacements keep existing names."""

    create: list[JSON] = field(default_factory=list)
    replace: list[JSON] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.create or self.replace or self.delete)


def slice_writes(
    node: VirtualNode,
    options: SliceOptions,
    existing: Sequence[Mapping[str, Any]],
    node_uid: str,
    accepted: Sequence[str] | None = None,
) -> SliceWrites:
    """Nothing when ``existing`` already is the wanted pool, or is what the server kept of a write of this
    very plan (``accepted``: what this process last found right or wrote; or the plan digest on every
    slice). A slice someone edited while keeping the digest is therefore not noticed; slices are the
    driver's own objects, and nobody else writes them in practice."""
    wanted = wanted_specs(node, options)
    wanted_signatures = sorted(signature(s, node_uid, True) for s in wanted)
    have = signatures(existing)
    if have == wanted_signatures:
        return SliceWrites()
    if accepted is not None and have == list(accepted):
        return SliceWrites()
    digest = plan_digest(wanted_signatures)
    if written_for(existing, digest, len(wanted), node_uid):
        return SliceWrites()
    generations = [int(((s.get("spec") or {}).get("pool") or {}).get("generation") or 0) for s in existing]
    specs = wanted_specs(node, options, generation=max(generations, default=0) + 1)
    objects = slice_objects(node.inventory.node, options, specs, node_uid=node_uid)
    for obj in objects:
        obj["metadata"]["labels"] = {OWNER_LABEL: OWNER_VALUE, PREFIX_LABEL: prefix_label_value(node.prefix)}
        obj["metadata"]["annotations"] = {PLAN_ANNOTATION: digest}
    ordered = sorted(existing, key=lambda s: str((s.get("metadata") or {}).get("name")))
    # All of a node's slices share driver, node and pool name; a slice with others can only be replaced.
    fixed = immutable_fields(objects[0]) if objects else None
    reusable = [s for s in ordered if immutable_fields(s) == fixed]
    writes = SliceWrites()
    for i, obj in enumerate(objects):
        if i < len(reusable):
            current = reusable[i]["metadata"]
            obj["metadata"].pop("generateName", None)
            obj["metadata"]["name"] = current["name"]
            obj["metadata"]["resourceVersion"] = current.get("resourceVersion")
            writes.replace.append(obj)
        else:
            writes.create.append(obj)
    kept = {id(s) for s in reusable[: len(objects)]}
    writes.delete = [str(s["metadata"]["name"]) for s in ordered if id(s) not in kept]
    return writes
