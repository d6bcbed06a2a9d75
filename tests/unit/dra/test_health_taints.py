"""Device health as NVIDIA's DRA driver publishes it: taints and the health it streams, from NVML events.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/device_health.go``
(``healthEventToTaint``, ``xidsToSkip``, ``sendHealthEventForAllDevices``) at commit bc3c4d8,
``cmd/gpu-kubelet-plugin/allocatable.go`` (``AddOrUpdateTaint``) at commit 14046d0 and
``cmd/gpu-kubelet-plugin/device_health_status.go`` (``updateDeviceHealth``) at commit 46c7cc2; the gate is
``NVMLDeviceHealthCheck`` (``pkg/featuregates/featuregates.go`` at commit 0807eed).
"""

from __future__ import annotations

from typing import Any

from fakegpu.dra.feature_gates import parse_feature_gates
from fakegpu.dra.health_taints import device_health, device_taints, folded_taints, published_taints
from fakegpu.dra.resource_slices import SliceOptions, build_slice_specs
from fakegpu.sharing.health import HealthEvent, XidPolicy
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory

HEALTH_CHECK = parse_feature_gates("NVMLDeviceHealthCheck=true")
"""NVIDIA's health gate: the slices carry the devices' health taints."""

XID = "gpu.nvidia.com/xid"
POLICY = XidPolicy()


def xid(n: int) -> HealthEvent:
    return HealthEvent("xid", n)


def devices(specs: list[dict[str, Any]]) -> dict[str, Any]:
    return {d["name"]: d.get("taints") for s in specs for d in s.get("devices", [])}


def test_a_critical_xid_is_noschedule_and_an_application_xid_none():
    assert folded_taints([xid(79)], POLICY) == ({"key": XID, "value": "79", "effect": "NoSchedule"},)
    for skipped in (13, 31, 43, 45, 68, 109):
        assert folded_taints([xid(skipped)], POLICY) == ({"key": XID, "value": str(skipped), "effect": "None"},)


def test_additional_xids_to_ignore_make_a_critical_xid_informational():
    policy = XidPolicy.for_dra_driver({"ADDITIONAL_XIDS_TO_IGNORE": "79"})
    assert folded_taints([xid(79)], policy) == ({"key": XID, "value": "79", "effect": "None"},)


def test_one_taint_per_key_and_noschedule_stays():
    # None is replaced by the next XID; NoSchedule is sticky (AddOrUpdateTaint).
    assert folded_taints([xid(43), xid(79)], POLICY) == ({"key": XID, "value": "79", "effect": "NoSchedule"},)
    assert folded_taints([xid(79), xid(43), xid(94)], POLICY) == ({"key": XID, "value": "79", "effect": "NoSchedule"},)
    assert folded_taints([xid(43), xid(13)], POLICY) == ({"key": XID, "value": "13", "effect": "None"},)


def test_gpu_lost_and_unmonitored_have_no_value_and_keep_the_xid_taint():
    events = [xid(43), HealthEvent("unmonitored"), HealthEvent("gpu-lost")]
    assert folded_taints(events, POLICY) == (
        {"key": XID, "value": "43", "effect": "None"},
        {"key": "gpu.nvidia.com/unmonitored", "effect": "None"},
        {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"},
    )


def test_a_device_marked_unhealthy_directly_is_fatal_whatever_the_xid():
    assert folded_taints([HealthEvent("xid", 43, forced=True)], POLICY)[0]["effect"] == "NoSchedule"
    assert folded_taints([HealthEvent("xid", None, forced=True)], POLICY)[0]["value"] == "unknown"


def test_streamed_health_follows_updateDeviceHealth():
    assert device_health([], POLICY) == ("Healthy", "")
    assert device_health([xid(43)], POLICY) == ("Healthy", "non-fatal XID 43 reported by NVML")
    assert device_health([xid(79)], POLICY) == ("Unhealthy", "critical XID 79 reported by NVML")
    assert device_health([HealthEvent("gpu-lost")], POLICY) == ("Unhealthy", "GPU is lost")
    assert device_health([HealthEvent("unmonitored")], POLICY) == ("Unknown", "device health is not monitored")
    # Unhealthy is sticky: a later non-fatal event keeps the message of the event that made it so.
    assert device_health([xid(79), xid(43), HealthEvent("unmonitored")], POLICY) == (
        "Unhealthy",
        "critical XID 79 reported by NVML",
    )
    assert device_health([HealthEvent("unmonitored"), xid(43)], POLICY)[0] == "Healthy"


def live(gpus: str, layout: str | None = None) -> LiveInventory:
    return LiveInventory(load_inventory(InventoryInputs(node_name="n", gpus=(gpus,), mig_layout=layout)))


def test_gpu_lost_taints_every_device_of_the_node_and_unmonitored_one_gpu():
    state = live("2xh100-80gb")
    state.unmonitored(state.inventory.node.gpus[1].uuid)
    opts = SliceOptions(feature_gates=HEALTH_CHECK)
    assert devices(build_slice_specs(state.inventory.node, opts, published_taints(state))) == {
        "gpu-0": None,
        "gpu-1": [{"key": "gpu.nvidia.com/unmonitored", "effect": "None"}],
    }
    state.gpu_lost()
    lost = {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}
    tainted = devices(build_slice_specs(state.inventory.node, opts, published_taints(state)))
    assert tainted == {"gpu-0": [lost], "gpu-1": [{"key": "gpu.nvidia.com/unmonitored", "effect": "None"}, lost]}


def test_without_the_gate_nothing_is_tainted():
    state = live("2xh100-80gb")
    state.inject_xid("0", 79)
    state.gpu_lost()
    assert device_taints(state.health_events(), POLICY)  # the events are there
    specs = build_slice_specs(state.inventory.node, SliceOptions(), published_taints(state))
    assert devices(specs) == {"gpu-0": None, "gpu-1": None}


def test_a_non_fatal_xid_is_recorded_and_tainted_though_the_device_stays_healthy():
    state = live("1xh100-80gb", "all-3g.40gb")
    assert state.inject_xid("0", 43) == []
    assert state.unhealthy() == {}
    specs = build_slice_specs(state.inventory.node, SliceOptions(feature_gates=HEALTH_CHECK), published_taints(state))
    assert set(map(str, devices(specs).values())) == {str([{"key": XID, "value": "43", "effect": "None"}])}


def test_healthy_again_forgets_the_events():
    state = live("1xh100-80gb")
    state.inject_xid("0", 79)
    state.set_health("0", True)
    assert published_taints(state) == {}
