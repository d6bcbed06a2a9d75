"""Extended resources served by DRA (KEP-5004, DRAExtendedResource): a pod asking for ``nvidia.com/gpu``
on a node without a device plugin for it gets a claim the scheduler writes itself.

Follows kubernetes ``pkg/scheduler/framework/plugins/dynamicresources/extendedresources.go`` and
``staging/src/k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache`` (v1.36): a resource
maps to the DeviceClass whose ``extendedResourceName`` it is (the newest class when several name it,
ties by name), or to class ``<name>`` when it is ``deviceclass.resource.kubernetes.io/<name>``. The
claim has ``generateName: <pod>-extended-resources-``, the annotation
``resource.kubernetes.io/extended-resource-claim: "true"``, the pod as its controller, and one
``ExactCount`` request per container and resource, named ``container-<i>-request-<j>`` (``i`` counts init
containers, then containers; ``j`` is the resource's place among all the container's requests, sorted),
the requests sorted by name; the pod's
``status.extendedResourceClaimStatus`` maps each container and resource to its request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fakegpu.sharing.quantities import quantity_value

ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"


def class_for(resource: str, classes: Iterable[Mapping[str, Any]]) -> str | None:
    """The DeviceClass serving ``resource``, or None."""
    if resource.startswith(IMPLICIT_PREFIX):
        wanted = resource.removeprefix(IMPLICIT_PREFIX)
        return wanted if any(c["metadata"]["name"] == wanted for c in classes) else None
    naming = [c for c in classes if (c.get("spec") or {}).get("extendedResourceName") == resource]
    if not naming:
        return None
    naming.sort(key=lambda c: str(c["metadata"]["name"]))
    naming.sort(key=lambda c: str(c["metadata"].get("creationTimestamp", "")), reverse=True)
    return str(naming[0]["metadata"]["name"])


def _requests(container: Mapping[str, Any]) -> dict[str, Any]:
    """The container's resource requests after API defaulting: a limit without a request is its request."""
    resources = container.get("resources") or {}
    return {**(resources.get("limits") or {}), **(resources.get("requests") or {})}


def extended_resource_claim(
    pod: Mapping[str, Any], classes: Iterable[Mapping[str, Any]], node_allocatable: Mapping[str, int]
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The special claim for ``pod`` and its ``extendedResourceClaimStatus`` (without the claim's name,
    known once created), or None when no container asks for a resource DRA serves here (one the node
    advertises through a device plugin stays with the device plugin)."""
    classes = list(classes)
    meta = pod.get("metadata") or {}
    requests: list[dict[str, Any]] = []
    mappings: list[dict[str, str]] = []
    spec = pod.get("spec") or {}
    for i, container in enumerate([*(spec.get("initContainers") or []), *(spec.get("containers") or [])]):
        wanted = _requests(container)
        for j, resource in enumerate(sorted(wanted)):
            device_class = class_for(resource, classes)
            count = quantity_value(wanted[resource])
            if device_class is None or node_allocatable.get(resource, 0) > 0 or count < 1:
                continue
            name = f"container-{i}-request-{j}"
            exactly = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
            requests.append({"name": name, "exactly": exactly})
            mappings.append(
                {"containerName": str(container.get("name")), "resourceName": resource, "requestName": name}
            )
    if not requests:
        return None
    requests.sort(key=lambda r: str(r["name"]))
    owner = {"apiVersion": "v1", "kind": "Pod", "name": meta.get("name"), "uid": meta.get("uid"), "controller": True}
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{meta.get('name')}-extended-resources-",
            "namespace": meta.get("namespace", "default"),
            "annotations": {ANNOTATION: "true"},
            "ownerReferences": [owner],
        },
        "spec": {"devices": {"requests": requests}},
    }
    return claim, {"requestMappings": mappings}
