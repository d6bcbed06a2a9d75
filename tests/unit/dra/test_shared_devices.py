"""Claims holding the same device: NVIDIA's overlap check, with and without consumable shares.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/consumable_shares_test.go``
``TestValidateNoOverlappingPreparedDevices`` (commit 52a582a) and ``validateNoOverlappingPreparedDevices`` /
``isGpuUUIDInUseByOtherClaims`` in ``cmd/gpu-kubelet-plugin/device_state.go`` (main, v0.5.0-dev).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from fakegpu.dra.claim_error import ClaimError
from fakegpu.dra.device_map import published_devices
from fakegpu.dra.feature_gates import parse_feature_gates
from fakegpu.dra.prepare_plan import PreparePlan, prepare_plan
from fakegpu.dra.prepared_claims import PREPARE_COMPLETED, PREPARE_STARTED, PreparedClaim, parse_result, result_json
from fakegpu.dra.shared_devices import check_no_overlap, other_holders
from fakegpu.sharing.node import build_node
from fakegpu.sharing.node_spec import parse_node_spec

NODE = "node-a"
DRIVER = "gpu.nvidia.com"
NEW = "2e800b5e-0000-4000-8000-000000000001"
OLD = "2e800b5e-0000-4000-8000-000000000002"
DEVICES = published_devices(
    build_node(parse_node_spec({"gpus": [{"model": "h100-80gb", "count": 2}]}, "t"), NODE, source="t"), "static"
)


def plan(uid: str, device: str = "gpu-0", interval: str | None = None, **result: Any) -> PreparePlan:
    entry = {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device, **result}
    devices: dict[str, Any] = {"results": [entry]}
    if interval is not None:
        sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}}
        parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing}
        devices["config"] = [
            {"source": "FromClaim", "requests": [], "opaque": {"driver": DRIVER, "parameters": parameters}}
        ]
    claim = {
        "metadata": {"name": uid[-1], "namespace": "default", "uid": uid},
        "status": {"allocation": {"devices": devices}},
    }
    return prepare_plan(claim, DRIVER, NODE, DEVICES, parse_feature_gates("TimeSlicingSettings=true"), shares=True)


def prepared(p: PreparePlan, state: str = PREPARE_COMPLETED) -> PreparedClaim:
    return PreparedClaim(p.uid, p.namespace, p.name, state, p.driver, p.pool, p.results)  # type: ignore[arg-type]


def test_a_held_gpu_is_refused_without_shares():
    with pytest.raises(ClaimError) as err:
        check_no_overlap(plan(NEW), [prepared(plan(OLD))], shares=False)
    assert (
        str(err.value)
        == f"unable to prepare claim {NEW}: requested device gpu-0 is already allocated to different claim {OLD}"
    )


def test_a_held_gpu_is_shared_with_shares_when_the_configs_agree():
    check_no_overlap(plan(NEW, shareID="s1"), [prepared(plan(OLD, shareID="s2"))], shares=True)
    check_no_overlap(plan(NEW, interval="Default"), [prepared(plan(OLD, interval="Default"))], shares=True)
    with pytest.raises(ClaimError, match="conflicting configuration"):  # PR #1183: no config sets no time slice
        check_no_overlap(plan(NEW, interval="Default"), [prepared(plan(OLD))], shares=True)
    with pytest.raises(ClaimError, match="has conflicting configuration with already prepared claim"):
        check_no_overlap(plan(NEW, interval="Long"), [prepared(plan(OLD, interval="Short"))], shares=True)


def test_what_does_not_count_as_holding():
    """Other devices, half-prepared claims, the claim itself and admin-access results hold nothing."""
    check_no_overlap(plan(NEW, "gpu-1"), [prepared(plan(OLD))], shares=False)
    check_no_overlap(plan(NEW), [prepared(plan(OLD), PREPARE_STARTED)], shares=False)
    check_no_overlap(plan(NEW), [prepared(plan(NEW))], shares=False)
    check_no_overlap(plan(NEW, adminAccess=True), [prepared(plan(OLD))], shares=False)
    check_no_overlap(plan(NEW), [prepared(plan(OLD, adminAccess=True))], shares=False)


def test_other_holders_of_a_device():
    held = [prepared(plan(OLD, shareID="s2")), prepared(plan(NEW, shareID="s1"))]
    assert other_holders(held, NEW, DRIVER, "gpu-0") == [OLD]
    assert other_holders(held, NEW, DRIVER, "gpu-1") == []


def test_the_checkpoint_keeps_what_a_share_was_given():
    (result,) = plan(NEW, shareID="s1", consumedCapacity={"shares": "1", "memory": "4Gi"}, interval="Long").results
    stored = result_json(result)
    assert (stored["shareID"], stored["consumedCapacity"]) == ("s1", {"memory": "4Gi", "shares": "1"})
    assert parse_result(stored) == result
    assert parse_result({**stored, "config": ""}) == replace(result, config_key="")


def test_a_malformed_consumed_capacity_is_refused():
    with pytest.raises(ClaimError, match=r"results\[0\]: consumedCapacity must map capacity names to quantities"):
        plan(NEW, consumedCapacity=["memory"])
