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
    request: str = "gpu",
    device_class: str = DRIVER,
    share_ids: Sequence[str] = (),
    consumed_capacity: Mapping[str, str] | None = None,
    capacity_requests: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ResourceClaim allocated on ``node``: one request ``gpu`` (DeviceClass ``gpu.nvidia.com``, exactly as
    many devices as given) satisfied by ``devices`` of ``pool`` (the node's own by default) from ``driver``,
    with the allocation's device ``config`` (see :func:`opaque_config`) and ``reserved_for`` consumers.
    ``uid``: for a claim handed to the driver directly (the fake API server assigns one otherwise).
    ``request`` and ``device_class``: the request's name and DeviceClass (another driver's claims).
    Consumable capacity (KEP-5075): ``capacity_requests`` is the request's ``capacity.requests``; on a device
    that allows multiple allocations the scheduler gives each result a ``shareID`` (``share_ids``, one per
    device) and books its ``consumedCapacity`` (the same for every result here)."""
    if share_ids and len(share_ids) != len(devices):
        raise ValueError(f"{len(share_ids)} share IDs for {len(devices)} devices")
    results: list[dict[str, Any]] = []
    for i, d in enumerate(devices):
        result: dict[str, Any] = {"request": request, "driver": driver, "pool": pool or node, "device": d}
        if share_ids:
            result["shareID"] = share_ids[i]
        if consumed_capacity is not None:
            result["consumedCapacity"] = dict(consumed_capacity)
        results.append(result)
    allocation: dict[str, Any] = {
        "devices": {"results": results},
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        },
    }
    if config:
        allocation["devices"]["config"] = [dict(c) for c in config]
    status: dict[str, Any] = {"allocation": allocation}
    if reserved_for is not None:
        status["reservedFor"] = [dict(r) for r in reserved_for]
    exactly: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": len(devices)}
    if capacity_requests is not None:
        exactly["capacity"] = {"requests": dict(capacity_requests)}
    metadata = {"name": name, "namespace": namespace} | ({"uid": uid} if uid is not None else {})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {"devices": {"requests": [{"name": request, "exactly": exactly}]}},
        "status": status,
    }


def opaque_config(parameters: Any, requests: Sequence[str] = ("gpu",), *, driver: str = DRIVER) -> dict[str, Any]:
    """An allocation's device config from the claim: ``parameters`` for ``driver``, applying to ``requests``."""
    return {"source": "FromClaim", "requests": list(requests), "opaque": {"driver": driver, "parameters": parameters}}


def gpu_config(sharing: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of an opaque config: NVIDIA's GpuConfig with its ``sharing`` section."""
    return {"apiVersion": GPU_CONFIG_API, "kind": "GpuConfig", "sharing": dict(sharing)}


COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
"""NVIDIA's compute-domain kubelet plugin (``fakegpu dra --compute-domains``)."""


def compute_domain(name: str, namespace: str = "default", template: str = "imex-channel-0") -> dict[str, Any]:
    """A ComputeDomain as a user writes it (NVIDIA's README example, ``numNodes: 0``)."""
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": template}}},
    }


def channel_claim(
    name: str, node: str, domain_uid: str | None, *, namespace: str = "default", allocation_mode: str | None = None
) -> dict[str, Any]:
    """A workload's channel claim as the controller's template makes it (request ``channel``, class
    ``compute-domain-default-channel.nvidia.com``), allocated ``channel-0`` on ``node``; ``domain_uid`` None
    leaves out the ComputeDomainChannelConfig (a hand-written claim)."""
    parameters: dict[str, Any] = {"apiVersion": GPU_CONFIG_API, "kind": "ComputeDomainChannelConfig"}
    if domain_uid is not None:
        parameters["domainID"] = domain_uid
    if allocation_mode is not None:
        parameters["allocationMode"] = allocation_mode
    config = [opaque_config(parameters, ("channel",), driver=COMPUTE_DOMAIN_DRIVER)] if domain_uid is not None else []
    return allocated_claim(
        name,
        node,
        ("channel-0",),
        namespace=namespace,
        driver=COMPUTE_DOMAIN_DRIVER,
        config=config,
        request="channel",
        device_class="compute-domain-default-channel.nvidia.com",
    )


def daemon_claim(name: str, node: str, domain_uid: str, *, namespace: str) -> dict[str, Any]:
    """The IMEX daemon pod's claim (request ``daemon``, class ``compute-domain-daemon.nvidia.com``) with its
    ComputeDomainDaemonConfig, allocated ``daemon`` on ``node``."""
    parameters = {"apiVersion": GPU_CONFIG_API, "kind": "ComputeDomainDaemonConfig", "domainID": domain_uid}
    return allocated_claim(
        name,
        node,
        ("daemon",),
        namespace=namespace,
        driver=COMPUTE_DOMAIN_DRIVER,
        config=[opaque_config(parameters, ("daemon",), driver=COMPUTE_DOMAIN_DRIVER)],
        request="daemon",
        device_class="compute-domain-daemon.nvidia.com",
    )
