"""Rack layouts: NVL72 racks of 18 nodes, one NVLink clique per rack, and topology labels with the user's keys
(Kueue TAS / GKE keys from their docs: kueue.sigs.k8s.io topology_aware_scheduling, GKE
``cloud.google.com/gce-topology-{block,subblock,host}``)."""

from __future__ import annotations

import pytest

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.label_syntax import label_problems
from fakegpu.sharing.nvlink_fabric import fabric_cluster_uuid, parse_clique
from fakegpu.sharing.rack_layout import (
    NVL72_NODES_PER_RACK,
    RackLayout,
    TopologyKeys,
    parse_topology_keys,
)


def test_nvl72_defaults_one_clique_per_rack():
    layout = RackLayout(racks=4)
    assert (layout.nodes_per_rack, layout.node_count, layout.blocks) == (NVL72_NODES_PER_RACK, 72, 1)
    places = [layout.place(i) for i in range(layout.node_count)]
    assert [p.rack for p in places] == [r for r in range(4) for _ in range(18)]
    assert {p.block for p in places} == {0}
    cliques: dict[int, set[str]] = {p.rack: set() for p in places}
    for p in places:
        cliques[p.rack].add(p.fabric.clique)
    assert all(len(c) == 1 for c in cliques.values()), "one clique across a rack"
    assert len({next(iter(c)) for c in cliques.values()}) == 4, "different cliques between racks"
    first = places[0].fabric
    assert (first.cluster_uuid, first.clique_id) == (fabric_cluster_uuid("rack-0"), 1)
    assert parse_clique(first.clique, "x") == (first.cluster_uuid, 1), "the clique string parses as NVIDIA's"


def test_blocks_and_prefix():
    layout = RackLayout(racks=5, nodes_per_rack=2, racks_per_block=2, domain_prefix="team-a-")
    assert layout.blocks == 3
    assert [layout.place(i).block for i in range(10)] == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    assert layout.place(0).fabric.cluster_uuid == fabric_cluster_uuid("team-a-rack-0")
    assert layout.place(0).fabric.cluster_uuid != RackLayout(racks=1).place(0).fabric.cluster_uuid
    with pytest.raises(IndexError):
        layout.place(10)


def test_labels_with_default_and_chosen_keys():
    place = RackLayout(racks=3, nodes_per_rack=2).place(5)
    assert place.labels(TopologyKeys(), "n-5") == {
        "fakegpu.io/topology-block": "block-0",
        "fakegpu.io/topology-rack": "rack-2",
        "kubernetes.io/hostname": "n-5",
    }
    gke = parse_topology_keys(
        "block=cloud.google.com/gce-topology-block,rack=cloud.google.com/gce-topology-subblock,"
        "host=cloud.google.com/gce-topology-host"
    )
    got = place.labels(gke, "n-5")
    assert got == {
        "cloud.google.com/gce-topology-block": "block-0",
        "cloud.google.com/gce-topology-subblock": "rack-2",
        "cloud.google.com/gce-topology-host": "n-5",
    }
    assert label_problems(got) == []


def test_partial_keys_keep_the_other_defaults():
    keys = parse_topology_keys("rack=cloud.provider.com/topology-rack")
    assert keys == TopologyKeys(rack="cloud.provider.com/topology-rack")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("rack", "expected LEVEL=KEY"),
        ("rack=", "expected LEVEL=KEY"),
        ("zone=example.com/zone", "unknown level 'zone'"),
        ("rack=a/b,rack=c/d", "rack is given twice"),
        ("rack=Bad_Prefix/x", "rack=Bad_Prefix/x is not a valid label key"),
        ("rack=example.com/-x", "is not a valid label key"),
        ("rack=nvidia.com/gpu.clique", "GPU Feature Discovery or the tool itself writes that key"),
        ("block=fakegpu.io/virtual-node-pool", "writes that key"),
        ("block=example.com/t,rack=example.com/t", "block and rack both use the label key example.com/t"),
        ("rack=fakegpu.io/topology-block", "block and rack both use"),
        ("rack=kubernetes.io/hostname,host=example.com/host", "that label holds the node name"),
    ],
)
def test_bad_keys_are_refused_naming_the_flag(value, message):
    with pytest.raises(SpecError, match=r"^--topology-label-keys: ") as info:
        parse_topology_keys(value)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"racks": 0}, "--racks"),
        ({"racks": 1, "nodes_per_rack": 0}, "--nodes-per-rack"),
        ({"racks": 1, "nodes_per_rack": 145}, "--nodes-per-rack"),
        ({"racks": 1, "racks_per_block": 0}, "--racks-per-block"),
    ],
)
def test_bad_sizes_name_their_flag(kwargs, flag):
    with pytest.raises(SpecError, match=f"^{flag}: "):
        RackLayout(**kwargs)
