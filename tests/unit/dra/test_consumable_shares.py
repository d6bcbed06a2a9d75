"""NVIDIA's consumable shares: the ``--consumable-shares`` values and what they do to the advertised devices.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/consumable_shares.go`` and
``consumable_shares_test.go`` at commit f49e778, and ``validateCLIFlags`` in ``cmd/gpu-kubelet-plugin/main.go``
at commit 14046d0 (main, v0.5.0-dev; the ConsumableShares gate is new in 0.5).
"""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.dra.consumable_shares import OFF, ConsumableShares, advertised, parse_consumable_shares
from fakegpu.dra.feature_gates import FeatureGates, parse_feature_gates
from fakegpu.dra.resource_slices import SliceOptions, build_slice_specs, spec_devices
from fakegpu.sharing.inputs import InventoryInputs, load_node
from fakegpu.sharing.node import Node

GATE_ON = parse_feature_gates("ConsumableShares=true")


def node_from(gpus: str, layout: str | None = None) -> Node:
    return load_node(InventoryInputs(node_name="node-a", gpus=(gpus,), mig_layout=layout))


def gpu(memory: str = "16Gi") -> dict[str, Any]:
    """NVIDIA's test device: ``gpu-0`` with a memory capacity and nothing else."""
    return {"name": "gpu-0", "capacity": {"memory": {"value": memory}}}


def policy(default: str, minimum: str, maximum: str, step: str) -> dict[str, Any]:
    return {"default": default, "validRange": {"min": minimum, "max": maximum, "step": step}}


@pytest.mark.parametrize(
    ("flag", "memory", "shares"),
    [
        ("unlimited", {"value": "16Gi", "requestPolicy": policy("0", "0", "16Gi", "1Mi")}, None),
        ("memory", {"value": "16Gi", "requestPolicy": policy("16Gi", "1Mi", "16Gi", "1Mi")}, None),
        (
            "4",
            {"value": "16Gi", "requestPolicy": policy("0", "0", "16Gi", "1Mi")},
            {"value": "4", "requestPolicy": policy("1", "1", "4", "1")},
        ),
    ],
)
def test_each_mode_advertises_nvidias_request_policies(flag, memory, shares):
    """TestApplyConsumableShares: the three modes on a 16Gi device."""
    device = advertised(gpu(), parse_consumable_shares(flag, GATE_ON), 36)
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"]["memory"] == memory
    assert device["capacity"].get("shares") == shares


def test_unaligned_memory_is_rounded_down_to_whole_mebibytes():
    """TestApplyConsumableShares 'unlimited option with unaligned memory rounds down max': 10Mi + 500 bytes."""
    device = advertised(gpu(str(10 * 1024 * 1024 + 500)), parse_consumable_shares("unlimited", GATE_ON), 36)
    assert device["capacity"]["memory"] == {"value": "10Mi", "requestPolicy": policy("0", "0", "10Mi", "1Mi")}


def test_off_or_an_api_server_without_the_fields_leaves_devices_alone():
    assert advertised(gpu(), OFF, 36) == gpu()
    assert advertised(gpu(), ConsumableShares("unlimited"), 33) == gpu()
    assert advertised(gpu(), ConsumableShares("unlimited"), 34)["allowMultipleAllocations"] is True


NEEDS_GATE = "invalid CLI flags: --consumable-shares requires feature gate ConsumableShares to be enabled"
MUST_BE = "(must be 'disabled', 'memory', 'unlimited', or a positive integer)"


@pytest.mark.parametrize(
    ("flag", "gates", "error"),
    [
        ("memory", FeatureGates(), NEEDS_GATE),
        ("0", GATE_ON, f'invalid CLI flags: invalid value for --consumable-shares: "0" {MUST_BE}'),
        ("-3", GATE_ON, 'invalid value for --consumable-shares: "-3"'),
        (" 4", GATE_ON, 'invalid value for --consumable-shares: " 4"'),
        ("Memory", GATE_ON, 'invalid value for --consumable-shares: "Memory"'),
        ("", GATE_ON, 'invalid value for --consumable-shares: ""'),
    ],
)
def test_flag_values_are_checked_with_nvidias_texts(flag, gates, error):
    with pytest.raises(ValueError, match=r"^invalid CLI flags: ") as err:
        parse_consumable_shares(flag, gates)
    assert error in str(err.value)


def test_accepted_flag_values():
    assert parse_consumable_shares("disabled", FeatureGates()) == OFF
    assert parse_consumable_shares("disabled", GATE_ON) == OFF
    assert parse_consumable_shares("+10", GATE_ON) == ConsumableShares("count", 10)  # strconv.Atoi takes a sign
    assert str(parse_consumable_shares("unlimited", GATE_ON)) == "unlimited"


@pytest.mark.parametrize("mig_mode", ["static", "dynamic"])
def test_every_full_gpu_and_mig_device_is_shared(mig_mode):
    """applyConsumableShares runs for full GPUs and static and dynamic MIG devices (deviceinfo.go GetDevice,
    allocatable.go PartGetDevice); counters and the device count per slice are unchanged."""
    node = node_from("2xa100-40gb", layout="all-1g.5gb" if mig_mode == "static" else None)
    shares = ConsumableShares("count", 3)
    plain = build_slice_specs(node, SliceOptions(mig_mode=mig_mode))
    shared = build_slice_specs(node, SliceOptions(mig_mode=mig_mode, shares=shares))
    assert [len(s.get("devices", [])) for s in shared] == [len(s.get("devices", [])) for s in plain]
    devices = [d for s in shared for d in spec_devices(s)]
    assert devices and all(d["allowMultipleAllocations"] is True for d in devices)
    assert all(d["capacity"]["shares"]["value"] == "3" for d in devices)
    assert all(d["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] == "1Mi" for d in devices)
    before = {d["name"]: d for s in plain for d in spec_devices(s)}
    assert all(d.get("consumesCounters") == before[d["name"]].get("consumesCounters") for d in devices)


def test_v1beta1_carries_the_fields_under_basic():
    node = node_from("1xh100-80gb")
    opts = SliceOptions(server_minor=34, api_version="resource.k8s.io/v1beta1", shares=ConsumableShares("memory"))
    (spec,) = build_slice_specs(node, opts)
    (device,) = spec["devices"]
    assert device["basic"]["allowMultipleAllocations"] is True
    assert device["basic"]["capacity"]["memory"] == {
        "value": "81559Mi",
        "requestPolicy": policy("81559Mi", "1Mi", "81559Mi", "1Mi"),
    }
