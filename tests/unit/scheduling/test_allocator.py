"""The DRA allocator (fakegpu.scheduling): what kube-scheduler's structured allocator decides, on fakegpu's
own slices and on hand-written ones.

Follows kubernetes ``staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/
allocator_stable.go``, ``internal/incubating/allocator_incubating.go`` and
``internal/incubating/consumable_capacity.go`` (v1.36).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest

from fakegpu.dra.device_classes import device_classes
from fakegpu.dra.resource_slices import SliceOptions, build_slice_specs, slice_objects
from fakegpu.scheduling.allocator import AllocationError, Allocator
from fakegpu.scheduling.cel_environment import CelError, device_variable, selector_matches
from fakegpu.sharing.inputs import InventoryInputs, load_node

NODE = "node-a"
GPU = "gpu.nvidia.com"
HELD_SHARE = "2f1e0c7a-1b6d-4c1e-9a55-0d3c6f9e8b71"


def slices(*gpus: str, layout: str | None = None, mig_mode: str = "static") -> list[dict[str, Any]]:
    node = load_node(InventoryInputs(node_name=NODE, gpus=gpus, mig_layout=layout))
    opts = SliceOptions(mig_mode=mig_mode, server_minor=36, api_version="resource.k8s.io/v1")  # type: ignore[arg-type]
    return slice_objects(node, opts, build_slice_specs(node, opts, {}), node_uid="8d1f0c4e-0000-4000-8000-000000000001")


def claim(name: str, *requests: Mapping[str, Any], **devices: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": list(requests), **devices}},
    }


def exactly(name: str, device_class: str = GPU, *selectors: str, **fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"deviceClassName": device_class, **fields}
    if selectors:
        spec["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": spec}


def devices_of(allocation: Mapping[str, Any]) -> list[str]:
    return [r["device"] for r in allocation["devices"]["results"]]


def test_one_gpu_each_then_a_clear_error_when_none_is_left():
    """gpu-test1's two claims get distinct GPUs; a third finds both taken and says so."""
    alloc = Allocator(NODE, slices("2xh100-80gb"), device_classes())
    first = alloc.allocate([claim("a", exactly("gpu"))])[0]
    second = alloc.allocate([claim("b", exactly("gpu"))])[0]
    assert devices_of(first) == ["gpu-0"]
    assert devices_of(second) == ["gpu-1"]
    assert first["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [NODE]
    with pytest.raises(AllocationError) as refused:
        alloc.allocate([claim("c", exactly("gpu"))])
    assert str(refused.value) == (
        "ResourceClaim default/c: request gpu: cannot allocate on node node-a: DeviceClass gpu.nvidia.com match "
        "2 device(s), 0 free (2 in use), need 1"
    )


def test_claims_allocated_before_count_as_taken():
    taken = {
        "status": {
            "allocation": {"devices": {"results": [{"request": "gpu", "driver": GPU, "pool": NODE, "device": "gpu-0"}]}}
        }
    }
    alloc = Allocator(NODE, slices("2xh100-80gb"), device_classes(), [taken])
    assert devices_of(alloc.allocate([claim("a", exactly("gpu", count=1))])[0]) == ["gpu-1"]


def test_mig_devices_matched_by_parent_uuid_backtrack_to_one_gpu():
    """gpu-test4: four MIG requests with ``matchAttribute: gpu.nvidia.com/parentUUID`` land on one parent,
    the second pod's on the other GPU, the third pod's nowhere."""
    requests = [
        exactly(name, "mig.nvidia.com", f"device.attributes['gpu.nvidia.com'].profile == '{profile}'")
        for name, profile in (("a", "1g.5gb"), ("b", "1g.5gb"), ("c", "2g.10gb"), ("d", "3g.20gb"))
    ]
    constraints = [{"requests": [], "matchAttribute": "gpu.nvidia.com/parentUUID"}]
    alloc = Allocator(NODE, slices("2xa100-40gb", layout="all-balanced"), device_classes())
    for gpu in ("gpu-0", "gpu-1"):
        got = devices_of(alloc.allocate([claim("m", *requests, constraints=constraints)])[0])
        assert len(set(got)) == 4 and all(d.startswith(gpu + "-mig-") for d in got), got
    with pytest.raises(AllocationError, match="request a: cannot allocate on node node-a"):
        alloc.allocate([claim("m", *requests, constraints=constraints)])


def test_a_constraint_that_cannot_hold_is_named():
    """One 3g.20gb on each GPU, but the claim wants two of them on one parent."""
    sel = "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'"
    requests = [exactly("a", "mig.nvidia.com", sel), exactly("b", "mig.nvidia.com", sel)]
    alloc = Allocator(NODE, slices("2xa100-40gb", layout="all-balanced"), device_classes())
    with pytest.raises(AllocationError, match="each could be met alone, but not all at once"):
        alloc.allocate([claim("m", *requests, constraints=[{"matchAttribute": "gpu.nvidia.com/parentUUID"}])])


def test_a_selector_naming_a_missing_attribute_aborts_with_the_cel_error():
    """gpu-test6 names ``index``, which NVIDIA stopped publishing: the scheduler fails with a CEL runtime error."""
    alloc = Allocator(NODE, slices("1xa100-40gb"), device_classes())
    with pytest.raises(AllocationError) as refused:
        alloc.allocate([claim("a", exactly("gpu", GPU, "device.attributes['gpu.nvidia.com'].nosuch == 0"))])
    assert "ResourceClaim default/a: request gpu: request selector #0: CEL runtime error on device" in str(
        refused.value
    )
    assert "nosuch" in str(refused.value)


def test_cel_library_quantities_semver_and_strings():
    alloc = Allocator(NODE, slices("2xh100-80gb"), device_classes())
    device = next(d for d in alloc.devices.devices if d.id.device == "gpu-0")
    variable = device_variable(GPU, device.spec)
    for expression, expected in (
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) > 0", True),
        ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('40Gi'))", False),
        ("device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*h100.*$')", True),
        ("device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('1.0.0'))", True),
        ("device.attributes['gpu.nvidia.com'].type == 'gpu' && device.driver == 'gpu.nvidia.com'", True),
        ("device.allowMultipleAllocations", False),
    ):
        assert selector_matches(expression, variable) is expected, expression
    with pytest.raises(CelError, match="syntax error at column 15"):
        selector_matches("device.driver ==", variable)
    with pytest.raises(CelError, match="must evaluate to bool"):
        selector_matches("device.driver", variable)


def test_taints_block_unless_tolerated_and_effect_none_does_not():
    objs = slices("2xh100-80gb")
    for obj in objs:
        for d in obj["spec"]["devices"]:
            if d["name"] == "gpu-0":
                d["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
            if d["name"] == "gpu-1":
                d["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "13", "effect": "None"}]
    alloc = Allocator(NODE, objs, device_classes())
    assert devices_of(alloc.allocate([claim("a", exactly("gpu"))])[0]) == ["gpu-1"]
    with pytest.raises(AllocationError, match=r"1 tainted, 1 in use"):
        alloc.allocate([claim("b", exactly("gpu"))])
    tolerating = exactly("gpu", tolerations=[{"key": "gpu.nvidia.com/xid", "operator": "Exists"}])
    result = alloc.allocate([claim("c", tolerating)])[0]["devices"]["results"][0]
    assert result["device"] == "gpu-0"
    assert result["tolerations"] == [{"key": "gpu.nvidia.com/xid", "operator": "Exists"}]


def test_all_mode_first_available_and_configs_in_order():
    classes = device_classes()
    config = {
        "opaque": {"driver": GPU, "parameters": {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}}
    }
    classes[0]["spec"]["config"] = [config]
    alloc = Allocator(NODE, slices("2xh100-80gb"), classes)
    every = claim("all", exactly("gpus", allocationMode="All"), config=[{"requests": ["gpus"], **config}])
    allocation = alloc.allocate([every])[0]
    assert devices_of(allocation) == ["gpu-0", "gpu-1"]
    assert [c["source"] for c in allocation["devices"]["config"]] == ["FromClass", "FromClaim"]
    assert allocation["devices"]["config"][0]["requests"] == ["gpus"]
    alloc = Allocator(NODE, slices("1xa100-40gb", layout="all-1g.5gb"), device_classes())
    fallback = {
        "name": "r",
        "firstAvailable": [
            {"name": "whole", "deviceClassName": GPU},
            {"name": "slice", "deviceClassName": "mig.nvidia.com"},
        ],
    }
    results = alloc.allocate([claim("fa", fallback)])[0]["devices"]["results"]
    assert results[0]["request"] == "r/slice" and "-mig-1g5gb-" in results[0]["device"]


def test_a_missing_device_class_is_named():
    alloc = Allocator(NODE, slices("1xh100-80gb"), device_classes())
    with pytest.raises(AllocationError, match="request gpu: DeviceClass 'nope' does not exist"):
        alloc.allocate([claim("a", exactly("gpu", "nope"))])


def shared_gpu_slice(capacity: Mapping[str, Any]) -> dict[str, Any]:
    """One GPU advertised for consumable shares (KEP-5075), as NVIDIA's ConsumableShares modes describe it."""
    device = {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "attributes": {"type": {"string": "gpu"}},
        "capacity": dict(capacity),
    }
    return {
        "metadata": {"name": "node-a-gpu"},
        "spec": {
            "driver": GPU,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [device],
        },
    }


def share_results(alloc: Allocator, name: str, *requests: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(alloc.allocate([claim(name, *requests)])[0]["devices"]["results"])


def test_consumable_shares_integer_mode_four_claims_fit_the_fifth_does_not():
    """``--consumable-shares=4``: ``shares`` 4 with default 1, ``memory`` default 0; each claim one share."""
    capacity = {
        "memory": {
            "value": "80Gi",
            "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "80Gi", "step": "1Mi"}},
        },
        "shares": {
            "value": "4",
            "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "4", "step": "1"}},
        },
    }
    alloc = Allocator(NODE, [shared_gpu_slice(capacity)], device_classes())
    seen = [share_results(alloc, f"c{i}", exactly("gpu"))[0] for i in range(4)]
    assert {r["device"] for r in seen} == {"gpu-0"}
    assert len({r["shareID"] for r in seen}) == 4
    assert seen[0]["consumedCapacity"] == {"memory": "0", "shares": "1"}
    with pytest.raises(AllocationError, match=r"1 device\(s\), 0 free \(1 capacity left too small\)"):
        share_results(alloc, "c5", exactly("gpu"))


def test_consumable_shares_memory_mode_rounds_and_defaults_to_the_whole_device():
    """``--consumable-shares=memory``: default = all memory, min 1Mi, step 1Mi; 4Gi requests co-allocate."""
    capacity = {
        "memory": {"value": "10Gi", "requestPolicy": {"default": "10Gi", "validRange": {"min": "1Mi", "step": "1Mi"}}}
    }
    alloc = Allocator(NODE, [shared_gpu_slice(capacity)], device_classes())
    four = exactly("gpu", capacity={"requests": {"memory": "4Gi"}})
    assert share_results(alloc, "a", four)[0]["consumedCapacity"] == {"memory": "4Gi"}
    odd = exactly("gpu", capacity={"requests": {"memory": "1000000"}})  # rounded up to whole MiB
    assert share_results(alloc, "b", odd)[0]["consumedCapacity"] == {"memory": "1Mi"}
    with pytest.raises(AllocationError):
        share_results(alloc, "whole", exactly("gpu"))  # the default: all 10Gi, 4Gi+1Mi already taken
    assert share_results(alloc, "c", four)[0]["consumedCapacity"] == {"memory": "4Gi"}


def test_consumable_shares_unlimited_mode_and_requests_the_device_lacks():
    capacity = {
        "memory": {
            "value": "80Gi",
            "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "80Gi", "step": "1Mi"}},
        }
    }
    alloc = Allocator(NODE, [shared_gpu_slice(capacity)], device_classes())
    assert len({share_results(alloc, f"u{i}", exactly("gpu"))[0]["shareID"] for i in range(10)}) == 10
    too_much = exactly("gpu", capacity={"requests": {"memory": "81Gi"}})
    with pytest.raises(AllocationError):
        share_results(alloc, "big", too_much)
    with pytest.raises(AllocationError):
        share_results(alloc, "other", exactly("gpu", capacity={"requests": {"bandwidth": "1"}}))


def test_shares_recorded_in_claims_are_counted():
    capacity = {
        "memory": {"value": "8Gi", "requestPolicy": {"default": "8Gi", "validRange": {"min": "1Mi", "step": "1Mi"}}}
    }
    held = {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": GPU,
                            "pool": NODE,
                            "device": "gpu-0",
                            "shareID": HELD_SHARE,
                            "consumedCapacity": {"memory": "6Gi"},
                        }
                    ]
                }
            }
        }
    }
    alloc = Allocator(NODE, [shared_gpu_slice(capacity)], device_classes(), [held])
    got = share_results(alloc, "a", exactly("gpu", capacity={"requests": {"memory": "2Gi"}}))[0]
    assert uuid.UUID(got["shareID"]) and got["shareID"] != HELD_SHARE
    with pytest.raises(AllocationError):
        share_results(alloc, "b", exactly("gpu", capacity={"requests": {"memory": "1Mi"}}))


def test_shared_counters_keep_a_whole_gpu_and_its_mig_devices_apart():
    """DynamicMIG: the whole GPU consumes every counter of its set, so a MIG device of it blocks it."""
    alloc = Allocator(NODE, slices("1xh100-80gb", mig_mode="dynamic"), device_classes())
    alloc.allocate([claim("m", exactly("mig", "mig.nvidia.com"))])
    with pytest.raises(AllocationError, match="request gpu: cannot allocate"):
        alloc.allocate([claim("g", exactly("gpu"))])


def test_all_devices_of_a_pool_being_updated_cannot_be_allocated():
    """``allocationMode: All`` while a pool has fewer slices than ``resourceSliceCount``: the scheduler waits."""
    objs = slices("2xh100-80gb")
    objs[0]["spec"]["pool"]["resourceSliceCount"] = 2
    alloc = Allocator(NODE, objs, device_classes())
    with pytest.raises(AllocationError, match=r"asks for all devices, but resource pool gpu.nvidia.com/node-a is"):
        alloc.allocate([claim("all", exactly("gpus", allocationMode="All"))])
    assert devices_of(alloc.allocate([claim("one", exactly("gpu"))])[0]) == ["gpu-0"]


def test_a_shared_device_consumes_its_counters_once_for_all_its_shares():
    """Counters belong to the device: a second share of a device that allows multiple allocations takes none."""
    counters = {"name": "set", "counters": {"memory-slice-0": {"value": "1"}}}
    device = {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "attributes": {"type": {"string": "gpu"}},
        "consumesCounters": [{"counterSet": "set", "counters": {"memory-slice-0": {"value": "1"}}}],
    }
    obj = {
        "metadata": {"name": "s"},
        "spec": {
            "driver": GPU,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "sharedCounters": [counters],
            "devices": [device],
        },
    }
    alloc = Allocator(NODE, [obj], device_classes())
    ids = {share_results(alloc, f"s{i}", exactly("gpu"))[0]["shareID"] for i in range(3)}
    assert len(ids) == 3


def counted_slice(*devices: Mapping[str, Any]) -> dict[str, Any]:
    """One pool with a counter set ``set`` of 8 ``mem``; each device consumes the ``mem`` given."""
    return {
        "metadata": {"name": "s"},
        "spec": {
            "driver": GPU,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "sharedCounters": [{"name": "set", "counters": {"mem": {"value": "8"}}}],
            "devices": list(devices),
        },
    }


def counted_device(name: str, mem: str, *, shared: bool = False) -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": name,
        "attributes": {"type": {"string": "gpu"}, "id": {"string": name}},
        "consumesCounters": [{"counterSet": "set", "counters": {"mem": {"value": mem}}}],
    }
    if shared:
        device["allowMultipleAllocations"] = True
    return device


def named(request: str, device: str, **fields: Any) -> dict[str, Any]:
    return exactly(request, GPU, f'device.attributes["{GPU}"].id == "{device}"', **fields)


def test_another_share_of_a_counted_device_does_not_count_its_counters_again():
    """A shared device already holding a share has its counters counted: a claim taking another share of it
    plus a second device needs only the second device's counters (kubernetes
    staging/src/k8s.io/dynamic-resource-allocation/structured/internal/incubating/allocator_incubating.go
    (v1.36): counters are consumed once per allocated device)."""
    alloc = Allocator(
        NODE, [counted_slice(counted_device("a", "4", shared=True), counted_device("b", "4"))], device_classes()
    )
    alloc.allocate([claim("one", named("a", "a"))])
    got = alloc.allocate([claim("two", named("a", "a"), named("b", "b"))])[0]
    assert devices_of(got) == ["a", "b"]


def test_an_admin_access_request_does_not_take_the_device_from_a_request_beside_it():
    """adminAccess devices are not allocated: a normal request of the same claim still gets the GPU (kubernetes
    staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/allocator_stable.go (v1.36):
    allocateDevice skips the allocated check and bookkeeping for admin access)."""
    alloc = Allocator(NODE, slices("1xh100-80gb"), device_classes())
    got = alloc.allocate([claim("c", exactly("admin", adminAccess=True), exactly("gpu"))])[0]
    assert devices_of(got) == ["gpu-0", "gpu-0"]
    assert got["devices"]["results"][0]["adminAccess"] is True


@pytest.mark.parametrize("count", [0, -1, "two", 1.5, True])
def test_a_count_that_is_not_a_positive_integer_is_named(count: Any):
    """``count`` is a positive int64 in resource.k8s.io/v1 (kubernetes pkg/apis/resource/validation/
    validation.go (v1.36) rejects 0 and below)."""
    alloc = Allocator(NODE, slices("1xh100-80gb"), device_classes())
    with pytest.raises(AllocationError, match=r"request gpu: count must be a positive integer, found "):
        alloc.allocate([claim("c", exactly("gpu", count=count))])


def test_a_search_that_gives_up_names_the_request_and_the_constraint(monkeypatch: pytest.MonkeyPatch):
    """Two GPUs sharing a UUID cannot be found; the search's cap (fakegpu's own: the scheduler has a time
    limit instead) names what it was looking for."""
    monkeypatch.setattr("fakegpu.scheduling.allocator.MAX_STEPS", 5)
    alloc = Allocator(NODE, slices("8xh100-80gb"), device_classes())
    same = [{"requests": ["gpus"], "matchAttribute": f"{GPU}/uuid"}]
    with pytest.raises(
        AllocationError, match=rf"request gpus: gave up .* satisfy matchAttribute {GPU}/uuid of requests gpus"
    ):
        alloc.allocate([claim("c", exactly("gpus", count=2), constraints=same)])


def test_a_selector_that_does_not_parse_is_a_compile_error_with_the_expression_and_column():
    """A syntax error is reported as a compile error (kubernetes staging/src/k8s.io/dynamic-resource-allocation/
    cel/compile.go (v1.36): "compilation failed: ERROR: <input>:1:27: Syntax error"), not as a runtime error
    on some device."""
    alloc = Allocator(NODE, slices("1xa100-40gb"), device_classes())
    expression = 'device.attributes["gpu.nvidia.com"].index =='
    with pytest.raises(AllocationError) as refused:
        alloc.allocate([claim("a", exactly("gpu", GPU, expression))])
    assert str(refused.value) == (
        "ResourceClaim default/a: request gpu: request selector #0: CEL compile error: syntax error at column 43 of "
        f"{expression!r}"
    )


def test_selectors_are_evaluated_only_until_the_request_is_met():
    """The scheduler tests devices one by one while it fills a request (kubernetes staging/src/k8s.io/
    dynamic-resource-allocation/structured/internal/stable/allocator_stable.go (v1.36), allocateOne): a
    selector that fails on a later device does not abort a request the first device met."""
    alloc = Allocator(NODE, [counted_slice(counted_device("a", "1"), counted_device("b", "1"))], device_classes())
    lazy = f'device.attributes["{GPU}"].id == "a" || device.attributes["{GPU}"].nosuch == 1'
    assert devices_of(alloc.allocate([claim("one", exactly("gpu", GPU, lazy))])[0]) == ["a"]
    with pytest.raises(AllocationError, match=r"request gpu: request selector #0: CEL runtime error on device .*/b"):
        alloc.allocate([claim("two", exactly("gpu", GPU, lazy))])
