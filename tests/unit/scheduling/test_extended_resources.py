"""The scheduler's claim for extended resources served by DRA (KEP-5004) and the manifest reader.

Follows kubernetes ``staging/src/k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache/
extendedresourcecache.go`` (the newest DeviceClass naming a resource wins, the lower name on a tie) and
``pkg/scheduler/framework/plugins/dynamicresources/extendedresources.go`` (v1.36).
"""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.scheduling.extended_resources import class_for, extended_resource_claim
from fakegpu.testing.manifest_apply import claim_generate_name, load_documents, template_claim, workload_pods


def device_class(name: str, created: str, resource: str | None = "nvidia.com/gpu") -> dict[str, Any]:
    spec = {"extendedResourceName": resource} if resource else {}
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


def test_the_newest_class_serves_the_resource_and_the_lower_name_breaks_ties():
    old = device_class("gpu.nvidia.com", "2026-01-01T00:00:00Z")
    new = device_class("mig-1g-12gb.gpu.nvidia.com", "2026-02-01T00:00:00Z")
    assert class_for("nvidia.com/gpu", [old, new]) == "mig-1g-12gb.gpu.nvidia.com"
    tied = device_class("a.example.com", "2026-01-01T00:00:00Z")
    assert class_for("nvidia.com/gpu", [old, tied]) == "a.example.com"
    assert class_for("deviceclass.resource.kubernetes.io/gpu.nvidia.com", [old]) == "gpu.nvidia.com"
    assert class_for("nvidia.com/mig-1g.10gb", [old, new]) is None


def test_the_claim_has_one_request_per_container_and_resource_and_skips_device_plugin_resources():
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "spec": {
            "containers": [
                {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "1"}}},
                {"name": "b", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
            ]
        },
    }
    classes = [device_class("gpu.nvidia.com", "2026-01-01T00:00:00Z")]
    made = extended_resource_claim(pod, classes, {})
    assert made is not None
    claim, status = made
    assert claim["metadata"]["generateName"] == "p-extended-resources-"
    assert claim["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert claim["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p",
        "uid": "u-1",
        "controller": True,
    }
    assert [(r["name"], r["exactly"]["count"]) for r in claim["spec"]["devices"]["requests"]] == [
        ("container-0-request-1", 2),  # cpu sorts first among the container's requests
        ("container-1-request-0", 1),
    ]
    assert [m["containerName"] for m in status["requestMappings"]] == ["a", "b"]
    assert extended_resource_claim(pod, classes, {"nvidia.com/gpu": 8}) is None  # a device plugin serves it


def test_manifests_with_other_kinds_are_refused_by_document():
    with pytest.raises(ValueError, match=r"demo: document 2: kind 'Service' cannot be applied"):
        load_documents("kind: Namespace\nmetadata: {name: a}\n---\nkind: Service\n", "demo")


def test_deployments_and_jobs_become_their_pods():
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c"}]}}
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "n"},
        "spec": {"replicas": 3, "template": template},
    }
    pods = workload_pods(deployment)
    assert len(pods) == 3 and pods[0]["metadata"]["generateName"].startswith("d-")
    assert len(pods[0]["metadata"]["generateName"]) == len("d-") + 11 and pods[0]["metadata"]["namespace"] == "n"
    job = {"kind": "Job", "metadata": {"name": "j"}, "spec": {"parallelism": 4, "template": template}}
    assert [p["metadata"]["generateName"] for p in workload_pods(job)] == ["j-"] * 4


def test_claims_from_templates_are_named_and_owned_as_the_resourceclaim_controller_does():
    """kubernetes ``pkg/controller/resourceclaim/controller.go``: ``<pod>-<claim>-`` kept to 57 characters by
    cutting both names in proportion, the template's labels and annotations plus the pod-claim-name one."""
    pod = {"metadata": {"name": "p" * 50, "namespace": "n", "uid": "u"}}
    template = {"spec": {"metadata": {"labels": {"a": "b"}, "annotations": {"x": "y"}}, "spec": {"devices": {}}}}
    claim = template_claim(pod, "c" * 30, template)
    assert claim["metadata"]["generateName"] == "p" * 34 + "-" + "c" * 20  # 50*57//82, 30*57//82
    assert claim["metadata"]["annotations"] == {"x": "y", "resource.kubernetes.io/pod-claim-name": "c" * 30}
    assert claim["metadata"]["labels"] == {"a": "b"}
    assert claim["metadata"]["ownerReferences"][0]["controller"] is True
    assert claim["spec"] == {"devices": {}}
    assert claim_generate_name("pod1", "gpu") == "pod1-gpu-"


def test_init_containers_count_first_and_requests_sort_by_name():
    """kubernetes ``dynamicresources/extendedresources.go``: index over init containers then containers,
    requests sorted by name as strings (``container-10`` before ``container-2``)."""
    gpu = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {
            "initContainers": [{"name": "init", **gpu}],
            "containers": [{"name": f"c{i}", **gpu} for i in range(10)],
        },
    }
    made = extended_resource_claim(pod, [device_class("gpu.nvidia.com", "2026-01-01T00:00:00Z")], {})
    assert made is not None
    names = [r["name"] for r in made[0]["spec"]["devices"]["requests"]]
    assert names[:3] == ["container-0-request-0", "container-1-request-0", "container-10-request-0"]
    assert {m["containerName"]: m["requestName"] for m in made[1]["requestMappings"]}["init"] == "container-0-request-0"
