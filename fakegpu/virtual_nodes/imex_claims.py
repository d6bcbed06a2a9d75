"""Which compute-domain claims a virtual node would prepare: what its kubelet would hand NVIDIA's plugin.

On a real node the kubelet prepares a pod's claims once the pod is bound there, and NVIDIA's compute-domain
plugin (``cmd/compute-domain-kubelet-plugin/device_state.go`` of kubernetes-sigs/dra-driver-nvidia-gpu at
commit 0807eed) reads of each claim its ``compute-domain.nvidia.com`` results on the node and the domain each
result's config names: a ``channel-0`` result labels the node ``resource.nvidia.com/computeDomain=<domain
UID>`` so the domain's IMEX daemon lands there, a ``daemon`` result is that daemon. A virtual node has no
kubelet, so ``fakegpu.virtual_nodes.imex_daemons`` reads the same from the API server: a claim counts on a node
while it is allocated there and reserved for a pod bound to that node. The results and configs are read with
the plugin's own code (``fakegpu.dra.compute_domain.domain_prepare.allocated_devices``); a claim that plugin
would refuse (a bad config, no domain ID) counts nowhere, as its prepare would fail.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import Any

from fakegpu.dra.claim_error import ClaimError
from fakegpu.dra.compute_domain.devices import CHANNEL_DEVICE, COMPUTE_DOMAIN_DRIVER
from fakegpu.dra.compute_domain.domain_prepare import allocated_devices
from fakegpu.dra.prepared_claims import ClaimRef


@dataclass(frozen=True)
class DomainHold:
    """What one allocated claim holds of the compute-domain driver on one virtual node."""

    node: str
    pods: frozenset[str]
    """The UIDs of the pods the claim is reserved for (``status.reservedFor``)."""
    channels: frozenset[str]
    """The domains whose channel the claim holds (the node label's value)."""
    daemons: frozenset[str]
    """The domains whose daemon device the claim holds."""

    @property
    def domains(self) -> frozenset[str]:
        return self.channels | self.daemons


def claim_key(claim: Mapping[str, Any]) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def domain_hold(claim: Mapping[str, Any], nodes: Container[str]) -> DomainHold | None:
    """The claim's hold on a virtual node (one of ``nodes``), or None: not allocated, no result of the
    compute-domain driver on a virtual node, or refused as NVIDIA's plugin would refuse it (``ClaimError``,
    the reason)."""
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    pools = {r.get("pool") for r in results if isinstance(r, Mapping) and r.get("driver") == COMPUTE_DOMAIN_DRIVER}
    node = next((str(p) for p in sorted(pools, key=str) if p in nodes), None)
    if node is None:
        return None
    meta = claim.get("metadata") or {}
    ref = ClaimRef(str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", "")))
    devices = allocated_devices(ref, claim, driver=COMPUTE_DOMAIN_DRIVER, node=node)
    reserved = status.get("reservedFor") or []
    pods = frozenset(str(r.get("uid")) for r in reserved if isinstance(r, Mapping) and r.get("resource") == "pods")
    channels = frozenset(d.config.domain_id for d in devices if d.device == CHANNEL_DEVICE)
    daemons = frozenset(d.config.domain_id for d in devices if d.device != CHANNEL_DEVICE)
    return DomainHold(node, pods, channels, daemons)


def safe_domain_hold(claim: Mapping[str, Any], nodes: Container[str]) -> tuple[DomainHold | None, str | None]:
    """``domain_hold`` with a refusal turned into its reason (the claim then counts nowhere)."""
    try:
        return domain_hold(claim, nodes), None
    except ClaimError as exc:
        return None, str(exc)
