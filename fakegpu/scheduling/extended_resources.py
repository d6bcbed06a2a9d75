"""Extended resources served by DRA (KEP-5004, DRAExtendedResource): a pod asking for ``nvidia.com/gpu``
on a node without a device plugin for it gets a claim the scheduler writes itself.

Follows kubernetes ``pkg/scheduler/framework/plugins/dynamicresources/extendedresources.go`` and
``staging/src/k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache`` (v1.36): a resource
maps to the DeviceClass whose ``extendedResourceName`` it is (the newest class when several name it,
ties by name), or to class ``<name>`` when it is ``deviceclass.resource.kubernetes.io/<name>``. The
claim has ``generateName: <pod>-extended-resources-``, the annotation
``resource.kubernetes.io/extended-resource-claim: "true"``, the pod as its controller, and one
``ExactCount`` request per container and resource, named ``container-<i>-request-<j>``; the pod's
``status.extendedResourceClaimStatus`` maps each container and resource to its request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fakegpu.dra.quantities import quantity_value

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


def _amounts(container: Mapping[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    out = {k: quantity_value(v) for k, v in (resources.get("requests") or {}).items()}
    out.update({k: quantity_value(v) for k, v in (resources.get("limits") or {}).items()})
    return out


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
    for i, container in enumerate((pod.get("spec") or {}).get("containers") or []):
        j = 0
        for resource, count in sorted(_amounts(container).items()):
            device_class = class_for(resource, classes)
            if device_class is None or node_allocatable.get(resource, 0) > 0 or count < 1:
                continue
            name = f"container-{i}-request-{j}"
            j += 1
            exactly = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
            requests.append({"name": name, "exactly": exactly})
            mappings.append(
                {"containerName": str(container.get("name")), "resourceName": resource, "requestName": name}
            )
    if not requests:
        return None
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
