"""The device map: every device name the DRA driver publishes, and what each one is."""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.dra.device_map import published_devices
from fakegpu.sharing.identifiers import gpu_uuid, mig_uuid
from fakegpu.sharing.node import Node, build_node
from fakegpu.sharing.node_spec import parse_node_spec

NODE = "node-a"


def node(*gpus: dict[str, Any]) -> Node:
    return build_node(parse_node_spec({"gpus": list(gpus)}, "test"), NODE, source="test")


def h100s(count: int = 2) -> Node:
    return node({"model": "h100-80gb", "count": count})


def test_whole_gpus_are_published_by_index():
    devices = published_devices(h100s(2), "static")
    assert list(devices) == ["gpu-0", "gpu-1"]
    assert devices["gpu-1"].uuid == gpu_uuid(NODE, 1)
    assert devices["gpu-1"].kind == "gpu"


def test_static_mig_publishes_the_instances_not_the_gpu():
    n = node(
        {
            "model": "h100-80gb",
            "migEnabled": True,
            "migDevices": [{"profile": "1g.10gb", "start": 0}, {"profile": "3g.40gb", "start": 4}],
        },
        {"model": "h100-80gb"},
    )
    devices = published_devices(n, "static")
    assert list(devices) == ["gpu-0-mig-1g10gb-19-0", "gpu-0-mig-3g40gb-9-4", "gpu-1"]
    mig = devices["gpu-0-mig-3g40gb-9-4"]
    assert (mig.kind, mig.profile, mig.start, mig.parent_index) == ("mig", "3g.40gb", 4, 0)
    assert mig.uuid == mig_uuid(NODE, 0, "3g.40gb", 4)


def test_dynamic_mig_publishes_every_placement_and_the_full_gpu():
    devices = published_devices(h100s(1), "dynamic")
    model = h100s(1).gpus[0].model
    assert len(devices) == 1 + sum(len(p.placements) for p in model.mig_profiles)
    assert "gpu-0" in devices
    # `+me` becomes `-me`: toRFC1123Compliant in kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/mig.go
    assert "gpu-0-mig-1g10gb-me-20-6" in devices
    assert "gpu-0-mig-7g80gb-0-0" in devices
    assert all(d.uuid is None for d in devices.values() if d.kind == "mig")


def test_dynamic_mig_on_a_mig_enabled_ampere_gpu_does_not_offer_the_whole_gpu():
    n = node({"model": "a100-40gb", "migEnabled": True}, {"model": "a100-40gb"}, {"model": "t4"})
    devices = published_devices(n, "dynamic")
    assert "gpu-0" not in devices
    assert "gpu-0-mig-1g5gb-19-0" in devices
    assert "gpu-1" in devices
    assert "gpu-2" in devices
    assert not any(name.startswith("gpu-2-mig") for name in devices)


@pytest.mark.parametrize("mig_mode", ["static", "dynamic"])
def test_names_match_the_slice_publisher(mig_mode):
    resource_slices = pytest.importorskip("fakegpu.dra.resource_slices")
    n = node(
        {"model": "a100-40gb", "migEnabled": True, "migDevices": {"1g.5gb": 2, "3g.20gb": 1}},
        {"model": "h100-80gb", "migEnabled": True, "migDevices": {"1g.10gb+me": 1}},
        {"model": "h100-80gb"},
        {"model": "l4"},
    )
    specs = resource_slices.build_slice_specs(n, resource_slices.SliceOptions(mig_mode=mig_mode))
    published = [d["name"] for s in specs for d in resource_slices.spec_devices(s)]
    assert sorted(published) == sorted(published_devices(n, mig_mode))
