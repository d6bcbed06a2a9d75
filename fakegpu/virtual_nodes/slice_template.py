"""A pool's ResourceSlices built once, and each node's derived from them by substitution.

Nodes of one pool are identical but for their name and their device UUIDs (which derive from the name), so
the slice specs are built for the pool's first node only, serialised once, and cut at every occurrence of
that node's identity strings. A node's specs are the pieces joined with its own identity: no inventory walk,
no CEL attribute building, no serialisation per node. Building the specs of a second node directly and
comparing them with the derived ones proves the cut; when they differ (a layout whose per-node parts are
not just the identity), the pool falls back to building every node's specs itself, correct if slower.

A node on a multi-node NVLink fabric (a rack layout's) also gets the compute-domain kubelet plugin's slice
(driver ``compute-domain.nvidia.com``, ``fakegpu.dra.compute_domain.devices``), after its GPU slices and in
its own pool named after the node. Its clique is part of the identity: nodes of one pool sit in different
racks, and anything of a slice that names the clique must be cut there too.

A node whose faults taint devices (``fakegpu.virtual_nodes.node_faults``) has slices of its own: they are built
from its inventory, as a pool whose cut does not hold is, and the template is cut from nodes without faults.

Each slice is stamped with a digest of its own (``fakegpu.dra.slice_digest``): that of its template text, its
place and the node's identity, so a re-run knows a node's pool is as planned without building anything. A node
with faults gets, for each slice its faults leave as the template's, the same digest as without them, and a
digest of its own text for the others: a fault whose taints sit in one slice changes one digest, and that
slice alone is updated, at the same pool generation (``fakegpu.dra.slice_write_plan``). Each driver's pool has
its own generation, as each kubelet plugin publishes its own pool: a GPU fault writes the gpu.nvidia.com pool
and leaves the compute-domain.nvidia.com one as it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fakegpu.dra.compute_domain.devices import COMPUTE_DOMAIN_DRIVER, compute_domain_slice_spec
from fakegpu.dra.resource_slices import SliceOptions, build_slice_specs, slice_objects
from fakegpu.dra.slice_digest import PLAN_ANNOTATION, plan_digest
from fakegpu.virtual_nodes.names import prefix_label_value
from fakegpu.virtual_nodes.node_faults import fault_taints, taints_changed, without_faults
from fakegpu.virtual_nodes.node_manifest import OWNER_LABEL, OWNER_VALUE, PREFIX_LABEL
from fakegpu.virtual_nodes.pools import VirtualNode

JSON = dict[str, Any]
GENERATION_MARK = 2_147_000_001
"""The pool generation templates are built with: a number no real pool reaches, put in its place at write time."""
_MARK_TEXT = f'"generation":{GENERATION_MARK}'
Piece = str | int
"""A literal run of JSON text, or the index of an identity string to put there."""


def identity(node: VirtualNode) -> tuple[str, ...]:
    """What differs between two nodes of a pool: the node name, every device UUID, in inventory order, and
    the NVLink clique of a fabric node."""
    fabric = node.inventory.node.fabric
    clique = (fabric.clique,) if fabric is not None else ()
    return (node.name, *(u for gpu in node.inventory.node.gpus for u in gpu.uuids), *clique)


def slice_drivers(node: VirtualNode, options: SliceOptions) -> frozenset[str]:
    """The drivers whose slices a slice-publishing node has: the GPU driver, and on an NVLink fabric the
    compute-domain driver."""
    if node.inventory.node.fabric is None:
        return frozenset({options.driver})
    return frozenset({options.driver, COMPUTE_DOMAIN_DRIVER})


def wanted_drivers(node: VirtualNode, options: SliceOptions, count: int) -> tuple[str, ...]:
    """The driver of each of the node's ``count`` slices, in the order ``slice_bodies`` writes them: the GPU
    driver's, and on an NVLink fabric the compute-domain driver's last. What the write plan
    (``fakegpu.dra.slice_write_plan``) matches stored slices against before the bodies are built."""
    if node.inventory.node.fabric is None:
        return (options.driver,) * count
    return (*(options.driver,) * (count - 1), COMPUTE_DOMAIN_DRIVER)


def direct_specs(node: VirtualNode, options: SliceOptions) -> list[JSON]:
    """The node's slice specs built from its inventory (with the generation mark); devices a node spec
    marks unhealthy or with an XID, or that its faults hit (``fakegpu.virtual_nodes.node_faults``), carry
    NVIDIA's health taints (with ``options.health_taints``, 1.36+). A fabric node's compute-domain slice comes
    last."""
    taints = fault_taints(node)
    specs = build_slice_specs(node.inventory.node, options, taints, generation=GENERATION_MARK)
    if node.inventory.node.fabric is not None:
        specs.append(compute_domain_slice_spec(node.name, options.api_version, generation=GENERATION_MARK))
    return specs


def _text(spec: JSON) -> str:
    return json.dumps(spec, separators=(",", ":"), sort_keys=True)


def _cut(text: str, ids: Sequence[str]) -> list[Piece]:
    """``text`` as literal pieces and identity indexes (longest strings first, so a UUID that contains
    the node name is not cut at the name)."""
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    index = {ids[i]: i for i in order}
    pattern = re.compile("|".join(re.escape(ids[i]) for i in order))
    pieces: list[Piece] = []
    last = 0
    for match in pattern.finditer(text):
        if match.start() > last:
            pieces.append(text[last : match.start()])
        pieces.append(index[match.group(0)])
        last = match.end()
    if last < len(text):
        pieces.append(text[last:])
    return pieces


def _join(pieces: Sequence[Piece], ids: Sequence[str]) -> str:
    return "".join(p if isinstance(p, str) else ids[p] for p in pieces)


@dataclass(frozen=True)
class NodeSlices:
    """One node's wanted slices: their spec texts (with the generation mark), and the digest each is stamped
    with, in the same order (a fabric node's compute-domain slice last)."""

    specs: tuple[str, ...]
    digests: tuple[str, ...]


class PoolTemplate:
    """The slices of every node of one pool, from one build."""

    def __init__(self, nodes: Sequence[VirtualNode], options: SliceOptions) -> None:
        self.options = options
        self._faulted: dict[str, tuple[VirtualNode, tuple[str, ...] | None]] = {}
        nodes = [without_faults(n) for n in nodes[:2]]
        first = nodes[0]
        self._ids_len = len(identity(first))
        self._pieces: list[list[Piece]] | None = [_cut(_text(s), identity(first)) for s in direct_specs(first, options)]
        self.count = len(self._pieces)
        texts = ["".join(p if isinstance(p, str) else f"\x00{p}\x00" for p in pieces) for pieces in self._pieces]
        fabric = first.inventory.node.fabric is not None
        self.keys = tuple(plan_digest([text]) for text in (texts[:-1] if fabric else texts))
        """The digest of each of the template's GPU slices: with its place and a node's identity, it names that
        slice of the node's wish."""
        self.cd_key = plan_digest(texts[-1:]) if fabric else ""
        """The same of its compute-domain pool (a fabric node's), which no fault changes."""
        self.derived = True
        """False when the pool's nodes are built one by one (the cut did not reproduce a second node)."""
        probe = nodes[1] if len(nodes) > 1 else None
        if probe is not None and not self._reproduces(probe):
            self._pieces = None
            self.derived = False

    def _reproduces(self, node: VirtualNode) -> bool:
        ids = identity(node)
        if len(ids) != self._ids_len or self._pieces is None:
            return False
        return [_join(p, ids) for p in self._pieces] == [_text(s) for s in direct_specs(node, self.options)]

    def _direct(self, node: VirtualNode) -> bool:
        """Whether the node's slices are built from its own inventory: a pool whose cut did not hold, or a node
        whose faults taint devices its pool's do not have."""
        if self._pieces is None:
            return True
        options = self.options
        if not (node.faults and options.health_taints and options.taints_supported):
            return False
        return self._own(node) is not None

    def _own(self, node: VirtualNode) -> tuple[str, ...] | None:
        """The specs of a node with faults that taint devices (None for one whose faults taint none), built
        once per planned node (a fault run asks for them several times)."""
        cached = self._faulted.get(node.name)
        if cached is None or cached[0] is not node:
            specs = tuple(_text(s) for s in direct_specs(node, self.options)) if taints_changed(node) else None
            cached = self._faulted[node.name] = (node, specs)
        return cached[1]

    def count_of(self, node: VirtualNode) -> int:
        """How many slices the node has (a node whose devices carry taints may need more: a slice holds fewer
        devices with taints)."""
        return len(self.specs(node)) if self._direct(node) else self.count

    def digest(self, node: VirtualNode, driver: str | None = None) -> str:
        """The node's wish for one driver's pool (the GPU driver's unless ``driver`` is the compute-domain
        one), without building it: the digest of its slices' digests. The compute-domain pool's (one slice)
        does not depend on the node's faults, so a fault never writes it."""
        if driver == COMPUTE_DOMAIN_DRIVER:
            prefix = prefix_label_value(node.prefix)
            if self._pieces is None:
                return plan_digest([prefix, *self.specs(node)[-1:]])
            return plan_digest([self.cd_key, prefix, *identity(node)])
        return plan_digest(self.digests(node))

    def digests(self, node: VirtualNode, driver: str | None = None) -> tuple[str, ...]:
        """The digest of each of the node's slices of one driver's pool (the GPU driver's unless ``driver`` is
        the compute-domain one), in write order. A slice derived from the template: its template digest, place
        and the node's identity and prefix; a slice of a node built directly: its place, the prefix and its
        text, unless the text is the template's for the node (a faulted node's untouched slice), which keeps
        the template's digest, so that a fault changes the digests of the slices it taints only."""
        if driver == COMPUTE_DOMAIN_DRIVER:
            return (self.digest(node, driver),)
        prefix = prefix_label_value(node.prefix)
        ids = identity(node)
        if not self._direct(node):
            return tuple(plan_digest([key, str(i), prefix, *ids]) for i, key in enumerate(self.keys))
        specs = self.specs(node)
        own = specs[:-1] if node.inventory.node.fabric is not None else specs
        derived = self._pieces if self._pieces is not None and len(ids) == self._ids_len else []
        out = []
        for i, text in enumerate(own):
            if i < len(self.keys) and i < len(derived) and text == _join(derived[i], ids):
                out.append(plan_digest([self.keys[i], str(i), prefix, *ids]))
            else:
                out.append(plan_digest([str(i), prefix, text]))
        return tuple(out)

    def specs(self, node: VirtualNode) -> tuple[str, ...]:
        ids = identity(node)
        if self._pieces is not None and self._direct(node):
            own = self._own(node)
            assert own is not None
            return own
        if self._pieces is None or len(ids) != self._ids_len:
            return tuple(_text(s) for s in direct_specs(node, self.options))
        return tuple(_join(p, ids) for p in self._pieces)

    def wanted(self, node: VirtualNode) -> NodeSlices:
        fabric = node.inventory.node.fabric is not None
        cd = (self.digest(node, COMPUTE_DOMAIN_DRIVER),) if fabric else ()
        return NodeSlices(self.specs(node), (*self.digests(node), *cd))


@dataclass(frozen=True)
class SliceBody:
    """A slice to write: its metadata, and its spec as JSON text (serialised once, by the template)."""

    api_version: str
    metadata: JSON
    spec: str
    driver: str

    @property
    def name(self) -> str | None:
        return self.metadata.get("name")

    @property
    def node(self) -> str:
        return str(self.metadata["ownerReferences"][0]["name"])

    def body(self) -> bytes:
        meta = json.dumps(self.metadata, separators=(",", ":"))
        head = f'{{"apiVersion":"{self.api_version}","kind":"ResourceSlice","metadata":{meta},"spec":'
        return f"{head}{self.spec}}}".encode()

    def spec_dict(self) -> JSON:
        return dict(json.loads(self.spec))


def slice_bodies(
    node: VirtualNode, options: SliceOptions, wanted: NodeSlices, generation: int | Mapping[str, int], node_uid: str
) -> list[SliceBody]:
    """The node's slices to write, of pool ``generation`` (one for every driver's pool, or per driver), owned by
    the Node, labelled as this tool's and each stamped with its own digest. A fabric node's last slice is its
    compute-domain one, named as that driver's kubelet plugin names it."""
    inventory_node = node.inventory.node
    gpu_count = len(wanted.specs) - (1 if inventory_node.fabric is not None else 0)
    shells = [(options.driver, s) for s in slice_objects(inventory_node, options, [{}] * gpu_count, node_uid=node_uid)]
    if inventory_node.fabric is not None:
        cd_options = replace(options, driver=COMPUTE_DOMAIN_DRIVER)
        (cd_shell,) = slice_objects(inventory_node, cd_options, [{}], node_uid=node_uid)
        shells.append((COMPUTE_DOMAIN_DRIVER, cd_shell))
    labels = {OWNER_LABEL: OWNER_VALUE, PREFIX_LABEL: prefix_label_value(node.prefix)}
    out = []
    for (driver, shell), text, digest in zip(shells, wanted.specs, wanted.digests, strict=True):
        meta = shell["metadata"]
        meta["labels"] = dict(labels)
        meta["annotations"] = {PLAN_ANNOTATION: digest}
        pool_generation = generation if isinstance(generation, int) else generation[driver]
        spec = text.replace(_MARK_TEXT, f'"generation":{pool_generation}', 1)
        out.append(SliceBody(options.api_version, meta, spec, driver))
    return out
