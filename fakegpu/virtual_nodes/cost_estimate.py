"""What a virtual-node plan will cost the API server and etcd, worked out before anything is written.

A fleet of dynamic-MIG nodes can take more memory than the machine running the control plane has: on a
real Kubernetes v1.36.2 control plane a 1000-node bring-up drove the API server to all of its 24 GiB and
stalled, and nothing had warned. So every bring-up (and ``--dry-run``) first prints what the plan adds,
and a plan above ``--max-server-memory`` is refused before the first request.

The bytes are not guessed: the Node and ResourceSlice bodies are built by the code that sends them
(``node_manifest.new_node``, encoded as ``Api.create_node`` encodes it; ``slice_template.slice_bodies``,
whose ``body()`` is what ``Api.create_slice`` sends). A pool's nodes differ only in names and UUIDs, so
the slices are built for a pool's first and last node and the pool is counted at their mean; every Node
body is built and measured.

Memory comes from bytes through a ratio measured on a real server (``SERVER_BYTES_PER_BYTE``, with its
source below): the API server keeps every object decoded in its watch cache, with managedFields, and
serialises it again for each client that lists or watches, so it holds far more than the bytes sent. The
ratio was measured on dynamic-MIG nodes, whose slices are 99 % of their bytes; for nodes of a few KB it is
an extrapolation, and small objects likely cost somewhat more per byte.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from fakegpu.dra.resource_slices import MigMode, SliceOptions
from fakegpu.kube.discovery import SUPPORTED_API_VERSIONS, layout_minor, served_api_versions
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.quantities import parse_quantity
from fakegpu.virtual_nodes.extended_classes import wanted_classes
from fakegpu.virtual_nodes.node_manifest import NodeShape, desired_node, new_node
from fakegpu.virtual_nodes.pools import VirtualNode
from fakegpu.virtual_nodes.slice_template import PoolTemplate, slice_bodies

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

MEASURED_NODES = 400
"""Nodes of the run the ratio comes from: ``fakegpu virtual-nodes --count 400 --gpus 8xh100-80gb --gpu-mode
dra --mig-mode dynamic`` against a real Kubernetes v1.36.2 control plane (kube-apiserver, etcd 3.6,
scheduler and controller-manager on one 2-CPU, 24 GiB machine, KWOK v0.8 keeping the nodes Ready)."""
MEASURED_SERVER_RSS_BEFORE = 3.4 * GIB
"""The kube-apiserver's resident memory (read from /proc) before that bring-up."""
MEASURED_SERVER_RSS_AFTER = 7.8 * GIB
"""The kube-apiserver's resident memory once the 400 nodes were up. The same server went from 274 MiB to
2311 MiB for 200 such nodes from an empty start (10.2 MiB per node); the 400-node run, 11.3 MiB per node,
is the larger of the two and the one the ratio uses, so the estimate errs on the side of refusing."""
MEASURED_BYTES_PER_NODE = 243_014
"""What fakegpu sent per node in that run: one Node (2.9 KB) and nine ResourceSlices (a 4.5 KB counters
slice and eight of 29.4 KB, every MIG profile at every placement), as this module counts them; a test
checks that the same plan still counts within a few percent of it, else the ratio needs measuring again."""
SERVER_BYTES_PER_BYTE = (MEASURED_SERVER_RSS_AFTER - MEASURED_SERVER_RSS_BEFORE) / (
    MEASURED_NODES * MEASURED_BYTES_PER_NODE
)
"""API-server memory per byte of objects sent (about 49): the estimate's one measured figure."""
ESTIMATE_MINOR = 36
"""The Kubernetes minor whose slice layout the estimate assumes unless ``--server-version`` says: the
estimate is made before the server is asked, and 1.36 is the server the ratio was measured on."""
DEFAULT_MAX_SERVER_MEMORY = "4Gi"
"""The default limit on what a plan may add to the API server's memory. kind runs the whole control plane
in one container: Docker Desktop gives its VM half the host's memory (8 GiB on a 16 GiB laptop) and a
GitHub-hosted Linux runner has 16 GiB, so 4 GiB for the API server's growth leaves the rest to etcd, the
scheduler, the controller-manager, KWOK and the rehearsal itself."""
PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"
"""A UID of the real length, for the owner reference of slices whose Node does not exist yet."""


@dataclass(frozen=True)
class PoolCost:
    """One pool's objects: how many nodes, and per node the bytes of its Node and of its slices."""

    pool: str
    nodes: int
    node_bytes: int
    """All the pool's Node bodies together."""
    slices_per_node: int
    slice_bytes: int
    """All the pool's slice bodies together."""

    @property
    def total(self) -> int:
        return self.node_bytes + self.slice_bytes

    @property
    def per_node(self) -> int:
        return round(self.total / self.nodes)

    def describe(self) -> str:
        """``pool default: 237.3 KiB per node (Node 2.8 KiB, 9 ResourceSlices 234.5 KiB)``."""
        node = self.node_bytes / self.nodes
        parts = f"Node {size(node)}"
        if self.slices_per_node:
            parts += f", {self.slices_per_node} ResourceSlice(s) {size(self.slice_bytes / self.nodes)}"
        return f"pool {self.pool}: {size(self.per_node)} per node ({parts})"


@dataclass(frozen=True)
class FleetCost:
    """A plan's objects, pool by pool, with the fleet-wide DeviceClasses, and the memory they imply."""

    pools: tuple[PoolCost, ...]
    class_bytes: int = 0
    class_count: int = 0

    @property
    def nodes(self) -> int:
        return sum(p.nodes for p in self.pools)

    @property
    def total_bytes(self) -> int:
        return sum(p.total for p in self.pools) + self.class_bytes

    @property
    def server_memory(self) -> int:
        """The API-server memory the plan's objects imply, in bytes (see SERVER_BYTES_PER_BYTE)."""
        return round(self.total_bytes * SERVER_BYTES_PER_BYTE)

    def lines(self, limit: int) -> list[str]:
        """Two lines: the objects, and the memory against ``limit`` (0: no limit)."""
        classes = f" and {self.class_count} DeviceClass(es)" if self.class_count else ""
        per_pool = "; ".join(p.describe() for p in self.pools)
        bound = f"limit {size(limit)}" if limit else "no limit"
        return [
            f"estimate: {self.nodes} node(s){classes}, {size(self.total_bytes)} of objects for etcd and the API "
            f"server to keep; {per_pool}",
            f"estimate: the API server's memory grows by about {size(self.server_memory)} "
            f"({SERVER_BYTES_PER_BYTE:.0f} times the bytes, as measured on a real Kubernetes v1.36.2 API server); "
            f"{bound} (--max-server-memory)",
        ]

    def refusal(self, limit: int) -> SpecError | None:
        """The one-line refusal of a plan above ``limit`` (0: none), or None. It is decided before the first
        request, so a re-run of a fleet already up counts its nodes as if new: the line says so."""
        if not limit or self.server_memory <= limit:
            return None
        return SpecError(
            "--max-server-memory",
            f"the plan would add about {size(self.server_memory)} to the API server's memory ({self.nodes} "
            f"node(s), {size(self.total_bytes)} of objects, nodes that exist already counted too), above the "
            f"limit of {size(limit)}; raise the limit, or give --max-server-memory 0 to go ahead anyway",
        )


def size(count: float) -> str:
    """A byte count for people: ``512 B``, ``4.5 KiB``, ``237.3 KiB``, ``2.2 GiB``."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{round(count)} B"


def parse_limit(text: str) -> int:
    """``--max-server-memory``: a Kubernetes quantity of bytes (``4Gi``, ``6G``, ``512Mi``); 0 is no limit."""
    try:
        value = parse_quantity(text)
    except ValueError as exc:
        raise SpecError("--max-server-memory", f"{exc}; 0 turns the limit off") from None
    if value < 0:
        raise SpecError("--max-server-memory", f"must not be negative, found {text!r}")
    if 0 < value < 1:  # "4m" is milli-bytes (a typo for 4Mi?): truncated to 0 it would turn the limit off
        raise SpecError(
            "--max-server-memory", f"{text!r} is less than a byte; did you mean Mi? (0 turns the limit off)"
        )
    return int(value)


def estimate_options(driver: str, mig_mode: MigMode, server_minor: int | None, api_version: str | None) -> SliceOptions:
    """How the slices would be published, from the flags alone: ``--server-version`` (else ESTIMATE_MINOR)
    and ``--resource-api-version`` (else the newest version that minor serves)."""
    minor = ESTIMATE_MINOR if server_minor is None else server_minor
    if api_version is None:
        served = served_api_versions(minor)
        api_version = served[0] if served else next(iter(SUPPORTED_API_VERSIONS))
    return SliceOptions(
        driver=driver,
        mig_mode=mig_mode,
        server_minor=layout_minor(minor, api_version),
        api_version=api_version,
    )


def _node_bytes(node: VirtualNode, shape: NodeShape) -> int:
    return len(msgspec.json.encode(new_node(desired_node(node, shape))))


def _slice_bytes(node: VirtualNode, template: PoolTemplate, options: SliceOptions) -> tuple[int, int]:
    bodies = slice_bodies(node, options, template.wanted(node), 1, PLACEHOLDER_UID)
    return len(bodies), sum(len(b.body()) for b in bodies)


def pool_cost(pool: str, members: Sequence[VirtualNode], shape: NodeShape, options: SliceOptions | None) -> PoolCost:
    """One pool's bytes: every Node body; the slices of the first and last node, the pool at their mean."""
    node_bytes = sum(_node_bytes(v, shape) for v in members)
    if options is None or not members[0].publishes_slices:
        return PoolCost(pool, len(members), node_bytes, 0, 0)
    template = PoolTemplate(members, options)
    first_count, first_bytes = _slice_bytes(members[0], template, options)
    _, last_bytes = _slice_bytes(members[-1], template, options)
    slice_bytes = round((first_bytes + last_bytes) / 2 * len(members))
    return PoolCost(pool, len(members), node_bytes, first_count, slice_bytes)


def fleet_cost(nodes: Sequence[VirtualNode], shape: NodeShape, options: SliceOptions | None) -> FleetCost:
    """The plan's objects pool by pool (``options`` None: a server without ResourceSlices)."""
    pools: dict[str, list[VirtualNode]] = collections.defaultdict(list)
    for node in nodes:
        pools[node.pool].append(node)
    costs = tuple(pool_cost(name, members, shape, options) for name, members in pools.items())
    if options is None:
        return FleetCost(costs)
    classes = wanted_classes((n.mode for n in nodes), options.driver, options.api_version)
    return FleetCost(costs, sum(len(msgspec.json.encode(c)) for c in classes), len(classes))
