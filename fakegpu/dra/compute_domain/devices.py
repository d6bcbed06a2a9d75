"""The devices the compute-domain kubelet plugin publishes for a node, and the ResourceSlice spec that
holds them.

NVIDIA's plugin (``cmd/compute-domain-kubelet-plugin/deviceinfo.go``, ``driver.go``) publishes one slice
per node, in a pool named after the node, with exactly two devices: ``channel-0`` (IMEX channel 0; the
other 2047 channels exist on the node but are never published) and ``daemon`` (the node's IMEX daemon).
Both carry the attributes ``type`` and ``id`` and nothing else: the clique is not an attribute, it is read
from the node itself when a claim is prepared.
"""

from __future__ import annotations

from typing import Any

COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
CHANNEL_DEVICE = "channel-0"
DAEMON_DEVICE = "daemon"
CHANNEL_TYPE = "channel"
DAEMON_TYPE = "daemon"


def compute_domain_devices(*, host_managed: bool = False) -> list[dict[str, Any]]:
    """The published devices in the flat (resource.k8s.io/v1, v1beta2) shape; under host-managed IMEX the driver
    runs no daemons and publishes no ``daemon`` device (``computeDomainPublishedDevices`` in ``driver.go`` at
    commit 2dc387e)."""
    devices = [{"name": CHANNEL_DEVICE, "attributes": {"type": {"string": CHANNEL_TYPE}, "id": {"int": 0}}}]
    if not host_managed:
        devices.append({"name": DAEMON_DEVICE, "attributes": {"type": {"string": DAEMON_TYPE}, "id": {"int": 0}}})
    return devices


def compute_domain_slice_spec(
    node_name: str, api_version: str, generation: int = 1, *, host_managed: bool = False
) -> dict[str, Any]:
    """The node's one compute-domain ResourceSlice spec; v1beta1 wraps each device's fields in ``basic``."""
    devices = compute_domain_devices(host_managed=host_managed)
    if api_version == "resource.k8s.io/v1beta1":
        devices = [{"name": d["name"], "basic": {k: v for k, v in d.items() if k != "name"}} for d in devices]
    return {
        "driver": COMPUTE_DOMAIN_DRIVER,
        "nodeName": node_name,
        "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
        "devices": devices,
    }
