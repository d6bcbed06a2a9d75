"""ResourceClaims as the scheduler leaves them, and their opaque device configs, for the fake API server.

The DRA driver reads a claim's ``status.allocation`` (which devices of which pool, and the opaque config
for them); tests put such claims into the fake API server with ``create_direct`` and ask the driver to
prepare them. One builder, so every test states only what differs: the devices, the config, the consumers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DRIVER = "gpu.nvidia.com"
"""fakegpu's DRA driver name, and the name of its DeviceClass."""
GPU_CONFIG_API = "resource.nvidia.com/v1beta1"


def allocated_claim(
    name: str,
    node: str,
    devices: Sequence[str] = ("gpu-0",),
    *,
    namespace: str = "default",
    driver: str = DRIVER,
    pool: str | None = None,
    config: Sequence[Mapping[str, Any]] = (),
    reserved_for: Sequence[Mapping[str, Any]] | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    """A ResourceClaim allocated on ``node``: one request ``gpu`` (DeviceClass ``gpu.nvidia.com``, exactly as
    many devices as given) satisfied by ``devices`` of ``pool`` (the node's own by default) from ``driver``,
    with the allocation's device ``config`` (see :func:`opaque_config`) and ``reserved_for`` consumers.
    ``uid``: for a claim handed to the driver directly (the fake API server assigns one otherwise)."""
    allocation: dict[str, Any] = {
        "devices": {
            "results": [{"request": "gpu", "driver": driver, "pool": pool or node, "device": d} for d in devices]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        },
    }
    if config:
        allocation["devices"]["config"] = [dict(c) for c in config]
    status: dict[str, Any] = {"allocation": allocation}
    if reserved_for is not None:
        status["reservedFor"] = [dict(r) for r in reserved_for]
    request = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": len(devices)}
    metadata = {"name": name, "namespace": namespace} | ({"uid": uid} if uid is not None else {})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
        "status": status,
    }


def opaque_config(parameters: Any, requests: Sequence[str] = ("gpu",), *, driver: str = DRIVER) -> dict[str, Any]:
    """An allocation's device config from the claim: ``parameters`` for ``driver``, applying to ``requests``."""
    return {"source": "FromClaim", "requests": list(requests), "opaque": {"driver": driver, "parameters": parameters}}


def gpu_config(sharing: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of an opaque config: NVIDIA's GpuConfig with its ``sharing`` section."""
    return {"apiVersion": GPU_CONFIG_API, "kind": "GpuConfig", "sharing": dict(sharing)}
