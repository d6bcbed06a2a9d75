"""Rack topology for a fleet of NVL72-style nodes: which rack and block each node sits in, its NVLink clique,
and the node labels topology-aware schedulers group nodes by.

A GB200/GB300 NVL72 rack holds 18 compute trays of 4 GPUs (72 GPUs, 9 NVLink switch trays); each tray is
one Kubernetes node, and the rack's GPUs form one multi-node NVLink domain. fakegpu gives every rack one
clique: a cluster UUID derived from the rack's name (``fabric_cluster_uuid``, so a fleet reproduces) and
clique ID 1, which GPU Feature Discovery writes as ``nvidia.com/gpu.clique`` on each of the rack's nodes.
Real racks can be cut into several NVLink partitions (cliques); this layout does not model that.

Gang and topology-aware schedulers (Kueue TAS, KAI, Volcano, Kubernetes' own workload scheduling) read a
block / rack / host hierarchy from node labels whose keys each cloud spells its own way (Kueue's sample
``cloud.provider.com/topology-block``, GKE's ``cloud.google.com/gce-topology-block`` and
``-subblock`` (an NVL72 domain on A4X), EKS's ``topology.k8s.aws/network-node-layer-N``), so the keys are
the user's choice; the defaults are fakegpu's own ``fakegpu.io/topology-block`` and ``-rack`` with
``kubernetes.io/hostname`` for the host. Values: ``block-<b>``, ``rack-<r>`` and the node name.
"""

from __future__ import annotations

from dataclasses import dataclass

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.label_syntax import key_problem
from fakegpu.sharing.nvlink_fabric import NvlinkFabric, fabric_cluster_uuid

NVL72_NODES_PER_RACK = 18
"""Compute trays (nodes) per NVL72 rack."""
NVL72_GPUS_PER_NODE = 4
MAX_NODES_PER_RACK = 144
"""An NVLink domain spans at most 576 GPUs (NVIDIA Mission Control docs), 144 nodes of 4."""
RACK_CLIQUE_ID = 1
"""The clique ID of every rack's one NVLink partition."""
DEFAULT_BLOCK_KEY = "fakegpu.io/topology-block"
DEFAULT_RACK_KEY = "fakegpu.io/topology-rack"
DEFAULT_HOST_KEY = "kubernetes.io/hostname"
LEVELS = ("block", "rack", "host")
_RESERVED_PREFIXES = ("nvidia.com/", "fakegpu.io/virtual-node")
"""Keys that GPU Feature Discovery or the virtual-node tool itself writes: a topology label must not
overwrite them."""


@dataclass(frozen=True)
class TopologyKeys:
    """The label key of each level of the block / rack / host hierarchy."""

    block: str = DEFAULT_BLOCK_KEY
    rack: str = DEFAULT_RACK_KEY
    host: str = DEFAULT_HOST_KEY


def parse_topology_keys(value: str, where: str = "--topology-label-keys") -> TopologyKeys:
    """``block=KEY,rack=KEY,host=KEY`` (any subset; the others keep their defaults), each KEY a valid label
    key that no other level uses and that GFD or the tool does not already write."""
    chosen: dict[str, str] = {}
    for item in value.split(","):
        level, eq, key = (part.strip() for part in item.partition("="))
        if not eq or not key:
            raise SpecError(where, f"expected LEVEL=KEY[,LEVEL=KEY...] such as rack=example.com/rack, found {item!r}")
        if level not in LEVELS:
            raise SpecError(where, f"unknown level {level!r}; expected one of: {', '.join(LEVELS)}")
        if level in chosen:
            raise SpecError(where, f"{level} is given twice")
        problem = key_problem(key)
        if problem is not None:
            raise SpecError(where, f"{level}={key} is not a valid label key: {problem}")
        if key.startswith(_RESERVED_PREFIXES):
            raise SpecError(where, f"{level}={key}: GPU Feature Discovery or the tool itself writes that key")
        chosen[level] = key
    keys = TopologyKeys(**chosen)
    by_key: dict[str, str] = {}
    for level in LEVELS:
        key = getattr(keys, level)
        if key in by_key:
            raise SpecError(where, f"{by_key[key]} and {level} both use the label key {key}; give each its own")
        by_key[key] = level
    for level in ("block", "rack"):
        if getattr(keys, level) == DEFAULT_HOST_KEY:
            raise SpecError(where, f"{level}={DEFAULT_HOST_KEY}: that label holds the node name")
    return keys


@dataclass(frozen=True)
class RackPlace:
    """Where one node sits: its rack and block (from 0) and its NVLink clique."""

    index: int
    rack: int
    block: int
    fabric: NvlinkFabric

    def labels(self, keys: TopologyKeys, node_name: str) -> dict[str, str]:
        """The topology labels of the node (the host level's value is the node name)."""
        return {keys.block: f"block-{self.block}", keys.rack: f"rack-{self.rack}", keys.host: node_name}


@dataclass(frozen=True)
class RackLayout:
    """``racks`` racks of ``nodes_per_rack`` nodes, numbered rack by rack; ``racks_per_block`` racks per
    block (None: one block holds them all). ``domain_prefix`` keeps the cliques of two fleets apart."""

    racks: int
    nodes_per_rack: int = NVL72_NODES_PER_RACK
    racks_per_block: int | None = None
    domain_prefix: str = ""
    keys: TopologyKeys = TopologyKeys()

    def __post_init__(self) -> None:
        if self.racks < 1:
            raise SpecError("--racks", f"must be at least 1, found {self.racks}")
        if not 1 <= self.nodes_per_rack <= MAX_NODES_PER_RACK:
            raise SpecError("--nodes-per-rack", f"must be from 1 to {MAX_NODES_PER_RACK}, found {self.nodes_per_rack}")
        if self.racks_per_block is not None and self.racks_per_block < 1:
            raise SpecError("--racks-per-block", f"must be at least 1, found {self.racks_per_block}")

    @property
    def node_count(self) -> int:
        return self.racks * self.nodes_per_rack

    @property
    def blocks(self) -> int:
        per_block = self.racks_per_block or self.racks
        return -(-self.racks // per_block)

    def rack_fabric(self, rack: int) -> NvlinkFabric:
        """The one NVLink clique of rack ``rack``."""
        return NvlinkFabric(fabric_cluster_uuid(f"{self.domain_prefix}rack-{rack}"), RACK_CLIQUE_ID)

    def place(self, index: int) -> RackPlace:
        """The place of the ``index``-th node (from 0)."""
        if not 0 <= index < self.node_count:
            raise IndexError(f"node {index} is outside {self.racks} rack(s) of {self.nodes_per_rack} node(s)")
        rack = index // self.nodes_per_rack
        block = rack // (self.racks_per_block or self.racks)
        return RackPlace(index, rack, block, self.rack_fabric(rack))
