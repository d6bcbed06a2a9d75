"""The Node of a virtual node, and the patches that bring an existing Node in line (and only those)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.expansion import build_inventory
from fakegpu.sharing.inputs import InventoryInputs, load_config, load_node
from fakegpu.sharing.labels import gfd_labels
from fakegpu.virtual_nodes.node_manifest import (
    KWOK_TAINT,
    MANAGED_ANNOTATION,
    PRIOR_ANNOTATION,
    NodeChanges,
    NodeShape,
    desired_node,
    is_kwok,
    is_ours,
    new_node,
    node_changes,
    release_changes,
)
from fakegpu.virtual_nodes.pools import GPU_MODES, GpuMode, VirtualNode


def virtual(name: str = "vn-0000", gpus: str = "8xh100-80gb", mode: GpuMode = "device-plugin", **kw) -> VirtualNode:
    inputs = InventoryInputs(node_name=name, gpus=(gpus,), **kw)
    node, config = load_node(inputs), load_config(inputs)
    inventory = build_inventory(node, config)
    return VirtualNode(name, "default", inventory, gfd_labels(node, config), prefix="vn-", mode=mode)


def stored(obj: dict[str, Any]) -> dict[str, Any]:
    """What an API server returns for a created object (server metadata added)."""
    out = copy.deepcopy(obj)
    out["metadata"].update(uid="u-1", resourceVersion="7", creationTimestamp="2026-01-01T00:00:00Z")
    return out


def test_new_node_is_a_kwok_node_with_gpu_capacity_and_labels():
    desired = desired_node(virtual(), NodeShape())
    node = new_node(desired)
    meta = node["metadata"]
    assert meta["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert meta["annotations"]["node.alpha.kubernetes.io/ttl"] == "0"
    assert meta["annotations"]["fakegpu.io/virtual-node-origin"] == "created"
    assert meta["labels"]["type"] == "kwok"
    assert meta["labels"]["kubernetes.io/hostname"] == "vn-0000"
    assert meta["labels"]["node-role.kubernetes.io/agent"] == ""
    assert meta["labels"]["fakegpu.io/virtual-node"] == "true"
    assert meta["labels"]["fakegpu.io/virtual-node-prefix"] == "vn"
    assert meta["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node["spec"]["taints"] == [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
    assert node["status"]["capacity"] == {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"}
    assert node["status"]["allocatable"] == node["status"]["capacity"]
    assert is_kwok(node) and is_ours(node)


def test_capacity_follows_the_inventory_with_sharing_and_health(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
    )
    spec = tmp_path / "node.yaml"
    spec.write_text("gpus:\n- model: a100-40gb\n  count: 1\n- model: a100-40gb\n  count: 1\n  xid: 79\n")
    inputs = InventoryInputs(node_name="vn-0000", node_spec=str(spec), config_file=str(config))
    node, cfg = load_node(inputs), load_config(inputs)
    desired = desired_node(VirtualNode("vn-0000", "p", build_inventory(node, cfg), gfd_labels(node, cfg)), NodeShape())
    assert desired.capacity["nvidia.com/gpu"] == "8"  # 2 GPUs x 4 replicas
    assert desired.allocatable["nvidia.com/gpu"] == "4"  # the GPU that fell off the bus is not allocatable


def test_mig_resources_are_listed_per_profile():
    desired = desired_node(
        virtual(gpus="2xa100-40gb", mig_layout="all-1g.5gb", cli_flags={"mig_strategy": "mixed"}), NodeShape()
    )
    assert desired.capacity["nvidia.com/mig-1g.5gb"] == "14"
    assert "nvidia.com/mig-1g.5gb.count" in desired.labels


def test_the_node_as_created_needs_no_patch():
    desired = desired_node(virtual(), NodeShape())
    assert node_changes(stored(new_node(desired)), desired).empty


def test_quantities_compare_by_value_not_by_text():
    desired = desired_node(virtual(), NodeShape(memory="256Gi"))
    node = stored(new_node(desired))
    node["status"]["capacity"]["memory"] = "262144Mi"  # the same amount, written differently
    node["status"]["allocatable"]["nvidia.com/gpu"] = 8  # an int on the wire
    assert node_changes(node, desired).empty


def test_changed_labels_and_capacity_are_patched_and_nothing_else():
    desired = desired_node(virtual(), NodeShape())
    node = stored(new_node(desired))
    node["metadata"]["labels"]["nvidia.com/gpu.count"] = "7"
    node["metadata"]["labels"]["someone.else/label"] = "kept"
    node["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"] = "15"  # the TTL controller's business
    node["spec"]["taints"].append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
    node["status"]["allocatable"]["nvidia.com/gpu"] = "6"
    node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    changes = node_changes(node, desired)
    assert changes.node == {"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}}
    assert changes.status == {"status": {"allocatable": {"nvidia.com/gpu": "8"}}}


def test_a_missing_taint_is_added_next_to_the_others_with_a_resource_version():
    desired = desired_node(virtual(), NodeShape())
    node = stored(new_node(desired))
    other = {"key": "example.com/maintenance", "effect": "NoExecute"}
    node["spec"]["taints"] = [other, {"key": "kwok.x-k8s.io/node", "value": "other", "effect": "NoSchedule"}]
    changes = node_changes(node, desired)
    assert changes.node == {"metadata": {"resourceVersion": "7"}, "spec": {"taints": [other, KWOK_TAINT]}}


def test_adopting_a_kwok_node_marks_it_adopted_and_keeps_its_own_labels():
    desired = desired_node(virtual(), NodeShape())
    kwok_node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "vn-0000",
            "uid": "u-9",
            "resourceVersion": "3",
            "labels": {"type": "kwok", "team": "ml"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": [KWOK_TAINT]},
    }
    assert is_kwok(kwok_node) and not is_ours(kwok_node)
    changes = node_changes(kwok_node, desired)
    assert changes.node is not None and changes.status is not None
    labels = changes.node["metadata"]["labels"]
    assert "team" not in labels and labels["fakegpu.io/virtual-node"] == "true"
    assert changes.node["metadata"]["annotations"]["fakegpu.io/virtual-node-origin"] == "adopted"
    assert "spec" not in changes.node  # the taint was there
    assert changes.status["status"]["capacity"]["nvidia.com/gpu"] == "8"


def test_labels_and_resources_of_an_earlier_plan_are_removed():
    before = desired_node(
        virtual(gpus="2xa100-40gb", mig_layout="all-1g.5gb", cli_flags={"mig_strategy": "mixed"}), NodeShape()
    )
    after = desired_node(virtual(gpus="2xa100-40gb"), NodeShape())
    node = stored(new_node(before))
    node["metadata"]["labels"]["someone.else/label"] = "kept"
    changes = node_changes(node, after)
    assert changes.node is not None and changes.status is not None
    removed = {k for k, v in changes.node["metadata"]["labels"].items() if v is None}
    assert "nvidia.com/mig-1g.5gb.count" in removed and "someone.else/label" not in removed
    assert changes.status["status"]["capacity"]["nvidia.com/mig-1g.5gb"] is None
    assert json.loads(changes.node["metadata"]["annotations"][MANAGED_ANNOTATION])["resources"] == [
        "cpu",
        "memory",
        "nvidia.com/gpu",
        "pods",
    ]


def test_an_unreadable_record_counts_as_none():
    desired = desired_node(virtual(), NodeShape())
    node = stored(new_node(desired))
    node["metadata"]["annotations"][MANAGED_ANNOTATION] = "{not json"
    changes = node_changes(node, desired)
    assert changes.node == {"metadata": {"annotations": {MANAGED_ANNOTATION: desired.managed}}}
    assert changes.status is None


def test_release_takes_back_gpu_labels_and_resources_only():
    desired = desired_node(virtual(), NodeShape())
    node = stored(new_node(desired))
    node["metadata"]["labels"]["team"] = "ml"
    changes = release_changes(node)
    assert changes.node is not None and changes.status is not None
    labels = changes.node["metadata"]["labels"]
    assert labels["fakegpu.io/virtual-node"] is None and labels["nvidia.com/gpu.product"] is None
    assert "kubernetes.io/hostname" not in labels and "type" not in labels and "team" not in labels
    assert set(changes.node["metadata"]["annotations"]) == {
        "fakegpu.io/virtual-node-managed",
        "fakegpu.io/virtual-node-origin",
    }
    assert changes.status == {"status": {"capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}}}


@pytest.mark.parametrize(
    ("field", "value"),
    [("cpu", "lots"), ("memory", "0"), ("pods", "-5"), ("memory", "12XB"), ("pods", "1.5"), ("pods", "100m")],
)
def test_bad_node_shape_names_the_flag(field, value):
    with pytest.raises(SpecError) as info:
        NodeShape(**{field: value})
    assert info.value.source == f"--node-{field}"


def apply(node: dict[str, Any], changes: NodeChanges) -> dict[str, Any]:
    """``node`` after the two merge patches, as the API server would store it."""

    def merge(target: Any, patch: Any) -> Any:
        if not isinstance(patch, dict):
            return copy.deepcopy(patch)
        out = dict(target) if isinstance(target, dict) else {}
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = merge(out.get(key), value)
        return out

    out = copy.deepcopy(node)
    for patch in (changes.node, changes.status):
        if patch is not None:
            plain = copy.deepcopy(patch)
            plain.get("metadata", {}).pop("resourceVersion", None)
            out = merge(out, plain)
    return dict(out)


def someones_kwok_node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "vn-0000",
            "uid": "u-9",
            "resourceVersion": "3",
            "labels": {
                "type": "kwok",
                "team": "ml",
                "nvidia.com/gpu.product": "Custom-GPU",
                "kubernetes.io/os": "linux",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "other", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "20", "example.com/fpga": "1"}},
    }


def test_adopting_records_what_it_changes_and_release_puts_it_back():
    original = someones_kwok_node()
    desired = desired_node(virtual(), NodeShape())
    adopted = apply(original, node_changes(original, desired))
    assert node_changes(adopted, desired).empty, "adopting again writes nothing"
    prior = json.loads(adopted["metadata"]["annotations"][PRIOR_ANNOTATION])
    assert prior["labels"]["nvidia.com/gpu.product"] == "Custom-GPU"
    assert prior["labels"]["fakegpu.io/virtual-node"] is None
    assert "kubernetes.io/os" not in prior["labels"], "a label that already had the value was not changed"
    assert prior["capacity"] == {"cpu": "4", "memory": "8Gi", "pods": "20", "nvidia.com/gpu": None}
    assert prior["allocatable"] == {"cpu": None, "memory": None, "pods": None, "nvidia.com/gpu": None}
    assert prior["taints"] == original["spec"]["taints"]
    assert adopted["status"]["capacity"]["cpu"] == "32"
    assert adopted["spec"]["taints"] == [KWOK_TAINT]

    released = apply(adopted, release_changes(adopted))
    assert released["metadata"]["labels"] == original["metadata"]["labels"]
    assert released["metadata"]["annotations"] == original["metadata"]["annotations"]
    assert released["status"]["capacity"] == original["status"]["capacity"]
    assert released["status"].get("allocatable", {}) == {}
    assert released["spec"] == original["spec"]


def test_the_release_patch_of_a_changed_taint_list_carries_the_resource_version():
    original = someones_kwok_node()
    adopted = apply(original, node_changes(original, desired_node(virtual(), NodeShape())))
    adopted["metadata"]["resourceVersion"] = "9"
    changes = release_changes(adopted)
    assert changes.node is not None and changes.node["metadata"]["resourceVersion"] == "9"


def test_a_later_plan_records_its_new_keys_and_gives_back_the_ones_it_drops():
    original = someones_kwok_node()
    original["metadata"]["labels"]["nvidia.com/mig-1g.5gb.count"] = "theirs"
    mig = desired_node(
        virtual(gpus="2xa100-40gb", mig_layout="all-1g.5gb", cli_flags={"mig_strategy": "mixed"}), NodeShape()
    )
    plain = desired_node(virtual(gpus="2xa100-40gb"), NodeShape())
    first = apply(original, node_changes(original, plain))
    assert first["metadata"]["labels"]["nvidia.com/mig-1g.5gb.count"] == "theirs", "not the plan's: untouched"
    second = apply(first, node_changes(first, mig))
    assert second["metadata"]["labels"]["nvidia.com/mig-1g.5gb.count"] == "14"
    assert second["status"]["capacity"]["nvidia.com/mig-1g.5gb"] == "14"
    third = apply(second, node_changes(second, plain))
    assert third["metadata"]["labels"]["nvidia.com/mig-1g.5gb.count"] == "theirs", "given back when dropped"
    assert "nvidia.com/mig-1g.5gb" not in third["status"]["capacity"]
    assert node_changes(third, plain).empty
    released = apply(third, release_changes(third))
    assert released["metadata"]["labels"] == original["metadata"]["labels"]
    assert released["status"]["capacity"] == original["status"]["capacity"]


def test_a_node_adopted_before_the_record_existed_is_handed_back_the_old_way():
    desired = desired_node(virtual(), NodeShape())
    node = stored(new_node(desired))
    node["metadata"]["annotations"]["fakegpu.io/virtual-node-origin"] = "adopted"
    assert node_changes(node, desired).empty, "no record is started for it"
    changes = release_changes(node)
    assert changes.node is not None and changes.status is not None
    assert changes.node["metadata"]["labels"]["fakegpu.io/virtual-node-prefix"] is None
    assert changes.status["status"]["capacity"] == {"nvidia.com/gpu": None}


def test_a_created_node_keeps_no_record():
    desired = desired_node(virtual(), NodeShape())
    node = stored(new_node(desired))
    node["metadata"]["labels"]["nvidia.com/gpu.count"] = "1"
    changes = node_changes(node, desired)
    assert changes.node == {"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}}


BASE = {"cpu": "32", "memory": "256Gi", "pods": "110"}


@pytest.mark.parametrize(
    ("mode", "gpu_capacity"), [("device-plugin", {"nvidia.com/gpu": "8"}), ("dra", {}), ("dra-extended", {})]
)
def test_only_the_device_plugin_mode_advertises_gpus_as_capacity(mode, gpu_capacity):
    desired = desired_node(virtual(mode=mode), NodeShape())
    node = new_node(desired)
    assert node["status"]["capacity"] == {**BASE, **gpu_capacity}
    assert node["status"]["allocatable"] == {**BASE, **gpu_capacity}
    labels = node["metadata"]["labels"]
    assert labels["fakegpu.io/virtual-node-gpu-mode"] == mode
    # GFD labels in every mode: rehearsal pods select nodes by them whichever way they ask for GPUs.
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3" and labels["nvidia.com/gpu.count"] == "8"
    assert node_changes(stored(node), desired).empty


@pytest.mark.parametrize("mode", ["dra", "dra-extended"])
def test_dra_modes_advertise_no_mig_or_shared_resources_either(mode, tmp_path):
    mig = desired_node(
        virtual(gpus="2xa100-40gb", mode=mode, mig_layout="all-1g.5gb", cli_flags={"mig_strategy": "mixed"}),
        NodeShape(),
    )
    assert dict(mig.capacity) == BASE and "nvidia.com/mig-1g.5gb.count" in mig.labels
    assert {"nvidia.com/gpu", "nvidia.com/mig-1g.5gb"} <= mig.absent


def switch(node: dict[str, Any], desired) -> dict[str, Any]:
    """One run: ``node`` after the run's patches; the run after it must have nothing left to write."""
    after = apply(node, node_changes(node, desired))
    assert node_changes(after, desired).empty, "a second run in the same mode writes nothing"
    return after


@pytest.mark.parametrize("target", ["dra", "dra-extended"])
def test_switching_a_created_node_between_modes_converges_in_place(target):
    plugin = desired_node(virtual(), NodeShape())
    dra = desired_node(virtual(mode=target), NodeShape())
    node = stored(new_node(plugin))
    changes = node_changes(node, dra)
    assert changes.status == {"status": {"capacity": {"nvidia.com/gpu": None}, "allocatable": {"nvidia.com/gpu": None}}}
    assert changes.node is not None
    assert changes.node["metadata"]["labels"] == {"fakegpu.io/virtual-node-gpu-mode": target}
    as_dra = switch(node, dra)
    assert as_dra["status"]["capacity"] == BASE
    assert json.loads(as_dra["metadata"]["annotations"][MANAGED_ANNOTATION])["resources"] == sorted(BASE)
    back = switch(as_dra, plugin)
    assert back["status"]["capacity"] == back["status"]["allocatable"] == {**BASE, "nvidia.com/gpu": "8"}
    assert back["metadata"]["labels"]["fakegpu.io/virtual-node-gpu-mode"] == "device-plugin"
    assert back["metadata"] == stored(new_node(plugin))["metadata"]


def test_an_adopted_nodes_own_gpu_capacity_goes_in_a_dra_mode_and_comes_back_on_delete():
    original = someones_kwok_node()
    original["status"]["capacity"]["nvidia.com/gpu"] = "4"  # someone else's device plugin resource
    dra = desired_node(virtual(mode="dra"), NodeShape())
    adopted = switch(original, dra)
    assert "nvidia.com/gpu" not in adopted["status"]["capacity"], "never a GPU both as capacity and as a device"
    assert json.loads(adopted["metadata"]["annotations"][PRIOR_ANNOTATION])["capacity"]["nvidia.com/gpu"] == "4"
    plugin = switch(adopted, desired_node(virtual(), NodeShape()))
    assert plugin["status"]["capacity"]["nvidia.com/gpu"] == "8"
    again = switch(plugin, dra)
    assert "nvidia.com/gpu" not in again["status"]["capacity"]
    released = apply(again, release_changes(again))
    assert released["status"]["capacity"] == original["status"]["capacity"]
    assert released["metadata"]["labels"] == original["metadata"]["labels"]


def test_every_mode_has_its_label_value():
    values = {desired_node(virtual(mode=m), NodeShape()).labels["fakegpu.io/virtual-node-gpu-mode"] for m in GPU_MODES}
    assert values == set(GPU_MODES) == {"device-plugin", "dra", "dra-extended"}
