"""Which RPC calls an armed GPU fault counts (``LiveInventory.note_call``), and the XID classes answers show."""

from __future__ import annotations

from pathlib import Path

from fakegpu.control.gpu_fault_ops import xid_class
from fakegpu.sharing.gpu_faults import parse_fault_text
from fakegpu.sharing.health import XidPolicy
from fakegpu.sharing.live_inventory import LiveInventory
from tests.inventory_builders import inventory


def test_an_armed_fault_counts_only_calls_that_use_its_gpu(tmp_path: Path) -> None:
    """NVIDIA's mock NVML keeps one call counter per device and trips it when that device has seen
    ``after_calls`` calls (NVIDIA/k8s-test-infra ``pkg/gpu/mocknvml/engine/failure_injector.go`` @ 08a563f):
    a call that uses another GPU does not count, one that uses a MIG device of the GPU does."""
    live = LiveInventory(inventory(tmp_path, "2xa100-40gb", layout="all-3g.20gb"))
    gpu0, gpu1 = live.inventory.node.gpus
    live.strike_gpu(gpu1.uuid, parse_fault_text("thermal after_calls=2", "test"))
    assert live.note_call({gpu0.uuid}) == []
    assert [a.calls_left for a in live.armed()] == [2]
    live.note_call({gpu1.mig_devices[0].uuid})
    assert [a.calls_left for a in live.armed()] == [1]
    live.note_call({gpu0.uuid, gpu1.uuid})
    assert live.armed() == []
    assert live.condition(gpu1.uuid).kinds == ("thermal",)
    assert live.condition(gpu0.uuid).kinds == ()


def test_counting_alone_announces_nothing(tmp_path: Path) -> None:
    live = LiveInventory(inventory(tmp_path, "1xt4"))
    live.strike_gpu("0", parse_fault_text("xid xid=79 after_calls=3", "test"))
    generation = live.generation
    live.note_call()
    assert live.generation == generation, "no device, slice or reading changed: no push, no republish"


def test_xid_classes_follow_nvidias_lists() -> None:
    """NVIDIA/k8s-device-plugin ``internal/rm/health.go`` @ 02597b9 (the default-ignored application XIDs,
    ``DP_DISABLE_HEALTHCHECKS``, ``DP_ENABLE_HEALTHCHECKS``) and kubernetes-sigs/dra-driver-nvidia-gpu
    ``cmd/gpu-kubelet-plugin/device_health.go`` @ 15a116f (``ADDITIONAL_XIDS_TO_IGNORE``)."""
    default = XidPolicy()
    assert [xid_class(default, x) for x in (79, 13, 94)] == ["fatal", "application", "fatal"]
    disabled = XidPolicy.from_env({"DP_DISABLE_HEALTHCHECKS": "94", "DP_ENABLE_HEALTHCHECKS": "13"})
    assert [xid_class(disabled, x) for x in (79, 13, 94)] == ["fatal", "fatal", "ignored by config"]
    everything_off = XidPolicy.from_env({"DP_DISABLE_HEALTHCHECKS": "all"})
    assert [xid_class(everything_off, x) for x in (79, 13)] == ["ignored by config", "application"]
    dra = XidPolicy.for_dra_driver({"ADDITIONAL_XIDS_TO_IGNORE": "74"})
    assert [xid_class(dra, x) for x in (74, 43, 48)] == ["ignored by config", "application", "fatal"]
