"""ResourceSlices: valid against the official schemas, within the API's size limits, shaped like NVIDIA's."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections import Counter
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from fakegpu.dra.feature_gates import parse_feature_gates
from fakegpu.dra.health_taints import device_taints
from fakegpu.dra.resource_slices import (
    SliceOptions,
    build_slice_specs,
    counter_set_name,
    device_name_gpu,
    device_name_mig,
    generate_name,
    semver,
    slice_objects,
    spec_devices,
)
from fakegpu.sharing.catalog import CATALOG
from fakegpu.sharing.health import HealthEvent, XidPolicy
from fakegpu.sharing.inputs import InventoryInputs, load_node
from fakegpu.sharing.mig_geometry import MigLayoutError, check_placements
from fakegpu.sharing.node import Node
from fakegpu.sharing.quantities import parse_quantity

HEALTH_CHECK = parse_feature_gates("NVMLDeviceHealthCheck=true")
"""NVIDIA's health gate: the slices carry the devices' health taints."""

V1 = "resource.k8s.io/v1"
V1BETA2 = "resource.k8s.io/v1beta2"
V1BETA1 = "resource.k8s.io/v1beta1"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def make_node(*gpus: str, layout: str | None = None, name: str = "node-a") -> Node:
    return load_node(InventoryInputs(node_name=name, gpus=gpus, mig_layout=layout))


def fatal(unhealthy: Mapping[str, int | None]) -> dict[str, tuple[dict[str, str], ...]]:
    """The taints of devices marked unhealthy with these XIDs (``fakegpu ctl health --unhealthy --xid``)."""
    return device_taints({u: [HealthEvent("xid", x, forced=True)] for u, x in unhealthy.items()}, XidPolicy())


def publish(
    node: Node,
    mig_mode: str = "static",
    minor: int = 36,
    api: str = V1,
    unhealthy: Mapping[str, int | None] | None = None,
) -> tuple[SliceOptions, list[dict[str, Any]]]:
    """Build (health taints on), validate every object against the schema of its server version, check
    every limit."""
    opts = SliceOptions(mig_mode=mig_mode, server_minor=minor, api_version=api, feature_gates=HEALTH_CHECK)  # type: ignore[arg-type]
    specs = build_slice_specs(node, opts, fatal(unhealthy or {}))
    for obj in slice_objects(node, opts, specs, node_uid="8d1f0c4e-0000-4000-8000-000000000001"):
        kubernetes_validate.validate(obj, f"1.{minor}.0", strict=True)
    check_limits(node, opts, specs)
    return opts, specs


def all_devices(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in specs for d in spec_devices(s)]


def check_limits(node: Node, opts: SliceOptions, specs: list[dict[str, Any]]) -> None:
    """The size and consistency rules the API server and the kubelet helper enforce (not in the schemas)."""
    sets: dict[str, dict[str, Any]] = {}
    names: list[str] = []
    for spec in specs:
        assert spec["driver"] == opts.driver
        assert spec["nodeName"] == node.name
        assert spec["pool"] == {"name": node.name, "generation": 1, "resourceSliceCount": len(specs)}
        devices = spec_devices(spec)
        shared = spec.get("sharedCounters", [])
        advanced = any("taints" in d or "consumesCounters" in d for d in devices)
        assert len(devices) <= (64 if advanced else 128)
        assert len(shared) <= 8
        if opts.server_minor >= 35:
            assert not (devices and shared), "1.35+: a slice holds sharedCounters or devices, not both"
        else:
            assert sum(len(s["counters"]) for s in shared) <= 32
            assert sum(len(c["counters"]) for d in devices for c in d.get("consumesCounters", [])) <= 1024
        for counter_set in shared:
            assert DNS_LABEL.match(counter_set["name"])
            assert len(counter_set["counters"]) <= 32
            assert all(DNS_LABEL.match(c) for c in counter_set["counters"])
            assert counter_set["name"] not in sets
            sets[counter_set["name"]] = counter_set
        for device in devices:
            names.append(device["name"])
            assert len(device["name"]) <= 63 and DNS_LABEL.match(device["name"]), device["name"]
            assert len(device.get("attributes", {})) + len(device.get("capacity", {})) <= 32
            # string and version attributes are at most 64 characters; int attributes have no length
            assert all(len(v) <= 64 for a in device["attributes"].values() for v in a.values() if isinstance(v, str))
            assert len(device.get("consumesCounters", [])) <= 2
            assert len(device.get("taints", [])) <= 16
            if opts.server_minor < 35:
                local = {s["name"] for s in shared}
                assert all(c["counterSet"] in local for c in device.get("consumesCounters", []))
    assert len(names) == len(set(names)), "device names must be unique in the pool"
    for device in all_devices(specs):
        for consumption in device.get("consumesCounters", []):
            assert len(consumption["counters"]) <= 32
            assert set(consumption["counters"]) <= set(sets[consumption["counterSet"]]["counters"])


def values(counters: Mapping[str, Mapping[str, str]]) -> dict[str, Fraction]:
    return {name: parse_quantity(c["value"]) for name, c in counters.items()}


def by_name(specs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for d in all_devices(specs)}


def attr(device: Mapping[str, Any], name: str) -> Any:
    return next(iter(device["attributes"][name].values()))


# ---------------------------------------------------------------------------------------------
# Whole GPUs and static MIG


@pytest.mark.parametrize("minor", [34, 35, 36])
def test_eight_h100_whole_gpus(minor):
    node = make_node("8xh100-80gb")
    _, specs = publish(node, minor=minor)
    assert len(specs) == 1
    devices = all_devices(specs)
    assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(8)]
    gpu0 = devices[0]
    assert gpu0["attributes"] == {
        "architecture": {"string": "Hopper"},
        "brand": {"string": "Nvidia"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "cudaDriverVersion": {"version": "12.8.0"},
        "driverVersion": {"version": "570.172.8"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "resource.kubernetes.io/pciBusID": {"string": node.gpus[0].pci_bus_id},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:10"},
        "resource.kubernetes.io/numaNode": {"int": 0},
        "type": {"string": "gpu"},
        "uuid": {"string": node.gpus[0].uuid},
    }
    assert gpu0["capacity"] == {"memory": {"value": "81559Mi"}}
    assert all("consumesCounters" not in d and "taints" not in d for d in devices)


def test_static_all_balanced_on_h100():
    node = make_node("8xh100-80gb", layout="all-balanced")
    _, specs = publish(node)
    devices = all_devices(specs)
    assert len(devices) == 32  # 2x 1g.10gb + 2g.20gb + 3g.40gb per GPU
    assert not any(d["name"] == device_name_gpu(g) for d in devices for g in node.gpus)
    named = by_name(specs)
    for gpu in node.gpus:
        assert len(gpu.mig_devices) == 4
        for mig in gpu.mig_devices:
            device = named[device_name_mig(gpu, mig.profile, mig.start)]
            assert attr(device, "type") == "mig"
            assert attr(device, "uuid") == mig.uuid
            assert attr(device, "parentUUID") == gpu.uuid
            assert attr(device, "profile") == mig.profile.name
            assert attr(device, "productName") == "NVIDIA H100 80GB HBM3"
            assert attr(device, "resource.kubernetes.io/pciBusID") == gpu.pci_bus_id
            slices = {k for k in device["capacity"] if k.startswith("memorySlice")}
            assert slices == {f"memorySlice{i}" for i in range(mig.start, mig.start + mig.profile.memory_slices)}
            assert device["capacity"]["memory"] == {"value": f"{mig.profile.memory_mib}Mi"}
            assert device["capacity"]["multiprocessors"] == {"value": str(mig.profile.multiprocessors)}
            assert {"copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines"} <= set(device["capacity"])
    assert [d["name"] for d in devices[:4]] == [
        "gpu-0-mig-1g10gb-19-2",
        "gpu-0-mig-1g10gb-19-3",
        "gpu-0-mig-2g20gb-14-0",
        "gpu-0-mig-3g40gb-9-4",
    ]


def test_static_all_1g10gb_on_h100():
    node = make_node("8xh100-80gb", layout="all-1g.10gb")
    _, specs = publish(node)
    devices = all_devices(specs)
    assert len(devices) == 56
    assert [d["name"] for d in devices[:7]] == [f"gpu-0-mig-1g10gb-19-{s}" for s in range(7)]


def test_static_mixed_node_publishes_mig_instances_and_whole_gpus():
    node = make_node("2xh100-80gb", "2xa100-40gb", "2xt4", layout="all-balanced")
    _, specs = publish(node)
    devices = all_devices(specs)
    kinds = Counter(attr(d, "type") for d in devices)
    assert kinds == {"mig": 16, "gpu": 2}
    assert [d["name"] for d in devices if attr(d, "type") == "gpu"] == ["gpu-4", "gpu-5"]
    # ordered by GPU index, then name
    indexes = [int(d["name"].split("-")[1]) for d in devices]
    assert indexes == sorted(indexes)
    a100 = by_name(specs)["gpu-2-mig-3g20gb-9-4"]
    assert a100["capacity"]["memory"] == {"value": "19968Mi"}
    assert attr(a100, "cudaComputeCapability") == "8.0.0"


def test_static_mig_enabled_without_instances_publishes_an_empty_pool():
    node = make_node("2xh100-80gb", layout="all-enabled")
    _, specs = publish(node)
    assert len(specs) == 1 and "devices" not in specs[0]


def test_many_devices_are_split_into_slices_of_128():
    node = make_node("20xh100-80gb", layout="all-1g.10gb")
    _, specs = publish(node)
    assert [len(s["devices"]) for s in specs] == [128, 12]


# ---------------------------------------------------------------------------------------------
# Dynamic MIG (partitionable devices)


DYNAMIC_MODELS = {"b200": 25, "h100-80gb": 25, "h200": 25}


@pytest.mark.parametrize("minor", [34, 35, 36])
@pytest.mark.parametrize("model", sorted(DYNAMIC_MODELS))
def test_dynamic_mig_on_eight_gpus(model, minor):
    node = make_node(f"8x{model}")
    _, specs = publish(node, mig_mode="dynamic", minor=minor)
    devices = all_devices(specs)
    assert len(devices) == 8 * (DYNAMIC_MODELS[model] + 1) == 208
    if minor == 34:
        assert len(specs) == 8
        for i, spec in enumerate(specs):
            assert [s["name"] for s in spec["sharedCounters"]] == [f"gpu-{i}-counter-set"]
            assert len(spec["devices"]) == 26
    else:
        assert len(specs) == 9
        assert [s["name"] for s in specs[0]["sharedCounters"]] == [f"gpu-{i}-counter-set" for i in range(8)]
        assert "devices" not in specs[0]
        assert [len(s["devices"]) for s in specs[1:]] == [26] * 8
    sets = {s["name"]: s for spec in specs for s in spec.get("sharedCounters", [])}
    for gpu in node.gpus:
        counter_set = sets[counter_set_name(gpu)]
        counters = values(counter_set["counters"])
        slices = gpu.model.memory_slices
        assert {n for n in counters if n.startswith("memory-slice-")} == {f"memory-slice-{i}" for i in range(slices)}
        # NVIDIA's maxCapacities: the most any MIG profile has, not the board's totals (kubernetes-sigs/
        # dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/partitions.go PartSharedCounterSets)
        assert counters["memory"] == max(p.memory_mib for p in gpu.model.mig_profiles) * 2**20
        assert counters["multiprocessors"] == max(p.multiprocessors for p in gpu.model.mig_profiles)
        assert set(counters) - {f"memory-slice-{i}" for i in range(slices)} == {
            "multiprocessors",
            "copy-engines",
            "decoders",
            "encoders",
            "jpeg-engines",
            "ofa-engines",
            "memory",
        }
        gpu_devices = [
            d for d in devices if d["name"] == f"gpu-{gpu.index}" or d["name"].startswith(f"gpu-{gpu.index}-")
        ]
        assert len(gpu_devices) == 26
        whole = next(d for d in gpu_devices if d["name"] == device_name_gpu(gpu))
        assert whole["consumesCounters"] == [{"counterSet": counter_set_name(gpu), "counters": counter_set["counters"]}]
        assert attr(whole, "uuid") == gpu.uuid
        for device in gpu_devices:
            if device is whole:
                continue
            assert "uuid" not in device["attributes"]
            assert attr(device, "parentUUID") == gpu.uuid
            profile = gpu.model.profile(attr(device, "profile"))
            assert profile is not None
            start = int(device["name"].rsplit("-", 1)[1])
            assert start in profile.placements
            assert device["name"] == device_name_mig(gpu, profile, start)
            (consumption,) = device["consumesCounters"]
            assert consumption["counterSet"] == counter_set_name(gpu)
            used = values(consumption["counters"])
            assert {n for n in used if n.startswith("memory-slice-")} == {
                f"memory-slice-{i}" for i in range(start, start + profile.memory_slices)
            }
            assert used["memory"] == profile.memory_mib * 2**20
            assert used["copy-engines"] == profile.copy_engines
            assert all(used[n] <= counters[n] for n in used)
            assert not any(k.startswith("memorySlice") for k in device["capacity"])


def test_dynamic_whole_b200_offers_the_largest_profile_not_the_board():
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/partitions.go (PartCapacities,
    PartSharedCounterSets): with dynamic MIG the full GPU's capacity and its counter set are the maximum over
    the MIG profiles nvlib.go walked. On a B200 that is 7g.180gb's 144 SMs and 181248Mi (177Gi), not the board's
    148 SMs and 183359Mi; a non-MIG-capable GPU keeps its board memory."""
    node = make_node("1xb200")
    _, specs = publish(node, mig_mode="dynamic")
    whole = by_name(specs)["gpu-0"]
    assert whole["capacity"]["multiprocessors"] == {"value": "144"}
    assert whole["capacity"]["memory"] == {"value": "177Gi"}
    (counter_set,) = [s for spec in specs for s in spec.get("sharedCounters", [])]
    assert counter_set["counters"]["multiprocessors"] == {"value": "144"}
    assert counter_set["counters"]["memory"] == {"value": "177Gi"}
    _, specs = publish(make_node("1xl4"), mig_mode="dynamic")
    assert by_name(specs)["gpu-0"]["capacity"] == {"memory": {"value": f"{CATALOG['l4'].memory_mib}Mi"}}


def test_dynamic_ampere_with_mig_mode_off_stays_a_plain_whole_gpu():
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/nvlib.go (isDynamicMIGCapable,
    supportsMIGModeToggle; PR #1018, in v0.4.0): an Ampere GPU cannot switch MIG mode without a reset, so with
    MIG mode off DynamicMIG publishes it as a whole GPU only, with the board's memory and no counters
    (partitions.go PartCapacities / PartConsumesCounters without MIG data), next to a Hopper GPU's profiles."""
    node = make_node("1xa100-40gb", "1xh100-80gb")
    for minor in (34, 36):
        _, specs = publish(node, mig_mode="dynamic", minor=minor)
        devices = by_name(specs)
        a100 = devices["gpu-0"]
        assert a100["capacity"] == {"memory": {"value": "40Gi"}}
        assert "consumesCounters" not in a100
        assert not any(name.startswith("gpu-0-") for name in devices)
        assert [s["name"] for spec in specs for s in spec.get("sharedCounters", [])] == ["gpu-1-counter-set"]
        assert sum(name.startswith("gpu-1-mig-") for name in devices) == 25
    assert build_slice_specs(make_node("2xa100-40gb"), SliceOptions(mig_mode="dynamic")) == build_slice_specs(
        make_node("2xa100-40gb"), SliceOptions(mig_mode="static")
    )


def test_dynamic_device_names_follow_nvidia():
    """MigSpecTuple.ToCanonicalName in kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/mig.go: the
    profile loses its dots, then toRFC1123Compliant turns `+` into `-` (`1g.5gb+me` -> `1g5gb-me`)."""
    node = make_node("1xa100-40gb", layout="all-balanced")
    _, specs = publish(node, mig_mode="dynamic")
    names = sorted(by_name(specs))
    assert "gpu-0-mig-1g5gb-19-6" in names
    assert "gpu-0-mig-1g5gb-me-20-0" in names
    assert "gpu-0-mig-7g40gb-0-0" in names
    profiles = (re.fullmatch(r"gpu-0-mig-(.+)-\d+-\d+", n) for n in names if "-mig-" in n)
    assert Counter(m.group(1) for m in profiles if m) == {
        "1g5gb": 7,
        "1g5gb-me": 7,
        "1g10gb": 4,
        "2g10gb": 3,
        "3g20gb": 2,
        "4g20gb": 1,
        "7g40gb": 1,
    }


def test_dynamic_on_a_large_node_splits_counter_sets_by_eight():
    node = make_node("20xh100-80gb")
    _, specs = publish(node, mig_mode="dynamic", minor=36)
    assert [len(s.get("sharedCounters", [])) for s in specs[:3]] == [8, 8, 4]
    assert len(specs) == 3 + 20
    assert len(all_devices(specs)) == 20 * 26


def test_dynamic_mixed_node_gives_non_mig_gpus_no_counters():
    node = make_node("2xh100-80gb", "1xl4")
    for minor in (34, 36):
        _, specs = publish(node, mig_mode="dynamic", minor=minor)
        l4 = by_name(specs)["gpu-2"]
        assert "consumesCounters" not in l4 and l4["capacity"] == {"memory": {"value": "23034Mi"}}
        assert len([s for spec in specs for s in spec.get("sharedCounters", [])]) == 2


def test_dynamic_without_mig_capable_gpus_falls_back_to_static():
    node = make_node("4xl40s")
    static = build_slice_specs(node, SliceOptions(mig_mode="static"))
    assert build_slice_specs(node, SliceOptions(mig_mode="dynamic")) == static


def test_dynamic_ampere_with_mig_mode_on_offers_no_whole_gpu_but_hopper_does():
    ampere = make_node("1xa100-40gb", layout="all-balanced")
    _, specs = publish(ampere, mig_mode="dynamic")
    assert "gpu-0" not in by_name(specs) and len(all_devices(specs)) == 25
    assert specs[0]["sharedCounters"][0]["name"] == "gpu-0-counter-set"
    hopper = make_node("1xh100-80gb", layout="all-balanced")
    _, specs = publish(hopper, mig_mode="dynamic")
    assert "gpu-0" in by_name(specs) and len(all_devices(specs)) == 26


# ---------------------------------------------------------------------------------------------
# The counters make over-admission impossible


def _fits(used: Mapping[str, Fraction], extra: Mapping[str, Fraction], capacity: Mapping[str, Fraction]) -> bool:
    return all(used.get(n, 0) + v <= capacity[n] for n, v in extra.items())


def _add(used: Mapping[str, Fraction], extra: Mapping[str, Fraction]) -> dict[str, Fraction]:
    out = dict(used)
    for n, v in extra.items():
        out[n] = out.get(n, Fraction(0)) + v
    return out


def _gpu0(model: str) -> tuple[dict[str, Fraction], list[dict[str, Any]]]:
    """GPU 0's counter set and devices with dynamic MIG; Ampere GPUs with MIG mode on, as NVIDIA offers their
    profiles only then."""
    ampere = CATALOG[model].architecture == "Ampere"
    node = make_node(f"1x{model}", layout="all-balanced" if ampere else None)
    specs = build_slice_specs(node, SliceOptions(mig_mode="dynamic"))
    capacity = values(specs[0]["sharedCounters"][0]["counters"])
    return capacity, all_devices(specs)


def test_h100_counters_admit_seven_1g10gb_and_nothing_more():
    capacity, devices = _gpu0("h100-80gb")
    consumes = {d["name"]: values(d["consumesCounters"][0]["counters"]) for d in devices}
    used: dict[str, Fraction] = {}
    taken = []
    for name in sorted(n for n in consumes if "-mig-1g10gb-19-" in n):
        assert _fits(used, consumes[name], capacity), name
        used = _add(used, consumes[name])
        taken.append(name)
    assert len(taken) == 7
    # Greedily keep going with every other device: nothing else fits, least of all the whole GPU.
    assert [n for n in sorted(consumes) if _fits(used, consumes[n], capacity)] == []
    # Free one 1g.10gb: only devices living in that one memory slice fit again.
    used = {n: v - consumes[taken[3]].get(n, 0) for n, v in used.items()}
    again = sorted(n for n in consumes if _fits(used, consumes[n], capacity))
    assert again == ["gpu-0-mig-1g10gb-19-3", "gpu-0-mig-1g10gb-me-20-3"]


def test_h100_whole_gpu_blocks_every_mig_device_and_vice_versa():
    capacity, devices = _gpu0("h100-80gb")
    consumes = {d["name"]: values(d["consumesCounters"][0]["counters"]) for d in devices}
    whole = consumes.pop("gpu-0")
    assert whole == capacity
    assert not any(_fits(whole, c, capacity) for c in consumes.values())
    assert all(not _fits(c, whole, capacity) for c in consumes.values())


@pytest.mark.parametrize("model", ["a100-40gb", "a100-80gb", "a30", "h100-80gb", "h200", "b200"])
def test_counters_admit_exactly_the_valid_mig_layouts(model):
    """Every set of MIG devices the counters admit is a layout the hardware accepts, and the other way
    round (engine budgets included: an A30 cannot hold two "+me" instances)."""
    capacity, devices = _gpu0(model)
    gpu_model = CATALOG[model]
    migs = [d for d in devices if attr(d, "type") == "mig"]
    consumes = [values(d["consumesCounters"][0]["counters"]) for d in migs]
    placements = [(attr(d, "profile"), int(d["name"].rsplit("-", 1)[1])) for d in migs]
    blocked: list[list[tuple[str, int]]] = []
    layouts = 0

    def walk(i: int, used: dict[str, Fraction], chosen: list[int]) -> None:
        nonlocal layouts
        if i == len(migs):
            layouts += 1
            layout = [placements[j] for j in chosen]
            fits = all(v <= capacity[n] for n, v in used.items())
            try:
                check_placements(gpu_model, layout)
                valid = True
            except MigLayoutError:
                valid = False
            assert valid or not fits, f"counters over-admit {layout}"
            if valid and not fits:
                blocked.append(layout)
            return
        walk(i + 1, used, chosen)
        more = _add(used, consumes[i])
        if all(v <= 1 for n, v in more.items() if n.startswith("memory-slice-")):
            walk(i + 1, more, [*chosen, i])

    walk(0, {}, [])
    assert layouts > 100
    assert blocked == []


# ---------------------------------------------------------------------------------------------
# API versions


@pytest.mark.parametrize("minor", [34, 35, 36])
@pytest.mark.parametrize("api", [V1BETA2, V1BETA1])
@pytest.mark.parametrize("mig_mode", ["static", "dynamic"])
def test_beta_shapes_validate(api, minor, mig_mode):
    node = make_node("8xh100-80gb", layout="all-balanced" if mig_mode == "static" else None)
    unhealthy: dict[str, int | None] = {node.gpus[0].uuid: 79}
    if mig_mode == "static":
        unhealthy[node.gpus[0].mig_devices[0].uuid] = 48
    _, specs = publish(node, mig_mode=mig_mode, minor=minor, api=api, unhealthy=unhealthy)
    raw = [d for s in specs for d in s.get("devices", [])]
    if api == V1BETA1:
        assert all(set(d) == {"name", "basic"} for d in raw)
    else:
        assert all("basic" not in d for d in raw)
    v1 = build_slice_specs(
        node, SliceOptions(mig_mode=mig_mode, server_minor=minor, feature_gates=HEALTH_CHECK), fatal(unhealthy)
    )
    assert all_devices(specs) == all_devices(v1)
    assert any("taints" in d for d in all_devices(specs)) == (minor >= 36)


def test_schema_validation_rejects_the_wrong_shape():
    """The validation used above can fail: flat devices are not v1beta1, basic devices are not v1."""
    node = make_node("1xh100-80gb")
    opts = SliceOptions(api_version=V1BETA1)
    (obj,) = slice_objects(node, opts, build_slice_specs(node, SliceOptions()))
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, "1.36.0", strict=True)
    (obj,) = slice_objects(node, SliceOptions(), build_slice_specs(node, opts))
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, "1.36.0", strict=True)


def test_options_refuse_unserved_versions_and_bad_names():
    with pytest.raises(ValueError, match="not served"):
        SliceOptions(server_minor=33)
    with pytest.raises(ValueError, match="not served"):
        SliceOptions(api_version=V1BETA1, server_minor=38)
    with pytest.raises(ValueError, match="unsupported API version"):
        SliceOptions(api_version="resource.k8s.io/v1alpha3")
    with pytest.raises(ValueError, match="mig_mode"):
        SliceOptions(mig_mode="auto")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="DNS subdomain"):
        SliceOptions(driver="GPU.nvidia.com")
    SliceOptions(api_version=V1BETA2, server_minor=33)


# ---------------------------------------------------------------------------------------------
# Health


def test_unhealthy_devices_get_xid_taints_from_136():
    node = make_node("8xh100-80gb", layout="all-1g.10gb")
    bad_mig = node.gpus[2].mig_devices[3]
    unhealthy = {bad_mig.uuid: 79, node.gpus[5].uuid: None}
    _, specs = publish(node, unhealthy=unhealthy)
    assert [len(s["devices"]) for s in specs] == [56]  # fits 64 even with taints
    tainted = {d["name"]: d["taints"] for d in all_devices(specs) if "taints" in d}
    assert tainted == {
        device_name_mig(node.gpus[2], bad_mig.profile, bad_mig.start): [
            {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
        ]
    }
    _, specs = publish(node, minor=35, unhealthy=unhealthy)
    assert not any("taints" in d for d in all_devices(specs))


def test_taints_lower_the_device_limit_to_64():
    node = make_node("16xh100-80gb", layout="all-1g.10gb")
    _, specs = publish(node)
    assert [len(s["devices"]) for s in specs] == [112]
    _, specs = publish(node, unhealthy={node.gpus[15].mig_devices[6].uuid: 48})
    assert [len(s["devices"]) for s in specs] == [64, 48]
    assert [d["name"] for d in all_devices(specs) if "taints" in d] == ["gpu-15-mig-1g10gb-19-6"]


def test_whole_gpu_taint_without_xid_says_unknown():
    node = make_node("2xh100-80gb")
    _, specs = publish(node, unhealthy={node.gpus[1].uuid: None})
    assert by_name(specs)["gpu-1"]["taints"] == [
        {"key": "gpu.nvidia.com/xid", "value": "unknown", "effect": "NoSchedule"}
    ]
    assert "taints" not in by_name(specs)["gpu-0"]


@pytest.mark.parametrize("minor", [34, 35, 36])
def test_dynamic_mig_devices_follow_their_gpu_health(minor):
    node = make_node("8xh200")
    _, specs = publish(node, mig_mode="dynamic", minor=minor, unhealthy={node.gpus[3].uuid: 79})
    tainted = sorted(d["name"] for d in all_devices(specs) if "taints" in d)
    if minor < 36:
        assert tainted == []
    else:
        assert len(tainted) == 26 and all(n == "gpu-3" or n.startswith("gpu-3-") for n in tainted)


# ---------------------------------------------------------------------------------------------
# Objects, names and determinism


def test_objects_are_named_and_owned_like_the_kubelet_helper_does():
    node = make_node("1xh100-80gb", name="vm")
    opts = SliceOptions(driver="test-driver.cdi.k8s.io")
    specs = build_slice_specs(node, opts)
    (obj,) = slice_objects(node, opts, specs, node_uid="uid-1")
    assert obj["apiVersion"] == "resource.k8s.io/v1" and obj["kind"] == "ResourceSlice"
    assert obj["metadata"] == {
        "generateName": "00000-test-driver.cdi.k8s.io-vm-",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "vm", "uid": "uid-1", "controller": True}],
    }
    assert obj["spec"] == specs[0]
    (obj,) = slice_objects(node, opts, specs)
    assert "ownerReferences" not in obj["metadata"]
    old = SliceOptions(driver="test-driver.cdi.k8s.io", server_minor=35)
    assert slice_objects(node, old, specs)[0]["metadata"]["generateName"] == "vm-test-driver.cdi.k8s.io-"


def test_generate_names_carry_the_slice_index_and_stay_valid():
    node = make_node("8xh100-80gb")
    opts = SliceOptions(mig_mode="dynamic")
    objs = slice_objects(node, opts, build_slice_specs(node, opts))
    assert [o["metadata"]["generateName"] for o in objs] == [f"0000{i}-gpu.nvidia.com-node-a-" for i in range(9)]
    assert generate_name(opts, "n", 0, 0x100001) == "000000-gpu.nvidia.com-n-"
    long_node = ".".join(["a" * 63] * 3)
    for minor in (35, 36):
        name = generate_name(SliceOptions(server_minor=minor), long_node, 7, 9)
        assert len(name) <= 58 and name.endswith("-")
        assert DNS_SUBDOMAIN.match(name + "x7k2p")
        if minor == 36:
            assert name.startswith("00007-gpu.nvidia.com-a")


def test_versions_are_normalised_to_semver():
    assert semver("570.172.08") == "570.172.8"
    assert semver("12.8") == "12.8.0"
    assert semver("535.104.05") == "535.104.5"
    assert semver("550") == "550.0.0"
    with pytest.raises(ValueError):
        semver("570.x")
    node = dataclasses.replace(make_node("1xa100-40gb"), driver_version="535.104.05", cuda_driver_version="12.02")
    device = all_devices(build_slice_specs(node, SliceOptions()))[0]
    assert attr(device, "driverVersion") == "535.104.5"
    assert attr(device, "cudaDriverVersion") == "12.2.0"
    assert attr(device, "cudaComputeCapability") == "8.0.0"


def test_same_inputs_give_identical_output():
    node = make_node("8xh100-80gb")
    opts = SliceOptions(mig_mode="dynamic", server_minor=36, feature_gates=HEALTH_CHECK)
    a = fatal({node.gpus[1].uuid: 79, node.gpus[4].uuid: None})
    b = dict(reversed(list(a.items())))
    first = slice_objects(node, opts, build_slice_specs(node, opts, a), node_uid="u")
    again = slice_objects(make_node("8xh100-80gb"), opts, build_slice_specs(node, opts, b), node_uid="u")
    assert json.dumps(first) == json.dumps(again)
    assert build_slice_specs(node, opts, a, generation=7)[0]["pool"]["generation"] == 7


def test_output_is_not_shared_between_calls():
    node = make_node("1xh100-80gb")
    opts = SliceOptions(mig_mode="dynamic")
    specs = build_slice_specs(node, opts)
    pristine = copy.deepcopy(specs)
    specs[1]["devices"][0]["capacity"]["memory"]["value"] = "1"
    specs[0]["sharedCounters"][0]["counters"]["memory"]["value"] = "1"
    assert build_slice_specs(node, opts) == pristine


def test_output_has_no_shared_objects_so_yaml_needs_no_anchors():
    node = make_node("2xh100-80gb")
    opts = SliceOptions(mig_mode="dynamic", server_minor=36, feature_gates=HEALTH_CHECK)
    objs = slice_objects(node, opts, build_slice_specs(node, opts, fatal({node.gpus[0].uuid: 79})), node_uid="u")
    text = yaml.safe_dump_all(objs)
    assert "&id" not in text and "*id" not in text
    assert list(yaml.safe_load_all(text)) == objs


def test_device_names_on_a_full_node_are_unique_dns_labels():
    node = make_node("64xh100-80gb")
    _, specs = publish(node, mig_mode="dynamic", minor=35)
    names = [d["name"] for d in all_devices(specs)]
    assert len(names) == len(set(names)) == 64 * 26
    assert max(len(n) for n in names) <= 63
    assert len(specs) == 8 + 64


# ---------------------------------------------------------------------------------------------
# Standard topology attributes


def test_every_device_carries_its_gpus_pcie_root_and_numa_node(tmp_path):
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/deviceinfo.go (GpuInfo.Attributes) and mig.go
    (CommonAttributesMig): full GPUs and MIG devices carry the parent's `resource.kubernetes.io/pcieRoot`
    (a string `pci<domain>:<bus>`, k8s.io/dynamic-resource-allocation deviceattribute/pci_linux.go) and, where
    the GPU has NUMA affinity, `resource.kubernetes.io/numaNode` as a scalar int (numa.go; list form only with
    the DRAListTypeAttributes gate). A claim's `matchAttribute: resource.kubernetes.io/pcieRoot` then pairs a
    GPU with a NIC on the same root complex."""
    spec = tmp_path / "node.yaml"
    spec.write_text(
        "numaNodes: 2\n"
        "gpus:\n"
        "  - {model: h100-80gb, count: 2, numa: [0, 1], migEnabled: true, migDevices: {3g.40gb: 2}}\n"
        "  - {model: h100-80gb, count: 1, numa: -1}\n"
    )
    node = load_node(InventoryInputs(node_name="node-a", node_spec=str(spec)))
    assert [g.numa for g in node.gpus] == [0, 1, None]
    for mig_mode in ("static", "dynamic"):
        _, specs = publish(node, mig_mode=mig_mode)
        devices = all_devices(specs)
        roots: dict[str, set[int]] = {}
        for device in devices:
            index = int(device["name"].split("-")[1])
            gpu = node.gpus[index]
            root = attr(device, "resource.kubernetes.io/pcieRoot")
            assert re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}", root), root
            assert root == f"pci{gpu.pci_bus_id[:4]}:{int(gpu.pci_bus_id[5:7], 16) & 0xF0:02x}"
            roots.setdefault(root, set()).add(index)
            if gpu.numa is None:
                assert "resource.kubernetes.io/numaNode" not in device["attributes"], device["name"]
            else:
                assert device["attributes"]["resource.kubernetes.io/numaNode"] == {"int": gpu.numa}
        assert all(len(gpus) == 1 for gpus in roots.values()), "one root complex per GPU"
        assert {attr(d, "resource.kubernetes.io/numaNode") for d in devices if d["name"].startswith("gpu-1")} == {1}
