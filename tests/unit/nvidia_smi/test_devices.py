"""The device description (from the node, to and from devices.json) and the visible devices."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fakegpu.dra.device_map import published_devices
from fakegpu.sharing.gpu_policies import GpuPolicies
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.telemetry.nvidia_smi.devices import (
    VOLUME_MOUNTS_ROOT,
    SmiNode,
    expand_volume_mounts,
    filter_ids,
    from_inventory,
    from_json,
    from_node,
    select,
    smi_bus_id,
    to_json,
    visible_devices,
)
from fakegpu.telemetry.nvidia_smi.gpu_health import HEALTHY
from tests.unit.nvidia_smi.helpers import mixed, node, smi_node


def shown(node: SmiNode, visible: str | None) -> list[tuple[int, list[int]]]:
    """(node GPU index, [node MIG indices]) per visible GPU, in the container's order."""
    return [(v.gpu.index, [m.index for m in v.migs]) for v in select(node, visible).gpus]


def test_catalog_numbers_and_nvidia_smi_forms():
    node = smi_node("2xh100-80gb", "all-1g.10gb")
    gpu = node.gpus[1]
    assert (gpu.name, gpu.memory_mib, gpu.compute_cap, gpu.architecture, gpu.brand) == (
        "NVIDIA H100 80GB HBM3",
        81559,
        "9.0",
        "Hopper",
        "NVIDIA",
    )
    assert gpu.bus_id == "00000000:28:00.0"
    assert gpu.mig_enabled and len(gpu.migs) == 7
    mig = gpu.migs[0]
    assert (mig.profile, mig.gi_id, mig.ci_id, mig.memory_mib, mig.bar1_mib) == ("1g.10gb", 7, 0, 9984, 16383)
    assert (node.driver_version, node.cuda_version) == ("570.172.08", "12.8")
    assert smi_node("1xt4").gpus[0].brand == "Tesla"


def test_bus_id_has_an_eight_digit_domain_and_upper_case_hex():
    assert smi_bus_id("0000:b6:00.0") == "00000000:B6:00.0"
    assert smi_bus_id("0001:0f:00.0") == "00000001:0F:00.0"


def test_json_round_trip_is_lossless_and_plain_json():
    node = mixed()
    doc = json.loads(json.dumps(to_json(node)))
    assert doc["gpus"][0]["migDevices"][1]["profile"] == "2g.20gb"
    assert from_json(doc) == node


def test_a_version_1_devices_json_reads_as_healthy_gpus():
    """Version 2 added each GPU's ``health``; a file a version-1 daemon wrote still renders, fault-free (and
    without clocks, which version 1 did not carry)."""
    doc = to_json(mixed())
    assert doc["version"] == 2 and all("health" in g for g in doc["gpus"])
    doc["version"] = 1
    for g in doc["gpus"]:
        del g["health"]
    old = mixed()
    assert from_json(doc) == dataclasses.replace(
        old, gpus=tuple(dataclasses.replace(g, health=HEALTHY) for g in old.gpus)
    )


def test_topology_and_mig_profiles_come_from_the_node_and_survive_devices_json():
    """``topo -m`` and ``mig -lgip`` read them: NUMA node, NVLink peers and their link count, the board's
    GPU-instance profiles with the IDs nvidia-smi shows."""
    node = mixed()
    gpu = node.gpus[0]
    assert (gpu.numa, gpu.nvlink_peers, gpu.nvlink_links) == (0, (1,), 18)
    assert [(p.name, p.profile_id, p.nvml_index) for p in gpu.mig_profiles][:3] == [
        ("1g.10gb", 19, 0),
        ("1g.10gb+me", 20, 7),
        ("1g.20gb", 15, 9),
    ]
    assert smi_node("1xt4").gpus[0].mig_profiles == () and smi_node("2xl4").gpus[0].nvlink_peers == ()
    doc = json.loads(json.dumps(to_json(node)))
    assert doc["gpus"][1]["numaNode"] == 0 and doc["gpus"][1]["nvlinkPeers"] == [0]
    assert from_json(doc) == node
    for g in doc["gpus"]:
        for key in ("numaNode", "nvlinkPeers", "nvlinkLinks", "migProfiles"):
            g.pop(key)
    older = from_json(doc)
    assert older.gpus[0].numa is None and older.gpus[0].nvlink_peers == () and older.gpus[0].mig_profiles == ()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(version=3), "expected kind"),
        (lambda d: d["gpus"][0]["health"].update(eccDbeVolatile=-1), "gpus[0].health.eccDbeVolatile: expected int"),
        (lambda d: d["gpus"][0]["health"].update(slowdowns=["hot"]), "gpus[0].health.slowdowns: unknown"),
        (lambda d: d["gpus"][0].pop("uuid"), "gpus[0]: missing field 'uuid'"),
        (lambda d: d["gpus"][0].update(memoryMiB="80GB"), "gpus[0].memoryMiB: expected int"),
        (lambda d: d["gpus"][0]["migDevices"][0].update(giId=True), "migDevices[0].giId: expected int"),
        (lambda d: d.update(gpus={}), "gpus: expected a list"),
        (lambda d: d["gpus"][0].update(uuid="GPU-a\tb"), "gpus[0].uuid: control characters are not allowed"),
        (lambda d: d["gpus"][1].update(name="x\ny"), "gpus[1].name: control characters are not allowed"),
        (lambda d: d["gpus"][0].update(busId="bogus"), "gpus[0].busId: expected nvidia-smi's form"),
        (lambda d: d["gpus"][0]["migDevices"][2].update(index=0), "gpus[0]: MIG device indices must be unique"),
        (lambda d: d["gpus"][0].update(migOptions=[{}]), "gpus[0].migOptions[0]: missing field 'index'"),
        (lambda d: d["gpus"][0].update(numaNode="0"), "gpus[0].numaNode: expected an integer or null"),
        (lambda d: d["gpus"][0].update(nvlinkPeers=[True]), "gpus[0].nvlinkPeers: expected a list of integers"),
        (lambda d: d["gpus"][1].update(nvlinkLinks=None), "gpus[1].nvlinkLinks: expected int"),
        (lambda d: d["gpus"][0]["migProfiles"][0].pop("id"), "gpus[0].migProfiles[0]: missing field 'id'"),
        (lambda d: d["gpus"][0]["migProfiles"][1].update(placements=0), "migProfiles[1].placements: expected a list"),
        (lambda d: d["gpus"][1].update(computeMode="Shared"), "gpus[1].computeMode: expected one of Default"),
    ],
)
def test_bad_devices_json_names_the_field(change, message):
    doc = to_json(mixed())
    change(doc)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        from_json(doc, "devices.json")


@pytest.mark.parametrize("visible", [None, "all", " all ", "\nall\r\n"])
def test_unset_or_all_shows_every_device(visible):
    node = mixed()
    assert shown(node, visible) == [(0, [0, 1, 2]), (1, [])]


@pytest.mark.parametrize("visible", ["none", "void", "", "  "])
def test_none_void_and_empty_show_nothing(visible):
    assert shown(mixed(), visible) == []


def test_indices_uuids_and_order_of_the_list_do_not_matter():
    node = smi_node("8xh100-80gb")
    assert shown(node, "5,1") == [(1, []), (5, [])]
    assert shown(node, f"{node.gpus[6].uuid}, 2") == [(2, []), (6, [])]
    views = select(node, "5,1").gpus
    assert [v.index for v in views] == [0, 1]


def test_replica_ids_name_their_gpu_once():
    node = smi_node("8xh100-80gb")
    u = node.gpus[3].uuid
    assert shown(node, f"{u}::0,{u}::1,{u}::7") == [(3, [])]


def test_mig_uuids_and_index_pairs_select_single_mig_devices():
    node = mixed()
    migs = node.gpus[0].migs
    assert shown(node, migs[2].uuid) == [(0, [2])]
    assert shown(node, "0:1,0:2") == [(0, [1, 2])]
    assert shown(node, f"{migs[0].uuid}::2,1") == [(0, [0]), (1, [])]
    # A whole MIG-enabled GPU brings all its MIG devices.
    assert shown(node, f"0,{migs[0].uuid}") == [(0, [0, 1, 2])]


@pytest.mark.parametrize("visible", ["GPU-00000000-0000-0000-0000-000000000000", "9", "0:7", "MIG-nope", ",", "1:0"])
def test_ids_of_no_device_are_ignored(visible):
    assert shown(mixed(), visible) == []


def test_unknown_ids_next_to_known_ones_are_dropped():
    assert shown(mixed(), "GPU-unknown,1") == [(1, [])]


def test_volume_mounts_directory_lists_the_device_ids():
    files = {VOLUME_MOUNTS_ROOT: ["GPU-b", "GPU-a", ".hidden", "imex"]}
    assert expand_volume_mounts(VOLUME_MOUNTS_ROOT, files.__getitem__) == "GPU-a,GPU-b,imex"
    assert expand_volume_mounts("GPU-a", files.__getitem__) == "GPU-a"
    assert expand_volume_mounts(None, files.__getitem__) is None

    def missing(path: str) -> list[str]:
        raise FileNotFoundError(path)

    assert expand_volume_mounts(VOLUME_MOUNTS_ROOT, missing) == ""


def test_id_filter_by_index_uuid_and_bus_id():
    node = smi_node("4xh100-80gb")
    view = select(node, "1,2,3")
    assert [v.gpu.index for v in filter_ids(view, "0")] == [1]
    assert [v.gpu.index for v in filter_ids(view, node.gpus[3].uuid.lower())] == [3]
    assert [v.gpu.index for v in filter_ids(view, "00000000:38:00.0")] == [2]
    assert [v.gpu.index for v in filter_ids(view, "0000:38:00.0, 0")] == [1, 2]
    assert filter_ids(view, "3") == ()
    assert filter_ids(view, "") == ()


def test_blanks_around_ids_are_trimmed_as_the_runtime_trims_them():
    assert shown(mixed(), " 1\r\n,\t0:2\n") == [(0, [2]), (1, [])]


def env_visible(env: dict[str, str], unset: str | None) -> str | None:
    files = {VOLUME_MOUNTS_ROOT: ["GPU-b", "GPU-a"]}
    return visible_devices(env, files.__getitem__, unset=unset)


def test_fakegpu_visible_devices_wins_then_nvidia_visible_devices_then_the_default():
    both = {"NVIDIA_VISIBLE_DEVICES": "all", "FAKEGPU_VISIBLE_DEVICES": "GPU-x"}
    assert env_visible(both, unset="") == "GPU-x"
    assert env_visible({"NVIDIA_VISIBLE_DEVICES": "all", "FAKEGPU_VISIBLE_DEVICES": ""}, unset=None) == ""
    assert env_visible({"NVIDIA_VISIBLE_DEVICES": VOLUME_MOUNTS_ROOT}, unset="") == "GPU-a,GPU-b"
    # Neither: nothing inside a container (runc), everything for the host CLI.
    assert env_visible({}, unset="") == ""
    assert env_visible({}, unset=None) is None
    assert shown(mixed(), env_visible({}, unset="")) == []


# --- dynamic MIG (DRA --mig-mode dynamic) ---------------------------------------------------------------


def test_dynamic_mig_options_are_every_device_the_dra_driver_can_prepare():
    """Every dynamic MIG device the DRA driver publishes is known by the UUID its prepare hands out, and a
    container given it sees exactly that device: its profile, GPU-instance ID and memory."""
    base = node("2xh100-80gb")
    smi = from_node(base, dynamic_mig=True)
    dynamic = [d for d in published_devices(base, "dynamic").values() if d.kind == "mig"]
    assert len(dynamic) == sum(len(g.mig_options) for g in smi.gpus) > 0
    for device in dynamic:
        view = select(smi, device.visible_uuid(base.name)).gpus
        assert len(view) == 1 and not view[0].whole
        (mig,) = view[0].migs
        assert (view[0].gpu.index, mig.profile, mig.start, mig.memory_mib) == (
            device.parent_index,
            device.profile,
            device.start,
            device.memory_mib,
        )
    assert from_node(base).gpus[0].mig_options == ()


def test_an_ampere_gpu_with_mig_mode_off_has_no_dynamic_options():
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/nvlib.go (``isDynamicMIGCapable``,
    ``supportsMIGModeToggle``; PR #1018, in v0.4.0; read at commit 564717b): an Ampere GPU cannot switch MIG mode
    without a reset, so with MIG mode off the driver publishes it whole only and no container can be given one
    of its MIG devices; with MIG mode on, or on Hopper, the profiles are offered. nvidia-smi offers what the
    slices publish, no more."""
    base = node("1xa100-40gb,1xh100-80gb")
    smi = from_node(base, dynamic_mig=True)
    assert [len(g.mig_options) > 0 for g in smi.gpus] == [False, True]
    dynamic = [d for d in published_devices(base, "dynamic").values() if d.kind == "mig"]
    assert {d.parent_index for d in dynamic} == {1}
    assert len(dynamic) == sum(len(g.mig_options) for g in smi.gpus)
    mig_on = node("1xa100-40gb", layout="all-1g.5gb")
    assert len(from_node(mig_on, dynamic_mig=True).gpus[0].mig_options) > 0


def test_dynamic_options_need_their_uuid_and_skip_existing_instances():
    base = node("2xa100-40gb", "all-balanced")
    smi = from_node(base, dynamic_mig=True)
    gpu = smi.gpus[0]
    instance_uuids = {m.uuid for m in gpu.migs}
    assert instance_uuids and not instance_uuids & {m.uuid for m in gpu.mig_options}
    assert len({m.index for m in (*gpu.migs, *gpu.mig_options)}) == len(gpu.migs) + len(gpu.mig_options)
    assert [m.gi_id for m in gpu.mig_options] == sorted(m.gi_id for m in gpu.mig_options)
    # A whole GPU brings its instances only; a <gpu>:<mig> pair never names an option.
    assert shown(smi, "0") == [(0, [m.index for m in gpu.migs])]
    assert shown(smi, f"0:{gpu.mig_options[0].index}") == []
    # Two options of one GPU, in the container's order (instances first, then options).
    chosen = f"{gpu.mig_options[5].uuid},{gpu.migs[0].uuid},{gpu.mig_options[1].uuid}"
    assert shown(smi, chosen) == [(0, [gpu.migs[0].index, gpu.mig_options[1].index, gpu.mig_options[5].index])]


def test_dynamic_options_round_trip_through_devices_json():
    smi = from_node(node("1xh100-80gb"), dynamic_mig=True)
    doc = json.loads(json.dumps(to_json(smi)))
    assert len(doc["gpus"][0]["migOptions"]) == len(smi.gpus[0].mig_options)
    assert from_json(doc) == smi
    assert "migOptions" not in to_json(smi_node("1xh100-80gb"))["gpus"][0]


def test_a_gpu_seen_through_some_mig_devices_is_not_whole():
    node_ = mixed()
    assert [v.whole for v in select(node_, node_.gpus[0].migs[1].uuid).gpus] == [False]
    assert [v.whole for v in select(node_, "0").gpus] == [True]


def test_compute_mode_follows_the_drivers_policies_and_survives_devices_json():
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/sharing.go: an MPS claim's GPU is in
    ``Exclusive_Process``; a devices.json written before compute modes reads as ``Default``."""
    inventory = load_inventory(InventoryInputs(node_name="node-a", gpus=("2xh100-80gb",)))
    policies = GpuPolicies()
    policies.set_compute_mode([inventory.node.gpus[1].uuid], "Exclusive_Process")
    smi = from_inventory(inventory, policies=policies)
    assert [g.compute_mode for g in smi.gpus] == ["Default", "Exclusive_Process"]
    doc = to_json(smi)
    assert from_json(doc) == smi
    for gpu in doc["gpus"]:
        del gpu["computeMode"]
    assert [g.compute_mode for g in from_json(doc).gpus] == ["Default", "Default"]
