"""Pools: which virtual nodes to run and with which GPUs.

One pool comes from the ordinary inventory options (``--count N --gpus 8xh100-80gb``); several come from
``--pool FILE=COUNT[:MODE]`` (repeatable), each FILE a node spec as ``--node-spec`` takes, for
heterogeneous fleets; MODE overrides ``--gpu-mode`` for that pool. The other inventory options
(``--config-file``, ``--mig-layout``, NVIDIA's flags) apply to every pool. Every node gets its own
inventory: device UUIDs derive from the node name, as on real nodes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, get_args

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.expansion import build_inventory
from fakegpu.sharing.gpu_faults import GpuFault
from fakegpu.sharing.inputs import InventoryInputs, load_config, load_node
from fakegpu.sharing.inventory import Inventory
from fakegpu.sharing.labels import gfd_labels
from fakegpu.sharing.rack_layout import RackLayout
from fakegpu.virtual_nodes.names import MAX_NAME_LENGTH, check_node_name, node_name

GpuMode = Literal["device-plugin", "dra", "dra-extended"]
"""How a pool's nodes offer their GPUs, as a real node runs one of the two: ``device-plugin`` (extended
resources in capacity, no ResourceSlices), ``dra`` (ResourceSlices, no GPU capacity) or ``dra-extended``
(ResourceSlices, plus DeviceClasses with ``extendedResourceName`` so ``nvidia.com/gpu`` requests are served
from the same devices)."""
GPU_MODES: tuple[GpuMode, ...] = get_args(GpuMode)
DEFAULT_MODE: GpuMode = "device-plugin"
DEFAULT_POOL = "default"
MAX_NODES = 100_000
"""A typo guard (``--count 10000000``), far above what one API server holds."""


@dataclass(frozen=True)
class Pool:
    name: str
    """``default`` for the single pool, else the node spec file's stem as a name part."""
    inputs: InventoryInputs
    """The inventory inputs of every node of the pool; ``node_name`` is set per node."""
    count: int
    in_names: bool
    """Whether node names carry the pool name (only with ``--pool``)."""
    source: str = ""
    """The ``--pool`` file the pool came from ("" for the single pool)."""
    mode: GpuMode = DEFAULT_MODE
    racks: RackLayout | None = None
    """The pool's rack layout (its node count is ``count``); None for nodes in no rack."""


@dataclass(frozen=True)
class VirtualNode:
    """What one virtual node should advertise: its inventory and its GPU Feature Discovery labels."""

    name: str
    pool: str
    inventory: Inventory
    gfd_labels: Mapping[str, str]
    prefix: str = ""
    """The ``--name-prefix`` the node is named with (a label on the node and its slices)."""
    mode: GpuMode = DEFAULT_MODE
    topology_labels: Mapping[str, str] = field(default_factory=dict)
    """The block / rack / host labels of a node in a rack layout (empty otherwise)."""
    faults: Mapping[int, tuple[GpuFault, ...]] = field(default_factory=dict)
    """The faults its GPUs carry, by GPU index (the Node's ``fakegpu.io/gpu-faults`` annotation): a node with
    faults is built by ``fakegpu.virtual_nodes.node_faults.with_faults``, which also makes ``inventory`` and
    ``gfd_labels`` what the faults leave."""

    @property
    def publishes_slices(self) -> bool:
        return self.mode != "device-plugin"

    @property
    def has_gpu_capacity(self) -> bool:
        return self.mode == "device-plugin"


def parse_pool_value(value: str) -> tuple[str, int, GpuMode | None]:
    """``h100.yaml=100`` -> (``h100.yaml``, 100, None); ``h100.yaml=100:dra`` -> (..., ``dra``): the count
    and the optional GPU mode are what follows the last ``=``, so a file name may hold ``=`` and ``:``."""
    path, sep, rest = value.rpartition("=")
    if not sep or not path:
        raise SpecError("--pool", f"expected FILE=COUNT[:MODE] such as nodes/h100.yaml=100:dra, found {value!r}")
    count_text, colon, mode_text = rest.partition(":")
    mode: GpuMode | None = None
    if colon:
        if mode_text not in GPU_MODES:
            raise SpecError("--pool", f"{value!r}: MODE must be one of {', '.join(GPU_MODES)}, found {mode_text!r}")
        mode = mode_text
    count = int(count_text) if re.fullmatch(r"[0-9]+", count_text) else 0
    if count < 1 or count > MAX_NODES:
        raise SpecError("--pool", f"{value!r}: COUNT must be an integer from 1 to {MAX_NODES}, found {count_text!r}")
    return path, count, mode


def node_names(pools: list[Pool], prefix: str) -> list[tuple[str, Pool]]:
    """Every node's name with its pool, in pool order then index order; names are checked here. A name too
    long only because of the pool name (the ``--pool`` file's stem) blames that file, not the prefix."""
    out = []
    for pool in pools:
        prefix_fits = len(node_name(prefix, pool.count - 1)) <= MAX_NAME_LENGTH
        too_long = f"--pool {pool.source or pool.name}" if pool.in_names and prefix_fits else None
        for index in range(pool.count):
            name = node_name(prefix, index, pool.name if pool.in_names else None)
            check_node_name(name, too_long=too_long)
            out.append((name, pool))
    return out


def build_virtual_nodes(
    pools: list[Pool], prefix: str, timestamp: int | None = None
) -> tuple[list[VirtualNode], list[str]]:
    """Each node's inventory and labels, and the warnings the inputs gave (once each); ``timestamp`` is the
    run's ``nvidia.com/gfd.timestamp`` (None: ``--no-timestamp``).

    A bad pool file is reported against ``--pool`` as well as the file, since that is what the user typed."""
    nodes: list[VirtualNode] = []
    warnings: list[str] = []
    configs = {}
    indexes: dict[str, int] = {}
    for name, pool in node_names(pools, prefix):
        index = indexes[pool.name] = indexes.get(pool.name, -1) + 1
        place = pool.racks.place(index) if pool.racks is not None else None
        try:
            if pool.name not in configs:
                configs[pool.name] = load_config(pool.inputs)
            config = configs[pool.name]
            inputs = replace(pool.inputs, node_name=name)
            if place is not None:
                inputs = replace(inputs, nvlink_clique=place.fabric.clique)
            node = load_node(inputs)
            inventory = build_inventory(node, config)
        except SpecError as exc:
            if not pool.in_names:
                raise
            raise SpecError("--pool", str(exc)) from None
        for warning in (*config.warnings, *inventory.warnings):
            if warning not in warnings:
                warnings.append(warning)
        topology = place.labels(pool.racks.keys, name) if place is not None and pool.racks is not None else {}
        nodes.append(
            VirtualNode(
                name,
                pool.name,
                inventory,
                gfd_labels(node, config, timestamp),
                prefix=prefix,
                mode=pool.mode,
                topology_labels=topology,
            )
        )
    return nodes, warnings
