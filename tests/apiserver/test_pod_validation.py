"""The tests' API server refuses a pod status whose ``allocatedResourcesStatus`` a real one refuses (follows
``validateContainerStatusAllocatedResourcesStatus`` in kubernetes pkg/apis/core/validation/validation.go, v1.36)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.apiserver import serving


def pod(statuses: list[dict[str, Any]]) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "ubuntu:24.04",
        "resources": {"limits": {"nvidia.com/gpu": "1"}, "claims": [{"name": "g"}, {"name": "h", "request": "r"}]},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [container], "resourceClaims": [{"name": "g", "resourceClaimName": "c"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "main",
                    "image": "ubuntu:24.04",
                    "imageID": "",
                    "ready": True,
                    "restartCount": 0,
                    "allocatedResourcesStatus": statuses,
                }
            ],
        },
    }


def entry(name: str, *resources: tuple[str, str]) -> dict[str, Any]:
    return {"name": name, "resources": [{"resourceID": rid, "health": health} for rid, health in resources]}


def test_the_kubelets_entries_are_accepted():
    with serving() as server:
        server.create_direct(
            pod([entry("nvidia.com/gpu", ("GPU-1", "Healthy")), entry("claim:g", ("x", "Unknown")), entry("claim:h/r")])
        )


@pytest.mark.parametrize(
    ("statuses", "error"),
    [
        ([entry("claim:h", ("x", "Healthy"))], "allocatedResourcesStatus[0].name: Invalid value"),
        ([entry("example.com/fpga", ("x", "Healthy"))], "must match one of the container's resource requests"),
        ([entry("claim:g", ("x", "Healthy"), ("x", "Unhealthy"))], "resources[1].resourceID: Duplicate value"),
        ([entry("claim:g", ("x", "Sick"))], 'resources[0].health: Unsupported value: "Sick"'),
    ],
)
def test_a_wrong_entry_is_refused(statuses: list[dict[str, Any]], error: str):
    with serving(strict=False) as server, pytest.raises(ValueError, match="is invalid") as refused:
        server.create_direct(pod(statuses))
    assert error in str(refused.value)
