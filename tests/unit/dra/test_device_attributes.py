"""Device attributes NVIDIA's GPU driver added or dropped after 25.12: the KEP-6072 NUMA attribute in both forms,
Fabric Manager partitions on full GPUs, and the attributes it no longer publishes."""

from __future__ import annotations

from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from fakegpu.dra.device_attributes import (
    fabric_manager_attributes,
    has_fabric_manager_partitions,
    numa_node_attribute,
    partition_id,
)
from fakegpu.dra.feature_gates import FeatureGates, parse_feature_gates, validate_feature_gates
from fakegpu.dra.resource_slices import SliceOptions, build_slice_specs, slice_objects, spec_devices
from fakegpu.sharing.inputs import InventoryInputs, load_node
from fakegpu.sharing.node import Node

NUMA = "resource.kubernetes.io/numaNode"
LIST_GATE = parse_feature_gates("DRAListTypeAttributes=true")
FM_GATE = parse_feature_gates("FabricManagerPartitioning=true")
FM_KEYS = {"gpuModuleID", "partition1", "partition2", "partition4", "partition8"}


def node_from_spec(tmp_path: Any, text: str) -> Node:
    spec = tmp_path / "node.yaml"
    spec.write_text(text)
    return load_node(InventoryInputs(node_name="node-a", node_spec=str(spec)))


def make_node(*gpus: str, layout: str | None = None) -> Node:
    return load_node(InventoryInputs(node_name="node-a", gpus=gpus, mig_layout=layout))


def devices(node: Node, mig_mode: str = "static", gates: FeatureGates | None = None) -> list[dict[str, Any]]:
    """Every published device, each slice validated against the Kubernetes 1.36 schema."""
    opts = SliceOptions(mig_mode=mig_mode, feature_gates=gates or FeatureGates())  # type: ignore[arg-type]
    specs = build_slice_specs(node, opts)
    for obj in slice_objects(node, opts, specs, node_uid="8d1f0c4e-0000-4000-8000-000000000001"):
        kubernetes_validate.validate(obj, "1.36.0", strict=True)
    return [d for spec in specs for d in spec_devices(spec)]


# ---------------------------------------------------------------------------------------------
# resource.kubernetes.io/numaNode


@pytest.mark.parametrize("mig_mode", ["static", "dynamic"])
def test_numa_node_is_an_int_by_default_and_a_one_element_list_with_the_list_gate(tmp_path, mig_mode):
    """Follows kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/numa.go (configuredNUMAAttributeForm)
    and deviceinfo.go / mig.go, main @ 0545e9e (after v0.4.1; PR #1165, #1261), with the helper
    kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/deviceattribute/numa_linux.go @ e467a91:
    full GPUs and MIG devices carry `resource.kubernetes.io/numaNode` as `int` unless the driver's
    DRAListTypeAttributes gate is on, then as `ints` (the physical node first; one element without SLIT data).
    A GPU without NUMA affinity gets neither form."""
    node = node_from_spec(
        tmp_path,
        "numaNodes: 2\n"
        "gpus:\n"
        "  - {model: h100-80gb, count: 2, numa: [0, 1], migEnabled: true, migDevices: {3g.40gb: 2}}\n"
        "  - {model: h100-80gb, count: 1, numa: -1}\n",
    )
    plain = devices(node, mig_mode)
    listed = devices(node, mig_mode, LIST_GATE)
    assert [d["name"] for d in plain] == [d["name"] for d in listed]
    assert {d["attributes"]["type"]["string"] for d in plain} == {"gpu", "mig"}
    for scalar, as_list in zip(plain, listed, strict=True):
        gpu = node.gpus[int(scalar["name"].split("-")[1])]
        if gpu.numa is None:
            assert NUMA not in scalar["attributes"] and NUMA not in as_list["attributes"], scalar["name"]
            continue
        assert scalar["attributes"][NUMA] == {"int": gpu.numa}
        assert as_list["attributes"][NUMA] == {"ints": [gpu.numa]}
        rest = {k: v for k, v in as_list["attributes"].items() if k != NUMA}
        assert rest == {k: v for k, v in scalar["attributes"].items() if k != NUMA}


def test_numa_helper_refuses_no_affinity():
    assert numa_node_attribute(None, FeatureGates()) is None
    assert numa_node_attribute(-1, LIST_GATE) is None
    assert numa_node_attribute(3, FeatureGates()) == {"int": 3}
    assert numa_node_attribute(3, LIST_GATE) == {"ints": [3]}


# ---------------------------------------------------------------------------------------------
# Attributes NVIDIA no longer publishes


@pytest.mark.parametrize("mig_mode", ["static", "dynamic"])
@pytest.mark.parametrize(
    "gates", [FeatureGates(), parse_feature_gates("DRAListTypeAttributes=true,FabricManagerPartitioning=true")]
)
def test_no_device_carries_index_minor_parent_index_or_the_old_numa(mig_mode, gates):
    """Follows kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/deviceinfo.go and mig.go from v25.8.0
    through main @ 88b3014: `index`, `minor`, `parentIndex` and `pcieBusID` (published by v25.3) are gone, and the
    driver-domain `numa` int (VFIO devices up to v0.4.1) gave way to `resource.kubernetes.io/numaNode`."""
    node = make_node("8xh100-80gb", layout="all-balanced")
    published = devices(node, mig_mode, gates)
    assert published
    for device in published:
        assert not {"index", "minor", "parentIndex", "pcieBusID", "numa"} & set(device["attributes"]), device["name"]


# ---------------------------------------------------------------------------------------------
# Fabric Manager partitions


def test_partition_ids_follow_nvidias_documented_module_1():
    """Follows kubernetes-sigs/dra-driver-nvidia-gpu site/content/docs/guides/gpu-allocation/
    fabric-manager-partitioning.md, main @ 617fbb4 (v0.5.0 docs, PR #1281): module 1 shows `partition1: 8`,
    `partition2: 4`, `partition4: 2`, `partition8: 1`."""
    assert {size: partition_id(1, size) for size in (1, 2, 4, 8)} == {1: 8, 2: 4, 4: 2, 8: 1}
    assert [partition_id(m, 1) for m in range(1, 9)] == list(range(8, 16))
    with pytest.raises(ValueError, match="no 3-GPU"):
        partition_id(1, 3)
    with pytest.raises(ValueError, match="module 9"):
        partition_id(9, 1)


@pytest.mark.parametrize("mig_mode", ["static", "dynamic"])
def test_fabric_manager_attributes_on_full_gpus_only_with_the_gate(tmp_path, mig_mode):
    """Follows kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/deviceinfo.go
    (GpuInfo.Attributes, addFabricManagerAttributes), main @ 88b3014 (after PR #1273: FabricManagerPartitioning
    extended to full GPUs): with the gate, every full GPU of an NVSwitch baseboard carries `gpuModuleID` (int, the
    1-based NVML module ID) and `partition1/2/4/8` (int partition IDs); MIG devices (mig.go CommonAttributesMig @
    88b3014) never do, and without the gate nothing changes."""
    node = node_from_spec(
        tmp_path,
        "gpus:\n"
        "  - {model: h100-80gb, count: 4}\n"
        "  - {model: h100-80gb, count: 4, migEnabled: true, migDevices: {3g.40gb: 2}}\n",
    )
    plain = devices(node, mig_mode)
    gated = devices(node, mig_mode, FM_GATE)
    assert all(not FM_KEYS & set(d["attributes"]) for d in plain)
    kinds = {d["attributes"]["type"]["string"] for d in gated}
    assert kinds == {"gpu", "mig"}
    for device in gated:
        attrs = device["attributes"]
        if attrs["type"]["string"] == "mig":
            assert not FM_KEYS & set(attrs), device["name"]
            continue
        module = int(device["name"].removeprefix("gpu-")) + 1
        assert attrs["gpuModuleID"] == {"int": module}
        assert {s: attrs[f"partition{s}"] for s in (1, 2, 4, 8)} == {
            s: {"int": partition_id(module, s)} for s in (1, 2, 4, 8)
        }
    full = [d for d in gated if d["attributes"]["type"]["string"] == "gpu"]
    assert len(full) == (4 if mig_mode == "static" else 8)
    assert full[0]["attributes"]["partition8"] == {"int": 1}


def test_each_partition_id_names_exactly_one_complete_partition():
    """A claim for N GPUs with `matchAttribute: gpu.nvidia.com/partitionN` gets a whole FM partition only if
    the GPUs sharing a partitionN value are exactly N (kubernetes-sigs/dra-driver-nvidia-gpu
    fabric-manager-partitioning.md @ 617fbb4: "Combined with count: 2, this selects all GPUs in that reported
    two-GPU partition"); partitions of one size are disjoint and nest in the larger ones."""
    node = make_node("8xb200")
    full = devices(node, gates=FM_GATE)
    for size in (1, 2, 4, 8):
        groups: dict[int, set[int]] = {}
        for device in full:
            groups.setdefault(device["attributes"][f"partition{size}"]["int"], set()).add(
                device["attributes"]["gpuModuleID"]["int"]
            )
        assert len(groups) == 8 // size
        assert all(len(members) == size for members in groups.values())
        if size < 8:
            bigger = {
                d["attributes"]["gpuModuleID"]["int"]: d["attributes"][f"partition{size * 2}"]["int"] for d in full
            }
            assert all(len({bigger[m] for m in members}) == 1 for members in groups.values())
    ids = [d["attributes"][f"partition{s}"]["int"] for d in full for s in (1, 2, 4, 8)]
    assert len(set(ids)) == 15


@pytest.mark.parametrize(
    ("gpus", "partitioned"),
    [
        (("8xh100-80gb",), True),
        (("8xa100-80gb",), True),
        (("8xh200",), True),
        (("4xh100-80gb",), False),  # HGX 4-GPU boards link GPUs directly, no NVSwitch
        (("8xl40s",), False),  # PCIe cards
        (("8xh100-94gb",), False),  # H100 NVL: PCIe cards with NVLink bridges
        (("8xv100-32gb",), False),  # SXM2 hybrid cube mesh, no NVSwitch
        (("4xh100-80gb", "4xh200"), False),  # not one baseboard
    ],
)
def test_only_an_nvswitch_baseboard_gets_partitions(gpus, partitioned):
    """kubernetes-sigs/dra-driver-nvidia-gpu fabric-manager-partitioning.md @ 617fbb4: "On nodes where the driver does
    not detect an NVSwitch or an NVLink 5 switch-managed fabric, it skips Fabric Manager initialization"."""
    node = make_node(*gpus)
    assert has_fabric_manager_partitions(node) is partitioned
    published = devices(node, gates=FM_GATE)
    assert all(("gpuModuleID" in d["attributes"]) is partitioned for d in published)
    assert fabric_manager_attributes(node, node.gpus[0], FeatureGates()) == {}


def test_a_node_on_a_multi_node_nvlink_fabric_gets_no_partitions(tmp_path):
    """NVL72 trays are partitioned by the rack's switch trays (ComputeDomains), not by a Fabric Manager on the
    node, and hold four GPUs."""
    node = node_from_spec(
        tmp_path,
        "gpus:\n  - {model: gb200, count: 4}\n"
        "fabric: {clusterUUID: 0f6c2b1e-6a1b-4a53-9d8e-3b0f9a2c1d11, cliqueID: 1}\n",
    )
    assert not has_fabric_manager_partitions(node)
    assert all("gpuModuleID" not in d["attributes"] for d in devices(node, gates=FM_GATE))


def test_dynamic_mig_whole_gpu_with_partitions_stays_within_the_attribute_limit():
    """A full GPU with counters, seven capacities, the common attributes, the list-form NUMA node and five
    Fabric Manager attributes still fits the API's 32 attributes and capacities per device."""
    gates = parse_feature_gates("FabricManagerPartitioning=true,DRAListTypeAttributes=true")
    for device in devices(make_node("8xb200"), "dynamic", gates):
        assert len(device["attributes"]) + len(device["capacity"]) <= 32
        if device["attributes"]["type"]["string"] == "gpu":
            assert set(device["attributes"]) >= FM_KEYS


def test_fabric_manager_partitioning_needs_no_passthrough_support():
    """kubernetes-sigs/dra-driver-nvidia-gpu PR #1273 dropped the pkg/featuregates/featuregates.go rule that
    FabricManagerPartitioning requires PassthroughSupport (full GPUs are partitioned without VFIO), as
    site/content/docs/guides/gpu-allocation/fabric-manager-partitioning.md @ 617fbb4 states
    ("`FabricManagerPartitioning` does not require `PassthroughSupport`"), so the gate alone passes NVIDIA's
    start-up validation and changes the full GPUs' attributes."""
    validate_feature_gates(FM_GATE)
    validate_feature_gates(parse_feature_gates("FabricManagerPartitioning=true,DynamicMIG=true"))
