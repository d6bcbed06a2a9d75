"""Which CDI devices of a pod's prepared claims each container gets.

A real kubelet gives a container only the claims its ``resources.claims`` names, and of a claim entry with
a ``request`` only the devices prepared for that request (kubernetes ``pkg/kubelet/cm/dra/manager.go``
``GetResources``, v1.36: a device is the container's when the reference names no request or the device's
``RequestNames`` hold it; a ``firstAvailable`` subrequest ``req/sub`` counts as ``req``). The pod-wide
CDI list (every claim) is what a pod gets when its caller names no container references.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fakegpu.kubelet.dra_plugins import PreparedDevice


@dataclass(frozen=True)
class ContainerClaim:
    """One ``resources.claims`` entry of a container, by the ResourceClaim's own name."""

    claim: str
    request: str = ""
    """"" for the whole claim."""


def serves(device: PreparedDevice, request: str) -> bool:
    """Whether ``device`` was prepared for ``request`` ("" = any request)."""
    return not request or any(n == request or n.split("/", 1)[0] == request for n in device.request_names)


def cdi_ids(devices: Iterable[PreparedDevice], request: str) -> list[str]:
    """The CDI device IDs of the ``devices`` that serve ``request``, in order, each once."""
    return list(dict.fromkeys(i for d in devices if serves(d, request) for i in d.cdi_device_ids))
