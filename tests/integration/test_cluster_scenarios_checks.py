"""The checks of a cluster ``expect`` on objects shaped as the API server returns them: what holds, and the
"expected ..., got ..." line when it does not. Shapes: a PodGroup's ``PodGroupScheduled`` condition (kubernetes
``test/integration/scheduler`` gang tests and the PodGroup API docs of v1.36, reason ``Unschedulable`` as a
real Kubernetes v1.36.2 cluster showed for a gang that did not fit), ``allocatedResourcesStatus`` entries as a
real v1.36.2 kubelet wrote them for fakegpu."""

from __future__ import annotations

from typing import Any

from fakegpu.testing.scenario.cluster_checks import (
    check_claim_taint,
    check_phases,
    check_pod_group,
    check_unwritten,
    gpu_under,
    slice_versions,
)
from fakegpu.testing.scenario.cluster_model import ClaimTaint, PodGroupCondition

Obj = dict[str, Any]


def test_a_pending_gang_reads_from_its_pods_and_its_pod_group():
    unschedulable: Obj = {
        "status": {"conditions": [{"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable"}]}
    }
    want = PodGroupCondition(name="workers", status="False", reason="Unschedulable")
    assert check_pod_group(unschedulable, want) == []
    scheduled: Obj = {
        "status": {"conditions": [{"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled"}]}
    }
    assert check_pod_group(scheduled, want) == [
        "expected PodGroup workers with PodGroupScheduled=False (Unschedulable), got PodGroupScheduled=True (Scheduled)"
    ]
    assert check_pod_group(None, PodGroupCondition(name="workers")) == [
        "expected PodGroup workers with PodGroupScheduled=True, got no such PodGroup"
    ]
    left: Obj = {
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    }
    assert check_phases({"w-0": left}, "Pending") == []
    pods: dict[str, Obj | None] = {
        "w-0": {"status": {}},
        "w-1": {"status": {"phase": "Running"}},
        "w-2": None,
        "w-3": left,
    }
    assert check_phases(pods, "Pending") == [
        "expected pods w-0, w-1, w-2, w-3 Pending, unschedulable, got w-0: Pending, w-1: Running, w-2: absent"
    ]


def test_the_gpu_under_a_pod_from_its_status_or_its_claim():
    pod: Obj = {
        "status": {
            "containerStatuses": [
                {
                    "name": "main",
                    "allocatedResourcesStatus": [
                        {"name": "nvidia.com/gpu", "resources": [{"resourceID": "GPU-1234::3", "health": "Healthy"}]}
                    ],
                }
            ]
        }
    }
    assert gpu_under(pod, "nvidia.com/gpu", None) == "GPU-1234"
    claim: Obj = {"status": {"allocation": {"devices": {"results": [{"driver": "d", "pool": "n", "device": "gpu-5"}]}}}}
    assert gpu_under(pod, "claim:g", claim) == "5"
    assert gpu_under(pod, "claim:g", None) is None


def test_a_claim_taint_names_the_device_and_the_taints_it_has():
    pod: Obj = {"spec": {"resourceClaims": [{"name": "g", "resourceClaimName": "c"}]}}
    claim: Obj = {
        "metadata": {"name": "c"},
        "status": {
            "allocation": {"devices": {"results": [{"driver": "gpu.nvidia.com", "pool": "n", "device": "gpu-0"}]}}
        },
    }
    slices: list[Obj] = [
        {
            "spec": {
                "driver": "gpu.nvidia.com",
                "pool": {"name": "n"},
                "devices": [
                    {"name": "gpu-0", "taints": [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]}
                ],
            }
        }
    ]
    lost = ClaimTaint(pod="p", claim="g", key="gpu.nvidia.com/gpu-lost")
    assert check_claim_taint(pod, claim, slices, lost) == [
        "device n/gpu-0 (gpu.nvidia.com): expected taint gpu.nvidia.com/gpu-lost, got gpu.nvidia.com/xid=79:NoSchedule"
    ]
    assert (
        check_claim_taint(pod, claim, slices, ClaimTaint(pod="p", claim="g", key="gpu.nvidia.com/xid", value="79"))
        == []
    )


def test_a_healthy_node_whose_slice_changed_is_named():
    def piece(node: str, rv: str) -> Obj:
        return {"metadata": {"name": f"{node}-s", "resourceVersion": rv}, "spec": {"nodeName": node}}

    before = slice_versions([piece("a", "1"), piece("b", "2")], ["a", "b"])
    faulted: Obj = {"metadata": {"annotations": {"fakegpu.io/gpu-faults": '{"0":["off-bus"]}'}}}
    nodes: dict[str, Obj | None] = {"a": faulted, "b": {"metadata": {}}}
    assert check_unwritten(nodes, [piece("a", "9"), piece("b", "2")], before) == []
    assert check_unwritten(nodes, [piece("a", "9"), piece("b", "3")], before) == [
        "expected no writes to the 1 healthy node(s), got slices rewritten on b"
    ]
