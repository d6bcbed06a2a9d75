"""Runtime health: one place, consistent for the device plugin view and the DRA view."""

from __future__ import annotations

import pytest

from fakegpu.control.health_ops import gpu_status
from fakegpu.sharing.live_inventory import LiveInventory, UnknownDeviceError
from tests.inventory_builders import inventory, time_slicing


def test_gpu_health_covers_replicas_and_is_reversible(tmp_path):
    live = LiveInventory(inventory(tmp_path, "2xa100-40gb", config=time_slicing(2)))
    calls = []
    live.subscribe(lambda: calls.append(live.generation))
    changed = live.set_health("1", False, xid=79)
    assert len(changed) == 2 and all("::" in i for i in changed)
    assert live.inventory.resources[0].healthy == 2
    gpu1 = live.inventory.node.gpus[1].uuid
    assert live.unhealthy() == {gpu1: 79}
    live.set_health(gpu1, True)
    assert live.inventory.resources[0].healthy == 4
    assert live.unhealthy() == {}
    assert calls == [1, 2]


def test_mig_devices_follow_their_gpu_even_when_the_plugin_hides_them(tmp_path):
    inv = inventory(tmp_path, "1xh100-80gb", layout="all-3g.40gb")  # migStrategy none: full GPU only
    live = LiveInventory(inv)
    live.set_health("0", False, xid=48)
    gpu = inv.node.gpus[0]
    assert live.unhealthy() == {gpu.uuid: 48, **{m.uuid: 48 for m in gpu.mig_devices}}
    live.set_health(gpu.mig_devices[0].uuid, True)
    assert gpu.mig_devices[0].uuid not in live.unhealthy()


def test_ignored_xids_change_nothing(tmp_path):
    live = LiveInventory(inventory(tmp_path, "1xt4"))
    assert live.inject_xid("0", 43) == []
    assert live.unhealthy() == {}
    assert live.inject_xid("0", 79) != []
    assert live.unhealthy() == {live.inventory.node.gpus[0].uuid: 79}


def test_unknown_target(tmp_path):
    live = LiveInventory(inventory(tmp_path, "1xt4"))
    with pytest.raises(UnknownDeviceError, match="no device, GPU UUID or GPU index 'GPU-nope'"):
        live.set_health("GPU-nope", False)
    with pytest.raises(UnknownDeviceError):
        live.inject_xid("7", 79)


def test_initial_xid_from_node_spec(tmp_path):
    live = LiveInventory(inventory(tmp_path, node_spec={"gpus": [{"model": "h100-80gb", "xid": 79}]}))
    assert list(live.unhealthy().values()) == [79]


def test_gpu_lost_and_unmonitored_as_the_device_plugin_sees_them(tmp_path):
    """NVIDIA/k8s-device-plugin ``internal/rm/health.go`` (v0.18 and later; v0.20.0 at commit a9e8baf):
    ``ERROR_GPU_IS_LOST`` marks every device unhealthy; a GPU whose events cannot be registered (no handle,
    no supported events) is marked unhealthy, and everything that reads the GPUs' health sees it so."""
    live = LiveInventory(inventory(tmp_path, "2xa100-40gb", config=time_slicing(2)))
    gpu1 = live.inventory.node.gpus[1].uuid
    assert len(live.unmonitored(gpu1)) == 2
    assert live.inventory.resources[0].healthy == 2
    assert live.unhealthy() == {gpu1: None}
    assert len(live.gpu_lost()) == 2  # only the two still healthy: GPU 1 was already unhealthy
    assert live.inventory.resources[0].healthy == 0
    assert set(live.unhealthy()) == {g.uuid for g in live.inventory.node.gpus}
    kinds = {uuid: [e.kind for e in events] for uuid, events in live.health_events().items()}
    assert kinds == {live.inventory.node.gpus[0].uuid: ["gpu-lost"], gpu1: ["unmonitored", "gpu-lost"]}


def test_an_unmonitored_gpu_keeps_its_xid_and_is_unhealthy_to_every_reader(tmp_path):
    """NVIDIA/k8s-device-plugin ``internal/rm/health.go`` at commit a9e8baf (v0.20.0): a device whose events
    cannot be registered goes on the unhealthy channel. ``fakegpu ctl health``'s listing (and the DCGM exporter,
    the compute-domain daemon's readiness, host IMEX) read ``unhealthy()``: the GPU is not healthy there."""
    live = LiveInventory(inventory(tmp_path, "2xa100-40gb"))
    gpu0, gpu1 = (g.uuid for g in live.inventory.node.gpus)
    live.inject_xid(gpu0, 79)
    live.unmonitored(gpu0)
    live.unmonitored(gpu1)
    assert live.unhealthy() == {gpu0: 79, gpu1: None}
    assert [(g["healthy"], g["xid"]) for g in gpu_status(live)] == [(False, 79), (False, None)]


def test_every_xid_is_recorded_for_the_dra_driver_even_an_ignored_one(tmp_path):
    live = LiveInventory(inventory(tmp_path, "1xt4"))
    assert live.inject_xid("0", 43) == []
    (events,) = live.health_events().values()
    assert [(e.kind, e.xid, e.forced) for e in events] == [("xid", 43, False)]
