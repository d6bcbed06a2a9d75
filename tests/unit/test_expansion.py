"""Node + config -> resources, pinned against what a real NVIDIA node advertises."""

from __future__ import annotations

import re

import pytest

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.mps_daemon import mps_daemon_error
from tests.inventory_builders import counts, inventory, mps, time_slicing

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"

CASES = [
    # (gpus, layout, strategy, config, expected resource counts)
    ("8xh100-80gb", None, "none", None, {"nvidia.com/gpu": 8}),
    ("8xh100-80gb", "all-1g.10gb", "none", None, {"nvidia.com/gpu": 8}),
    ("8xh100-80gb", "all-1g.10gb", "mixed", None, {"nvidia.com/mig-1g.10gb": 56}),
    ("8xh100-80gb", "all-1g.10gb", "single", None, {"nvidia.com/gpu": 56}),
    (
        "8xh100-80gb",
        "all-balanced",
        "mixed",
        None,
        {"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-2g.20gb": 8, "nvidia.com/mig-3g.40gb": 8},
    ),
    ("8xh100-80gb", "all-1g.10gb+me", "mixed", None, {"nvidia.com/mig-1g.10gb.me": 8}),
    ("8xh100-80gb", "all-1g.20gb", "mixed", None, {"nvidia.com/mig-1g.20gb": 32}),
    ("8xa100-40gb", "all-1g.5gb", "mixed", None, {"nvidia.com/mig-1g.5gb": 56}),
    ("8xa100-40gb", "all-1g.10gb", "mixed", None, {"nvidia.com/mig-1g.10gb": 32}),
    ("8xa100-80gb", "all-1g.10gb", "mixed", None, {"nvidia.com/mig-1g.10gb": 56}),
    ("4xa30", "all-balanced", "mixed", None, {"nvidia.com/mig-1g.6gb": 8, "nvidia.com/mig-2g.12gb": 4}),
    ("8xa100-40gb", None, "none", time_slicing(4), {"nvidia.com/gpu": 32}),
    ("8xa100-40gb", None, "none", time_slicing(4, renameByDefault=True), {"nvidia.com/gpu.shared": 32}),
    ("8xh100-80gb", "all-1g.10gb", "mixed", time_slicing(2, "nvidia.com/mig-1g.10gb"), {"nvidia.com/mig-1g.10gb": 112}),
    ("8xh100-80gb", "all-1g.10gb", "single", time_slicing(3), {"nvidia.com/gpu": 168}),
    ("2xt4", None, "none", mps(4), {"nvidia.com/gpu": 8}),
    ("2xt4", None, "none", mps(4, renameByDefault=True), {"nvidia.com/gpu.shared": 8}),
    (("4xa100-40gb", "2xt4"), "all-3g.20gb", "mixed", None, {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.20gb": 8}),
    ("8xh100-80gb", "all-enabled", "mixed", None, {}),
    ("8xh100-80gb", "all-disabled", "mixed", None, {"nvidia.com/gpu": 8}),
    ("8xh100-80gb", None, "none", time_slicing(2, "nvidia.com/mig-1g.10gb"), {"nvidia.com/gpu": 8}),
]


@pytest.mark.parametrize(("gpus", "layout", "strategy", "config", "expected"), CASES)
def test_strategy_combinations(tmp_path, gpus, layout, strategy, config, expected):
    inv = inventory(tmp_path, gpus, layout=layout, config=config, cli={"mig_strategy": strategy})
    assert counts(inv) == expected


def test_time_slicing_ids_are_annotated_replicas(tmp_path):
    inv = inventory(tmp_path, "8xa100-40gb", config=time_slicing(4))
    ids = [d.id for d in inv.resources[0].devices]
    assert all(re.fullmatch(rf"GPU-{UUID}::[0-3]", i) for i in ids)
    assert len(set(ids)) == 32
    per_gpu = {i.split("::")[0] for i in ids}
    assert len(per_gpu) == 8
    assert sorted(i.split("::")[1] for i in ids if i.startswith(ids[0].split("::")[0])) == ["0", "1", "2", "3"]
    assert inv.resources[0].sharing == "time-slicing"
    assert inv.resources[0].fail_requests_greater_than_one is False


def test_mig_ids_and_indices(tmp_path):
    inv = inventory(tmp_path, "2xh100-80gb", layout="all-3g.40gb", cli={"mig_strategy": "mixed"})
    devices = inv.resources[0].devices
    assert all(re.fullmatch(rf"MIG-{UUID}", d.id) for d in devices)
    assert [d.index_id for d in devices] == ["0:0", "0:1", "1:0", "1:1"]
    assert {d.parent for d in devices} == {g.uuid for g in inv.node.gpus}
    assert all(d.memory_mib == 40448 for d in devices)


def test_mps_limits_and_admission_default(tmp_path):
    inv = inventory(tmp_path, "1xh100-80gb", config=mps(4))
    r = inv.resources[0]
    assert r.sharing == "mps" and r.fail_requests_greater_than_one is True
    assert {(d.mps_memory_limit_mib, d.mps_thread_percentage) for d in r.devices} == {(81559 // 4, 25)}


@pytest.mark.parametrize(
    ("gpus", "layout", "strategy", "config", "message"),
    [
        ("8xh100-80gb", "all-balanced", "single", None, "more than one MIG device type present on node"),
        ("8xh100-80gb", "all-enabled", "single", None, "device 0 has no MIG devices configured"),
        (
            ("4xh100-80gb", "2xt4"),
            "all-1g.10gb",
            "single",
            None,
            "all devices on the node must be configured with the same migEnabled value",
        ),
        ("8xh100-80gb", "all-1g.10gb", "single", mps(2), "sharing using MPS is not supported for MIG devices"),
    ],
)
def test_nvidia_inventory_errors(tmp_path, gpus, layout, strategy, config, message):
    with pytest.raises(SpecError) as err:
        inventory(tmp_path, gpus, layout=layout, config=config, cli={"mig_strategy": strategy})
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("gpus", "replicas", "error"),
    [
        ("1xt4", 48, None),
        ("1xt4", 49, "invalid MPS configuration: invalid device maximum allowed replicas exceeded: 49 > 48"),
        ("1xv100-32gb", 16, None),
        ("1xv100-32gb", 17, "invalid MPS configuration: invalid device maximum allowed replicas exceeded: 17 > 16"),
    ],
)
def test_mps_replicas_over_the_cap_load_and_the_daemon_refuses_them(tmp_path, gpus, replicas, error):
    """NVIDIA/k8s-device-plugin: the config accepts any count (api/config/v1/replicas.go); the MPS
    control daemon refuses more clients than 48 (compute capability >= 7.5) or 16
    (cmd/mps-control-daemon/mps/device.go assertReplicas)."""
    inv = inventory(tmp_path, gpus, config=mps(replicas))
    assert counts(inv) == {"nvidia.com/gpu": replicas}
    resource = inv.resource("nvidia.com/gpu")
    assert resource is not None
    assert mps_daemon_error(resource, inv.node) == error


def test_mixed_empty_mig_gpu_only_warns(tmp_path):
    inv = inventory(tmp_path, "2xh100-80gb", layout="all-enabled", cli={"mig_strategy": "mixed"})
    assert any("has MIG enabled but no MIG devices configured" in w for w in inv.warnings)


def test_sharing_a_resource_the_node_lacks_warns(tmp_path):
    inv = inventory(tmp_path, "1xh100-80gb", config=time_slicing(2, "nvidia.com/mig-1g.10gb"))
    assert any("nvidia.com/mig-1g.10gb is not advertised" in w for w in inv.warnings)


def test_honoured_devices_selection_splits_the_resource(tmp_path):
    config = {
        "version": "v1",
        "sharing": {
            "timeSlicing": {
                "resources": [{"name": "nvidia.com/gpu", "replicas": 2, "rename": "gpu-shared", "devices": [0, 1]}]
            }
        },
    }
    inv = inventory(tmp_path, "4xl4", config=config, honor_rename=True)
    assert counts(inv) == {"nvidia.com/gpu": 2, "nvidia.com/gpu-shared": 4}


@pytest.mark.parametrize(
    ("xid", "env", "health"),
    [
        (79, {}, "Unhealthy"),
        (13, {}, "Healthy"),
        (109, {}, "Healthy"),
        (79, {"DP_DISABLE_HEALTHCHECKS": "all"}, "Healthy"),
        (79, {"DP_DISABLE_HEALTHCHECKS": "79"}, "Healthy"),
        (13, {"DP_ENABLE_HEALTHCHECKS": "13"}, "Unhealthy"),
        # NVIDIA's IsAllDisabled: with every XID disabled the checker never starts (health.go, v0.18+).
        (13, {"DP_DISABLE_HEALTHCHECKS": "all", "DP_ENABLE_HEALTHCHECKS": "13"}, "Healthy"),
        (13, {"DP_ENABLE_HEALTHCHECKS": "all"}, "Unhealthy"),
    ],
)
def test_initial_xid_health(tmp_path, xid, env, health):
    spec = {"gpus": [{"model": "h100-80gb", "xid": xid}, {"model": "h100-80gb"}]}
    inv = inventory(tmp_path, node_spec=spec, env=env)
    assert [d.health for d in inv.resources[0].devices] == [health, "Healthy"]


def test_unhealthy_gpu_makes_all_its_replicas_and_mig_devices_unhealthy(tmp_path):
    spec = {
        "gpus": [
            {"model": "h100-80gb", "health": "Unhealthy", "migEnabled": True, "migDevices": {"1g.10gb": 7}},
            {"model": "h100-80gb", "migEnabled": True, "migDevices": {"1g.10gb": 7}},
        ]
    }
    inv = inventory(
        tmp_path, node_spec=spec, cli={"mig_strategy": "mixed"}, config=time_slicing(2, "nvidia.com/mig-1g.10gb")
    )
    health = [d.health for d in inv.resources[0].devices]
    assert health.count("Unhealthy") == 14 and health.count("Healthy") == 14


def test_resource_order_and_socket_names(tmp_path):
    inv = inventory(
        tmp_path,
        ("1xh100-80gb", "1xl4"),
        node_spec={
            "gpus": [
                {"model": "h100-80gb", "migEnabled": True, "migDevices": {"1g.10gb+me": 1, "3g.40gb": 1}},
                {"model": "l4"},
            ]
        },
        cli={"mig_strategy": "mixed"},
    )
    assert [(r.name, r.socket_name) for r in inv.resources] == [
        ("nvidia.com/gpu", "nvidia-gpu.sock"),
        ("nvidia.com/mig-1g.10gb.me", "nvidia-mig-1g.10gb.me.sock"),
        ("nvidia.com/mig-3g.40gb", "nvidia-mig-3g.40gb.sock"),
    ]
