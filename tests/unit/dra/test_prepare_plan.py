"""Prepare planning: allocation results, opaque configs and the environment each device gets.

Each device's env is its own CDI edit: ``FAKEGPU_VISIBLE_DEVICES`` stands where NVIDIA's claim specs put the
device's nodes, the spec's common edits carry NVIDIA's ``NVIDIA_VISIBLE_DEVICES=void``
(kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/cdi.go`` ``CreateClaimSpecFile``).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest

from fakegpu.dra.claim_cdi_specs import claim_spec
from fakegpu.dra.claim_error import ClaimError
from fakegpu.dra.device_map import published_devices
from fakegpu.dra.feature_gates import FeatureGates, parse_feature_gates
from fakegpu.dra.prepare_plan import prepare_plan
from fakegpu.runtime.cdi_spec_model import validate_spec
from fakegpu.sharing.identifiers import gpu_uuid, mig_uuid
from fakegpu.sharing.node import Node, build_node
from fakegpu.sharing.node_spec import parse_node_spec

NODE = "node-a"
DRIVER = "gpu.nvidia.com"
UID = "2e800b5e-0000-4000-8000-000000000001"
API = "resource.nvidia.com/v1beta1"


def node(*gpus: dict[str, Any]) -> Node:
    return build_node(parse_node_spec({"gpus": list(gpus)}, "test"), NODE, source="test")


def h100s(count: int = 2) -> Node:
    return node({"model": "h100-80gb", "count": count})


def result(device: str, request: str = "gpu", driver: str = DRIVER, pool: str = NODE, **extra: Any) -> dict[str, Any]:
    return {"request": request, "driver": driver, "pool": pool, "device": device, **extra}


def config(params: dict[str, Any] | None, requests=(), source="FromClaim", driver=DRIVER) -> dict[str, Any]:
    return {"source": source, "requests": list(requests), "opaque": {"driver": driver, "parameters": params}}


def claim(results, configs=None, *, uid=UID, api="resource.k8s.io/v1") -> dict[str, Any]:
    """An allocated claim shaped like the golden one the API server returned."""
    devices: dict[str, Any] = {"results": list(results)}
    if configs is not None:
        devices["config"] = list(configs)
    return {
        "apiVersion": api,
        "kind": "ResourceClaim",
        "metadata": {"name": "x", "namespace": "default", "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        "status": {
            "allocation": {
                "devices": devices,
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In"}]}]},
            },
        },
    }


def gpu_config(sharing: dict[str, Any] | None = None, kind: str = "GpuConfig", **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": API, "kind": kind, **extra}
    if sharing is not None:
        out["sharing"] = sharing
    return out


SHARING = parse_feature_gates("TimeSlicingSettings=true,MPSSupport=true")
"""What the config tests run with: NVIDIA admits sharing strategies only with these gates on."""


def prepare(c: dict[str, Any], n: Node | None = None, mig_mode="static", gates: FeatureGates = SHARING):
    return prepare_plan(c, DRIVER, NODE, published_devices(n or h100s(), mig_mode), gates)


def env_of(prep, device: str) -> dict[str, str]:
    (r,) = [r for r in prep.results if r.device == device]
    return dict(e.split("=", 1) for e in r.env)


# --- results --------------------------------------------------------------------------------------------


def test_whole_gpu_claim():
    prep = prepare(claim([result("gpu-1")]))
    (r,) = prep.results
    assert (prep.uid, prep.namespace, prep.name, prep.pool) == (UID, "default", "x", NODE)
    assert r.cdi_device_name == f"{UID}-gpu-1"
    assert r.cdi_ids == (f"k8s.gpu.nvidia.com/claim={UID}-gpu-1",)
    assert r.env == (f"FAKEGPU_VISIBLE_DEVICES={gpu_uuid(NODE, 1)}",)
    assert (r.request, r.request_name, r.pool, r.device, r.uuid) == ("gpu", "gpu", NODE, "gpu-1", gpu_uuid(NODE, 1))


def test_static_mig_claim_uses_the_instance_uuid():
    n = node({"model": "h100-80gb", "migEnabled": True, "migDevices": [{"profile": "1g.10gb", "start": 3}]})
    prep = prepare(claim([result("gpu-0-mig-1g10gb-19-3", request="mig")]), n)
    assert env_of(prep, "gpu-0-mig-1g10gb-19-3") == {"FAKEGPU_VISIBLE_DEVICES": n.gpus[0].mig_devices[0].uuid}


def test_dynamic_mig_claim_gets_the_deterministic_uuid_static_mig_would_have():
    prep = prepare(claim([result("gpu-1-mig-2g20gb-14-4", request="mig")]), h100s(2), "dynamic")
    (r,) = prep.results
    assert r.uuid == mig_uuid(NODE, 1, "2g.20gb", 4)
    assert r.env == (f"FAKEGPU_VISIBLE_DEVICES={mig_uuid(NODE, 1, '2g.20gb', 4)}",)


def test_visible_devices_list_the_devices_of_the_same_request():
    prep = prepare(
        claim([result("gpu-0", "pair"), result("gpu-1", "pair"), result("gpu-2", "single")]),
        h100s(3),
    )
    pair = f"{gpu_uuid(NODE, 0)},{gpu_uuid(NODE, 1)}"
    assert env_of(prep, "gpu-0")["FAKEGPU_VISIBLE_DEVICES"] == pair
    assert env_of(prep, "gpu-1")["FAKEGPU_VISIBLE_DEVICES"] == pair
    assert env_of(prep, "gpu-2")["FAKEGPU_VISIBLE_DEVICES"] == gpu_uuid(NODE, 2)


def test_other_drivers_results_and_configs_are_skipped():
    c = claim(
        [result("nic-7", "net", driver="net.example.com", pool="elsewhere"), result("gpu-0")],
        [config({"whatever": "is not ours"}, driver="net.example.com")],
    )
    prep = prepare(c)
    assert [r.device for r in prep.results] == ["gpu-0"]


@pytest.mark.parametrize("api", ["resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1"])
def test_every_served_version_has_the_same_status_shape(api):
    assert [r.device for r in prepare(claim([result("gpu-0")], api=api)).results] == ["gpu-0"]


def test_unknown_device_error_text():
    with pytest.raises(ClaimError) as err:
        prepare(claim([result("gpu-9")]))
    assert str(err.value) == (
        "claim default/x: device 'gpu-9' (request gpu) is not published by driver gpu.nvidia.com on node node-a"
    )


def test_unallocated_claim_error_text():
    c = claim([])
    del c["status"]["allocation"]
    with pytest.raises(ClaimError) as err:
        prepare(c)
    assert str(err.value) == "claim default/x is not allocated"
    c.pop("status")
    with pytest.raises(ClaimError, match=r"^claim default/x is not allocated$"):
        prepare(c)


def test_result_for_another_pool_is_an_error():
    with pytest.raises(ClaimError, match="allocated from pool 'node-b', but this node's pool is 'node-a'"):
        prepare(claim([result("gpu-0", pool="node-b")]))


def test_unsafe_claim_uid_is_an_error():
    with pytest.raises(ClaimError, match="not usable in a CDI spec"):
        prepare(claim([result("gpu-0")], uid="../../x"))


def test_share_id_unusable_in_a_cdi_name_is_an_error():
    with pytest.raises(ClaimError, match="invalid character '/' in CDI device name"):
        prepare(claim([result("gpu-0", shareID="a/b")]))


def test_same_device_twice_is_an_error():
    with pytest.raises(ClaimError, match="allocated twice"):
        prepare(claim([result("gpu-0", "a"), result("gpu-0", "b")]))


def test_claim_without_our_results_prepares_nothing():
    assert prepare(claim([result("nic-0", driver="net.example.com")])).results == ()


def test_preparation_makes_a_valid_cdi_spec():
    prep = prepare(claim([result("gpu-0"), result("gpu-1")]))
    spec = claim_spec(prep.cdi_vendor, prep.uid, prep.results)
    validate_spec(spec)
    assert [d["name"] for d in spec["devices"]] == [r.cdi_device_name for r in prep.results]
    assert [f"{spec['kind']}={d['name']}" for d in spec["devices"]] == [r.cdi_ids[0] for r in prep.results]


# --- configs --------------------------------------------------------------------------------------------


def time_slicing(interval: str) -> dict[str, Any]:
    return gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}})


def test_no_config_sets_only_visible_devices():
    assert env_of(prepare(claim([result("gpu-0")])), "gpu-0") == {"FAKEGPU_VISIBLE_DEVICES": gpu_uuid(NODE, 0)}


def test_claim_configs_beat_class_configs_whatever_their_order():
    c = claim(
        [result("gpu-0", "a"), result("gpu-1", "b")],
        [config(time_slicing("Short"), ["a"]), config(time_slicing("Long"), source="FromClass")],
    )
    prep = prepare(c)
    assert env_of(prep, "gpu-0")["NVIDIA_TIME_SLICE_INTERVAL"] == "Short"
    assert env_of(prep, "gpu-1")["NVIDIA_TIME_SLICE_INTERVAL"] == "Long"


def test_later_claim_config_wins_and_requests_are_matched():
    c = claim(
        [result("gpu-0", "a"), result("gpu-1", "b")],
        [config(time_slicing("Short")), config(time_slicing("Medium"), ["b"]), config(time_slicing("Long"), ["z"])],
    )
    prep = prepare(c)
    assert env_of(prep, "gpu-0")["NVIDIA_TIME_SLICE_INTERVAL"] == "Short"
    assert env_of(prep, "gpu-1")["NVIDIA_TIME_SLICE_INTERVAL"] == "Medium"


def test_config_for_a_request_applies_to_its_subrequest_results():
    prep = prepare(claim([result("gpu-0", "main/big")], [config(time_slicing("Long"), ["main"])]))
    assert env_of(prep, "gpu-0")["NVIDIA_TIME_SLICE_INTERVAL"] == "Long"


def test_gpu_config_without_sharing_sets_no_time_slice():
    """kubernetes-sigs/dra-driver-nvidia-gpu api/nvidia.com/resource/v1beta1/gpuconfig.go at ed0d0e5 (PR #1183):
    Normalize no longer fills in TimeSlicing when ``sharing`` is absent, so nothing is applied; a stated
    TimeSlicing strategy without an interval still gets ``Default``."""
    prep = prepare(claim([result("gpu-0")], [config(gpu_config())]))
    assert "NVIDIA_TIME_SLICE_INTERVAL" not in env_of(prep, "gpu-0")
    assert prep.results[0].time_slice is None
    stated = prepare(claim([result("gpu-0")], [config(gpu_config({"strategy": "TimeSlicing"}))]))
    assert env_of(stated, "gpu-0")["NVIDIA_TIME_SLICE_INTERVAL"] == "Default"
    assert stated.results[0].time_slice == "Default"


def test_mps_settings_become_cuda_variables():
    mps = {
        "strategy": "MPS",
        "mpsConfig": {
            "defaultActiveThreadPercentage": 50,
            "defaultPinnedDeviceMemoryLimit": "10Gi",
            "defaultPerDevicePinnedMemoryLimit": {"1": "512Mi"},
        },
    }
    prep = prepare(claim([result("gpu-0"), result("gpu-1")], [config(gpu_config(mps))]))
    env = env_of(prep, "gpu-0")
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{gpu_uuid(NODE, 0)}=10240M,{gpu_uuid(NODE, 1)}=512M"
    assert "NVIDIA_TIME_SLICE_INTERVAL" not in env
    assert env_of(prep, "gpu-1") == env


def test_mps_devices_get_nvidias_pipe_directory_and_share_one_control_daemon():
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/sharing.go: ``GetCDIContainerEdits``
    sets ``CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps``; ``GetMpsControlDaemonID`` is the claim UID and the
    first 5 hex digits of SHA-256 over the group's UUIDs joined by ','."""
    mps = {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}}
    c = claim([result("gpu-0"), result("gpu-1"), result("gpu-2", "plain")], [config(gpu_config(mps), ["gpu"])])
    prep = prepare(c, h100s(3))
    by_device = {r.device: r for r in prep.results}
    assert env_of(prep, "gpu-0")["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
    assert list(env_of(prep, "gpu-0")) == [
        "FAKEGPU_VISIBLE_DEVICES",
        "CUDA_MPS_PIPE_DIRECTORY",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
    ]
    group = ",".join([gpu_uuid(NODE, 0), gpu_uuid(NODE, 1)])
    expected = f"{prep.uid}-{hashlib.sha256(group.encode()).hexdigest()[:5]}"
    assert by_device["gpu-0"].mps_daemon_id == by_device["gpu-1"].mps_daemon_id == expected
    assert by_device["gpu-2"].mps_daemon_id is None
    assert "CUDA_MPS_PIPE_DIRECTORY" not in env_of(prep, "gpu-2")


def test_mps_per_device_limit_by_uuid_and_bad_key():
    by_uuid = {"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {gpu_uuid(NODE, 0): "1G"}}}
    env = env_of(prepare(claim([result("gpu-0")], [config(gpu_config(by_uuid))])), "gpu-0")
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{gpu_uuid(NODE, 0)}=953M"
    bad = {"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"3": "1Gi"}}}
    with pytest.raises(ClaimError, match="key '3' names no device"):
        prepare(claim([result("gpu-0")], [config(gpu_config(bad))]))


def test_mig_device_config_applies_to_mig_devices():
    mps = {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25}}
    c = claim(
        [result("gpu-0-mig-1g10gb-19-0", "mig"), result("gpu-1", "whole")],
        [config(gpu_config(mps, kind="MigDeviceConfig")), config(time_slicing("Long"))],
    )
    prep = prepare(c, h100s(2), "dynamic")
    assert env_of(prep, "gpu-0-mig-1g10gb-19-0")["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert "NVIDIA_TIME_SLICE_INTERVAL" not in env_of(prep, "gpu-0-mig-1g10gb-19-0")
    assert env_of(prep, "gpu-1")["NVIDIA_TIME_SLICE_INTERVAL"] == "Long"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env_of(prep, "gpu-1")


def test_gpu_config_named_for_a_mig_request_is_an_error():
    c = claim([result("gpu-0-mig-1g10gb-19-0", "mig")], [config(time_slicing("Long"), ["mig"])])
    with pytest.raises(ClaimError, match=r"cannot apply GpuConfig to device 'gpu-0-mig-1g10gb-19-0' of type 'mig'"):
        prepare(c, h100s(1), "dynamic")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (gpu_config(metadata={"name": "x"}), 'unknown field "metadata"'),
        (gpu_config({"strategy": "TimeSlicing", "extra": 1}), 'unknown field "sharing.extra"'),
        (
            gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long", "x": 1}}),
            'unknown field "sharing.timeSlicingConfig.x"',
        ),
        (
            gpu_config({"strategy": "MPS", "mpsConfig": {"threads": 5}}),
            'unknown field "sharing.mpsConfig.threads"',
        ),
        (
            gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {}}, kind="MigDeviceConfig"),
            'unknown field "sharing.timeSlicingConfig"',
        ),
        (gpu_config(kind="VfioDeviceConfig"), "unsupported kind 'VfioDeviceConfig'"),
        ({"apiVersion": "gpu.resource.example.com/v1alpha1", "kind": "GpuConfig"}, "apiVersion must be"),
        (gpu_config({"strategy": "Fabric"}), "sharing.strategy 'Fabric' is not supported"),
        (gpu_config({}), "sharing.strategy None is not supported"),
        (time_slicing("VeryLong"), "sharing.timeSlicingConfig.interval 'VeryLong' is not one of"),
        (
            gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 101}}),
            "defaultActiveThreadPercentage must be between 0 and 100, found 101",
        ),
        (
            gpu_config({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": "50"}}),
            "defaultActiveThreadPercentage must be an integer",
        ),
        (
            gpu_config({"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "lots"}}),
            "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: 'lots' is not a quantity",
        ),
        (
            gpu_config({"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "100Ki"}}),
            "is too low",
        ),
        (
            gpu_config({"strategy": "TimeSlicing", "mpsConfig": {}}),
            "sharing.mpsConfig cannot be used with the TimeSlicing strategy",
        ),
        (
            gpu_config({"strategy": "MPS", "timeSlicingConfig": {"interval": "Long"}}),
            "sharing.timeSlicingConfig cannot be used with the MPS strategy",
        ),
        (None, "parameters must be an object"),
    ],
)
def test_strict_decoding_errors_name_the_field(params, message):
    with pytest.raises(ClaimError, match=re.escape(message)) as err:
        prepare(claim([result("gpu-0")], [config(params)]))
    assert str(err.value).startswith("claim default/x: config[0] (FromClaim): ")


def test_invalid_config_source_and_non_opaque_config_are_errors():
    bad_source = {**config(time_slicing("Long")), "source": "FromNowhere"}
    with pytest.raises(ClaimError, match="invalid config source 'FromNowhere'"):
        prepare(claim([result("gpu-0")], [bad_source]))
    with pytest.raises(ClaimError, match="only opaque parameters are supported"):
        prepare(claim([result("gpu-0")], [{"source": "FromClaim", "requests": []}]))


# --- feature gates ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("strategy", "gate"), [("TimeSlicing", "TimeSlicingSettings"), ("MPS", "MPSSupport")])
def test_a_sharing_strategy_needs_its_feature_gate(strategy, gate):
    """kubernetes-sigs/dra-driver-nvidia-gpu api/nvidia.com/resource/v1beta1/sharing.go (validateSharingStrategy)
    and pkg/featuregates/featuregates.go: both gates are off by default, and a config stating the strategy
    fails Validate with NVIDIA's text; device_state.go prefixes "error validating GPU config"."""
    c = claim([result("gpu-0")], [config(gpu_config({"strategy": strategy}), ["gpu"])])
    with pytest.raises(ClaimError) as err:
        prepare(c, gates=FeatureGates())
    assert str(err.value) == (
        f"claim default/x: config[0] (FromClaim): error validating GPU config: "
        f'"{strategy}" is selected as the GPU sharing strategy, but the "{gate}" feature gate is not enabled'
    )
    assert prepare(c, gates=parse_feature_gates(f"{gate}=true")).results[0].device == "gpu-0"
    # The other strategy's gate does not help.
    other = "MPSSupport" if gate == "TimeSlicingSettings" else "TimeSlicingSettings"
    with pytest.raises(ClaimError, match=f'"{gate}" feature gate is not enabled'):
        prepare(c, gates=parse_feature_gates(f"{other}=true"))


def test_gates_check_only_stated_sharing_on_configs_that_apply():
    """device_state.go validates only configs matched to a result, and a config without `sharing` (or the
    built-in defaults) states no strategy, so neither needs a gate."""
    unused = config(gpu_config({"strategy": "MPS"}), ["other"])
    plain = config(gpu_config(), ["gpu"])
    mig = config(gpu_config({"strategy": "TimeSlicing"}, kind="MigDeviceConfig"), [])
    prep = prepare(claim([result("gpu-0")], [unused, plain, mig]), gates=FeatureGates())
    assert [r.device for r in prep.results] == ["gpu-0"]


def test_mps_is_refused_with_dynamic_mig():
    """device_state.go applySharingConfig: "MPS is not yet supported when using featureGates.DynamicMIG=true"
    (the start-up check normally stops the two gates from meeting: tests/unit/dra/test_feature_gates.py)."""
    c = claim([result("gpu-0")], [config(gpu_config({"strategy": "MPS"}), ["gpu"])])
    gates = FeatureGates({"MPSSupport": True, "DynamicMIG": True})
    with pytest.raises(
        ClaimError, match=r"error applying config: MPS is not yet supported when using featureGates\.DynamicMIG=true"
    ):
        prepare(c, mig_mode="dynamic", gates=gates)
