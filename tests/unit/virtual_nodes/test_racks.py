"""Rack layouts of virtual nodes: flags, per-node cliques and labels, and the pool template's derivation of
slices across racks (whose cliques differ) staying exact."""

from __future__ import annotations

import json

import pytest

from fakegpu.cli.virtual_nodes_command import plan_lines, pools_from_args, settings_from_args
from fakegpu.dra.compute_domain.devices import COMPUTE_DOMAIN_DRIVER
from fakegpu.dra.resource_slices import SliceOptions
from fakegpu.sharing.errors import SpecError
from fakegpu.virtual_nodes.node_manifest import NodeShape, desired_node
from fakegpu.virtual_nodes.pools import build_virtual_nodes
from fakegpu.virtual_nodes.slice_template import PoolTemplate, direct_specs, slice_bodies

CLUSTER = "00000001-0000-0000-0000-000000000001"


def fleet(parse, *argv: str):
    args = parse(*argv)
    nodes, _ = build_virtual_nodes(pools_from_args(args, env={}), args.name_prefix, None)
    return nodes


def test_racks_give_count_cliques_and_labels(parse):
    nodes = fleet(parse, "--gpus", "4xgb200", "--racks", "3", "--nodes-per-rack", "2", "--gpu-mode", "dra")
    assert [n.name for n in nodes] == [f"fakegpu-virtual-000{i}" for i in range(6)]
    cliques = [n.gfd_labels["nvidia.com/gpu.clique"] for n in nodes]
    assert cliques[0] == cliques[1] != cliques[2] == cliques[3] != cliques[4] == cliques[5] != cliques[0]
    assert [n.topology_labels["fakegpu.io/topology-rack"] for n in nodes] == ["rack-0"] * 2 + ["rack-1"] * 2 + [
        "rack-2"
    ] * 2
    assert {n.topology_labels["fakegpu.io/topology-block"] for n in nodes} == {"block-0"}
    labels = desired_node(nodes[3], NodeShape()).labels
    assert labels["fakegpu.io/topology-rack"] == "rack-1" and labels["kubernetes.io/hostname"] == nodes[3].name
    assert labels["nvidia.com/gpu.clique"] == cliques[3]
    assert plan_lines(nodes) == [
        "pool default: 6 node(s) fakegpu-virtual-0000..fakegpu-virtual-0005, 4xgb200 (ResourceSlices, no GPU "
        "capacity), dra, 3 NVLink clique(s) with a compute-domain.nvidia.com ResourceSlice per node"
    ]


def test_chosen_label_keys_and_blocks(parse):
    nodes = fleet(
        parse, "--gpus", "4xgb300", "--racks", "4", "--nodes-per-rack", "1", "--racks-per-block", "2",
        "--topology-label-keys",
        "block=cloud.google.com/gce-topology-block,rack=cloud.google.com/gce-topology-subblock",
    )  # fmt: skip
    assert [n.topology_labels["cloud.google.com/gce-topology-block"] for n in nodes] == ["block-0"] * 2 + [
        "block-1"
    ] * 2
    assert [n.topology_labels["cloud.google.com/gce-topology-subblock"] for n in nodes] == [
        f"rack-{r}" for r in range(4)
    ]
    assert "fakegpu.io/topology-rack" not in nodes[0].topology_labels


def test_cliques_differ_between_name_prefixes(parse):
    a = fleet(parse, "--gpus", "4xgb200", "--racks", "1", "--nodes-per-rack", "1")
    b = fleet(parse, "--gpus", "4xgb200", "--racks", "1", "--nodes-per-rack", "1", "--name-prefix", "team-b-")
    assert a[0].gfd_labels["nvidia.com/gpu.clique"] != b[0].gfd_labels["nvidia.com/gpu.clique"]


@pytest.mark.parametrize(
    ("argv", "flag", "message"),
    [
        (["--racks", "2", "--count", "5"], "--count", "5 disagrees with --racks 2 x --nodes-per-rack 18 = 36"),
        (["--nodes-per-rack", "4"], "--nodes-per-rack", "only applies with --racks"),
        (["--racks-per-block", "2"], "--racks-per-block", "only applies with --racks"),
        (["--topology-label-keys", "rack=a.io/r"], "--topology-label-keys", "only applies with --racks"),
        (["--racks", "0"], "--racks", "must be at least 1"),
        (["--racks", "1", "--topology-label-keys", "rack=nvidia.com/gpu.clique"], "--topology-label-keys", "writes"),
        (["--racks", "1", "--nvlink-clique", f"{CLUSTER}.1"], "--nvlink-clique", "cannot be combined with --racks"),
        (["--racks", "1", "--pool", "a.yaml=18"], "--racks", "not to --pool pools"),
        (["--racks", "10000", "--nodes-per-rack", "11"], "--racks", "110000 nodes in all; at most 100000"),
    ],
)
def test_bad_rack_flags_name_their_flag(parse, argv, flag, message):
    with pytest.raises(SpecError, match=f"^{flag}: ") as info:
        pools_from_args(parse("--gpus", "4xgb200", *argv), env={})
    assert message in str(info.value)


def test_racks_refuse_a_node_spec_with_a_fabric(parse, tmp_path):
    spec = tmp_path / "tray.yaml"
    spec.write_text(f"fabric: {{clusterUUID: {CLUSTER}, cliqueID: 2}}\ngpus: [{{model: gb200, count: 4}}]\n")
    with pytest.raises(SpecError, match=r"^--racks: gives each rack its own NVLink clique; .*tray\.yaml already"):
        pools_from_args(parse("--node-spec", str(spec), "--racks", "1"), env={})


@pytest.mark.parametrize("api_version", ["resource.k8s.io/v1", "resource.k8s.io/v1beta1"])
def test_template_derives_every_rack_nodes_slices_exactly(parse, api_version):
    """The pool template cuts the first node's slices at its identity (name, GPU UUIDs, clique); nodes of
    other racks differ by their clique too, and their derived slices equal the ones built directly."""
    nodes = fleet(parse, "--gpus", "4xgb200", "--racks", "3", "--nodes-per-rack", "2", "--gpu-mode", "dra")
    options = SliceOptions(api_version=api_version, server_minor=36 if api_version.endswith("v1") else 32)
    template = PoolTemplate(nodes, options)
    assert template.derived and template.count == 2
    for node in nodes:
        direct = [json.dumps(s, separators=(",", ":"), sort_keys=True) for s in direct_specs(node, options)]
        assert list(template.specs(node)) == direct
    digests = {template.digest(n) for n in nodes}
    assert len(digests) == len(nodes)
    bodies = slice_bodies(nodes[4], options, template.wanted(nodes[4]), 3, "uid-4")
    assert [b.driver for b in bodies] == ["gpu.nvidia.com", COMPUTE_DOMAIN_DRIVER]
    cd = bodies[1]
    assert cd.metadata["ownerReferences"][0] == {
        "apiVersion": "v1", "kind": "Node", "name": nodes[4].name, "uid": "uid-4", "controller": True
    }  # fmt: skip
    assert COMPUTE_DOMAIN_DRIVER in cd.metadata["generateName"]
    spec = cd.spec_dict()
    assert spec["driver"] == COMPUTE_DOMAIN_DRIVER and spec["pool"] == {
        "name": nodes[4].name, "generation": 3, "resourceSliceCount": 1
    }  # fmt: skip
    assert [d["name"] for d in spec["devices"]] == ["channel-0", "daemon"]


def test_nodes_off_a_fabric_get_no_compute_domain_slice(parse):
    nodes = fleet(parse, "--gpus", "4xgb200", "--count", "2", "--gpu-mode", "dra")
    assert "nvidia.com/gpu.clique" not in nodes[0].gfd_labels and nodes[0].topology_labels == {}
    specs = direct_specs(nodes[0], SliceOptions())
    assert [s["driver"] for s in specs] == ["gpu.nvidia.com"]


def test_delete_refuses_racks(parse):
    """``--delete`` removes every node of the prefix whatever its layout: a rack flag would do nothing."""
    with pytest.raises(SpecError, match=r"^--delete: .*drop --racks"):
        settings_from_args(parse("--delete", "--racks", "2"))
