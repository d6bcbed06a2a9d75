"""The pool rules on plain values, without the command line: a rack layout's single pool and dynamic MIG."""

from __future__ import annotations

import pytest

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.sharing.rack_layout import RackLayout
from fakegpu.virtual_nodes.pool_rules import checked_mig_mode, rack_pool
from fakegpu.virtual_nodes.pools import DEFAULT_POOL, MAX_NODES, GpuMode, Pool

CLUSTER = "00000001-0000-0000-0000-000000000001"
TRAYS = InventoryInputs(node_name="", gpus=("4xgb200",))


def test_a_rack_pool_holds_every_rack_node():
    racks = RackLayout(racks=3, nodes_per_rack=2)
    pool = rack_pool(TRAYS, racks, "dra")
    assert (pool.name, pool.count, pool.mode, pool.racks, pool.in_names) == (DEFAULT_POOL, 6, "dra", racks, False)
    assert rack_pool(TRAYS, racks, "dra", count=6) == pool, "a count that repeats the racks' is accepted"


@pytest.mark.parametrize(
    ("inputs", "racks", "count", "flag", "message"),
    [
        (TRAYS, RackLayout(racks=2), 5, "--count", "5 disagrees with --racks 2 x --nodes-per-rack 18 = 36"),
        (
            TRAYS,
            RackLayout(racks=10_000, nodes_per_rack=11),
            None,
            "--racks",
            f"110000 nodes in all; at most {MAX_NODES}",
        ),
        (
            InventoryInputs(node_name="", gpus=("4xgb200",), nvlink_clique=f"{CLUSTER}.1"),
            RackLayout(racks=1),
            None,
            "--nvlink-clique",
            "cannot be combined with --racks",
        ),
    ],
)
def test_a_rack_pool_refuses_what_contradicts_the_racks(inputs, racks, count, flag, message):
    with pytest.raises(SpecError) as info:
        rack_pool(inputs, racks, "device-plugin", count)
    assert info.value.source == flag
    assert message in str(info.value)


def test_a_rack_pool_refuses_a_node_spec_with_a_fabric(tmp_path):
    spec = tmp_path / "tray.yaml"
    spec.write_text(f"fabric: {{clusterUUID: {CLUSTER}, cliqueID: 2}}\ngpus: [{{model: gb200, count: 4}}]\n")
    with pytest.raises(SpecError, match=r"^--racks: gives each rack its own NVLink clique; .*tray\.yaml already"):
        rack_pool(InventoryInputs(node_name="", node_spec=str(spec)), RackLayout(racks=1), "dra")


def pool(mode: GpuMode) -> Pool:
    return Pool(f"p-{mode}", TRAYS, 1, in_names=True, mode=mode)


def test_dynamic_mig_needs_a_pool_that_publishes_slices():
    with pytest.raises(SpecError, match="add --gpu-mode dra") as info:
        checked_mig_mode([pool("device-plugin")], "dynamic")
    assert info.value.source == "--mig-mode"
    mixed = [pool("device-plugin"), pool("dra-extended")]
    assert checked_mig_mode(mixed, "dynamic") == mixed, "applies to the pools that publish slices"
    assert checked_mig_mode([pool("device-plugin")], "static") == [pool("device-plugin")]
