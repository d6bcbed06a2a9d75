"""Rules a fleet's pools must keep across options: a rack layout's single pool, and dynamic MIG.

Kept apart from the command line so that they take plain values and can be tested without argparse; the
errors still name the flag the user typed (``SpecError``'s source), as every bad input of the command does.
"""

from __future__ import annotations

from collections.abc import Sequence

from fakegpu.dra.resource_slices import MigMode
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import InventoryInputs, load_spec
from fakegpu.sharing.rack_layout import RackLayout
from fakegpu.virtual_nodes.pools import DEFAULT_POOL, MAX_NODES, GpuMode, Pool


def rack_pool(base: InventoryInputs, racks: RackLayout, mode: GpuMode, count: int | None = None) -> Pool:
    """The single pool laid out in racks: ``racks x nodes-per-rack`` nodes, each on its rack's clique.

    ``count`` is the ``--count`` asked for (None: not given); it may only repeat what the racks make. The
    node spec must leave the fabric unset: each rack is its own NVLink clique."""
    nodes = racks.node_count
    if count is not None and count != nodes:
        raise SpecError(
            "--count",
            f"{count} disagrees with --racks {racks.racks} x --nodes-per-rack {racks.nodes_per_rack} = "
            f"{nodes}; drop --count",
        )
    if nodes > MAX_NODES:
        raise SpecError("--racks", f"{nodes} nodes in all; at most {MAX_NODES}")
    if base.nvlink_clique is not None:
        raise SpecError("--nvlink-clique", "cannot be combined with --racks, which gives each rack its own clique")
    spec, source = load_spec(base)
    if spec.fabric is not None:
        raise SpecError(
            "--racks", f"gives each rack its own NVLink clique; {source} already sets fabric: drop it or --racks"
        )
    return Pool(DEFAULT_POOL, base, nodes, in_names=False, mode=mode, racks=racks)


def checked_mig_mode(pools: Sequence[Pool], mig_mode: MigMode) -> list[Pool]:
    """``pools``, unless ``mig_mode`` is dynamic where no pool publishes ResourceSlices.

    Refused rather than warned about: dynamic MIG exists only in slices (every profile at every placement),
    so in the device-plugin mode the flag would change nothing and a rehearsal meant to exercise dynamic
    MIG would silently run without it. With some pools in a DRA mode it applies to those."""
    if mig_mode == "dynamic" and not any(p.mode != "device-plugin" for p in pools):
        raise SpecError(
            "--mig-mode",
            "dynamic MIG lives in ResourceSlices, which the device-plugin GPU mode does not publish; "
            "add --gpu-mode dra (or dra-extended), or drop --mig-mode dynamic",
        )
    return list(pools)
