"""What the slice write plan is told of a virtual node's slices before their bodies are built."""

from __future__ import annotations

import pytest

from fakegpu.cli.virtual_nodes_command import pools_from_args
from fakegpu.dra.resource_slices import SliceOptions
from fakegpu.virtual_nodes.pools import build_virtual_nodes
from fakegpu.virtual_nodes.slice_template import PoolTemplate, slice_bodies, slice_drivers, wanted_drivers


@pytest.mark.parametrize(
    "argv",
    [
        ("--gpus", "8xh100-80gb", "--count", "2"),
        ("--gpus", "8xh100-80gb", "--count", "2", "--mig-mode", "dynamic"),
        ("--gpus", "4xgb200", "--racks", "2", "--nodes-per-rack", "2"),
        ("--gpus", "4xgb200", "--racks", "2", "--nodes-per-rack", "2", "--mig-mode", "dynamic"),
    ],
)
def test_wanted_drivers_are_the_drivers_of_the_bodies_in_order(parse, argv):
    """The plan matches stored slices to wished ones by driver before the bodies exist (they carry the plan's
    generation): a fabric node's compute-domain slice must be where ``slice_bodies`` puts it."""
    args = parse(*argv, "--gpu-mode", "dra")
    nodes, _ = build_virtual_nodes(pools_from_args(args, env={}), args.name_prefix, None)
    options = SliceOptions(mig_mode=args.mig_mode, server_minor=36)
    template = PoolTemplate(nodes, options)
    for node in nodes:
        bodies = slice_bodies(node, options, template.wanted(node), 1, "uid")
        wanted = wanted_drivers(node, options, template.count)
        assert wanted == tuple(b.driver for b in bodies)
        assert set(wanted) == slice_drivers(node, options)
