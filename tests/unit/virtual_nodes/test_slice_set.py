"""One virtual node's slices: compared without generation and order; rewritten only when they differ."""

from __future__ import annotations

import copy
from typing import Any

from fakegpu.dra.resource_slices import SliceOptions
from fakegpu.sharing.expansion import build_inventory
from fakegpu.sharing.inputs import InventoryInputs, load_config, load_node
from fakegpu.sharing.labels import gfd_labels
from fakegpu.virtual_nodes.pools import VirtualNode
from fakegpu.virtual_nodes.slice_set import signatures, slice_writes, stored_signature

UID = "node-uid-1"


def virtual(gpus: str = "2xh100-80gb", name: str = "vn-0000") -> VirtualNode:
    inputs = InventoryInputs(node_name=name, gpus=(gpus,))
    node, config = load_node(inputs), load_config(inputs)
    return VirtualNode(name, "default", build_inventory(node, config), gfd_labels(node, config), prefix="vn-")


def server_copies(objects: list[dict[str, Any]], first_rv: int = 10) -> list[dict[str, Any]]:
    """The objects as the server stores them: named, with a resourceVersion."""
    out = []
    for i, obj in enumerate(objects):
        stored = copy.deepcopy(obj)
        meta = stored["metadata"]
        meta["name"] = meta.pop("generateName", meta.get("name", "")) + f"x{i}"
        meta["resourceVersion"] = str(first_rv + i)
        out.append(stored)
    return out


def test_first_publish_creates_owned_labelled_slices():
    writes = slice_writes(virtual(), SliceOptions(), [], UID)
    assert not writes.replace and not writes.delete
    (obj,) = writes.create
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "vn-0000", "uid": UID, "controller": True}
    ]
    assert obj["metadata"]["labels"] == {"fakegpu.io/virtual-node": "true", "fakegpu.io/virtual-node-prefix": "vn"}
    assert obj["spec"]["pool"] == {"name": "vn-0000", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in obj["spec"]["devices"]] == ["gpu-0", "gpu-1"]


def test_published_slices_need_no_write_in_any_order():
    options = SliceOptions(mig_mode="dynamic", server_minor=35)
    node = virtual("2xa100-40gb")
    stored = server_copies(slice_writes(node, options, [], UID).create)
    assert len(stored) == 3  # one counter slice and one device slice per GPU
    assert slice_writes(node, options, stored, UID).empty
    assert slice_writes(node, options, list(reversed(stored)), UID).empty


def test_a_missing_slice_rewrites_the_pool_with_a_new_generation_and_the_same_names():
    options = SliceOptions(mig_mode="dynamic", server_minor=35)
    node = virtual("2xa100-40gb")
    stored = server_copies(slice_writes(node, options, [], UID).create)
    writes = slice_writes(node, options, stored[:2], UID)
    assert [o["metadata"]["name"] for o in writes.replace] == [s["metadata"]["name"] for s in stored[:2]]
    assert [o["metadata"]["resourceVersion"] for o in writes.replace] == ["10", "11"]
    assert len(writes.create) == 1 and not writes.delete
    assert {o["spec"]["pool"]["generation"] for o in writes.replace + writes.create} == {2}


def test_extra_slices_are_deleted():
    node = virtual()
    stored = server_copies(slice_writes(node, SliceOptions(), [], UID).create)
    extra = copy.deepcopy(stored[0])
    extra["metadata"]["name"] = "zz-extra"
    writes = slice_writes(node, SliceOptions(), [*stored, extra], UID)
    assert writes.delete == ["zz-extra"] and len(writes.replace) == 1 and not writes.create


def test_a_slice_owned_by_an_older_node_or_unlabelled_is_rewritten():
    node = virtual()
    stored = server_copies(slice_writes(node, SliceOptions(), [], UID).create)
    assert not slice_writes(node, SliceOptions(), stored, "another-uid").empty
    unlabelled = copy.deepcopy(stored)
    del unlabelled[0]["metadata"]["labels"]
    assert not slice_writes(node, SliceOptions(), unlabelled, UID).empty


def dropped_counters(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(objects)
    for obj in out:
        for device in obj["spec"].get("devices", []):
            device.pop("consumesCounters", None)
    return out


def test_what_the_server_kept_of_the_last_write_is_not_rewritten():
    """A server with a feature gate off drops fields: the slices never equal the plan, and must not loop."""
    options = SliceOptions(mig_mode="dynamic", server_minor=36)
    node = virtual("1xh100-80gb")
    stored = dropped_counters(server_copies(slice_writes(node, options, [], UID).create))
    # The plan digest on every slice says they were written for this very plan.
    assert slice_writes(node, options, stored, UID).empty
    # Without it, only this process's memory of the last write does.
    anonymous = copy.deepcopy(stored)
    for obj in anonymous:
        del obj["metadata"]["annotations"]
    assert not slice_writes(node, options, anonymous, UID).empty
    assert slice_writes(node, options, anonymous, UID, accepted=signatures(anonymous)).empty


def test_the_plan_digest_does_not_hide_a_missing_slice_or_a_new_owner():
    options = SliceOptions(mig_mode="dynamic", server_minor=35)
    node = virtual("2xa100-40gb")
    stored = dropped_counters(server_copies(slice_writes(node, options, [], UID).create))
    assert slice_writes(node, options, stored, UID).empty
    assert not slice_writes(node, options, stored[1:], UID).empty
    assert not slice_writes(node, options, stored, "a-newer-node-uid").empty
    other_plan = virtual("2xa100-80gb")
    assert not slice_writes(other_plan, options, stored, UID).empty


def test_signature_ignores_generation_and_taint_times():
    node = virtual()
    (obj,) = server_copies(slice_writes(node, SliceOptions(), [], UID).create)
    later = copy.deepcopy(obj)
    later["spec"]["pool"]["generation"] = 9
    later["spec"]["devices"][0]["taints"] = [{"key": "k", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}]
    obj["spec"]["devices"][0]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    assert stored_signature(obj) == stored_signature(later)


def test_a_slice_with_another_pool_name_is_deleted_and_created_not_updated():
    """spec.pool.name (like driver and nodeName) is immutable: an update would be refused forever."""
    node = virtual("2xa100-40gb")
    options = SliceOptions(mig_mode="dynamic", server_minor=35)
    stored = server_copies(slice_writes(node, options, [], UID).create)
    stored[1]["spec"]["pool"]["name"] = "an-old-pool"  # published by something else, or an older version
    del stored[1]["metadata"]["annotations"]
    writes = slice_writes(node, options, stored, UID)
    assert stored[1]["metadata"]["name"] in writes.delete
    assert all(o["metadata"]["name"] != stored[1]["metadata"]["name"] for o in writes.replace)
    assert [o["metadata"]["name"] for o in writes.replace] == [
        stored[0]["metadata"]["name"],
        stored[2]["metadata"]["name"],
    ]
    assert len(writes.create) == 1 and "generateName" in writes.create[0]["metadata"]
    assert {o["spec"]["pool"]["name"] for o in writes.replace + writes.create} == {"vn-0000"}
