"""The API calls the compute-domain plugin makes: find a ComputeDomain by UID, read a node's readiness in
it, and set or clear the node's ``resource.nvidia.com/computeDomain`` label.

NVIDIA's plugin reads domains through an informer keyed by UID (``cmd/compute-domain-kubelet-plugin/
computedomain.go``); fakegpu lists the domains of all namespaces when it needs one (a prepare, a
daemon reconcile), which is what an informer's cache would hold. The node label is NVIDIA's Get + Update;
fakegpu writes it as a merge patch carrying the resourceVersion it read, so a concurrent writer makes the
patch fail with 409 and the write is retried from a fresh read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from fakegpu.dra.claim_error import ClaimError
from fakegpu.dra.compute_domain.resources import (
    COMPUTE_DOMAIN_LABEL,
    READY,
    ComputeDomain,
    ComputeDomainClique,
)

MAX_CONFLICT_RETRIES: Final = 5


def clique_object_name(domain_uid: str, clique: str) -> str:
    """``<domain UID>.<clique>``: the ComputeDomainClique of one domain's daemons on one clique."""
    return f"{domain_uid}.{clique}"


def ready_in_clique(clique: Mapping[str, Any] | None, node: str) -> bool:
    """The node's daemon entry in its ComputeDomainClique (None: none written yet) says Ready."""
    entries = (clique or {}).get("daemons") or []
    return any(e.get("nodeName") == node and e.get("status") == READY for e in entries)


def ready_in_status(domain: Mapping[str, Any], node: str) -> bool:
    """The node's entry in the domain's ``status.nodes`` (a node without a clique) says Ready."""
    nodes = (domain.get("status") or {}).get("nodes") or []
    return any(n.get("name") == node and n.get("status") == READY for n in nodes)


def _dict(obj: Any) -> dict[str, Any]:
    data: dict[str, Any] = obj.to_dict()
    return data


class DomainApi:
    """The calls of one node's plugin; ``namespace`` is the driver's (where cliques live)."""

    def __init__(self, client: AsyncClient, node: str, namespace: str, *, cliques: bool = True) -> None:
        """``cliques``: the gate ComputeDomainCliques (readiness is read from the domain's cliques too)."""
        self.client = client
        self.node = node
        self.namespace = namespace
        self.cliques = cliques

    async def domain(self, uid: str) -> dict[str, Any] | None:
        """The ComputeDomain with this UID, as a dict, or None."""
        async for cd in self.client.list(ComputeDomain, namespace="*"):
            data = _dict(cd)
            if (data.get("metadata") or {}).get("uid") == uid:
                return data
        return None

    async def clique(self, domain_uid: str, clique: str) -> dict[str, Any] | None:
        try:
            obj = await self.client.get(
                ComputeDomainClique, clique_object_name(domain_uid, clique), namespace=self.namespace
            )
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise
        return _dict(obj)

    async def node_ready(self, domain: Mapping[str, Any], clique: str) -> bool:
        """NVIDIA's ``AssertComputeDomainReady`` (``isCurrentNodeReady``): with ComputeDomainCliques on, this
        node's entry in the clique object says Ready, else (and with the gate off, only) its entry in the
        domain's ``status.nodes`` does, so domains started before the gate was turned on keep working."""
        uid = str(domain["metadata"]["uid"])
        if self.cliques and clique and ready_in_clique(await self.clique(uid, clique), self.node):
            return True
        return ready_in_status(domain, self.node)

    async def node_label(self) -> str | None:
        node = await self.client.get(Node, self.node)
        labels = (node.metadata.labels if node.metadata else None) or {}
        return labels.get(COMPUTE_DOMAIN_LABEL)

    async def add_node_label(self, domain_uid: str) -> None:
        """Label the node for the domain (its daemon lands here); refused when it is labelled for another."""
        for _ in range(MAX_CONFLICT_RETRIES):
            node = await self.client.get(Node, self.node)
            meta = node.metadata
            current = ((meta.labels if meta else None) or {}).get(COMPUTE_DOMAIN_LABEL)
            if current == domain_uid:
                return
            if current:
                raise ClaimError(
                    "error adding Node label for ComputeDomain: label already exists for a different ComputeDomain"
                )
            if await self._patch_label(meta.resourceVersion if meta else None, domain_uid):
                return
        raise ClaimError("error adding Node label for ComputeDomain: too many conflicting writes to the Node")

    async def remove_node_label(self, domain_uid: str) -> bool:
        """Clear the label if it names this domain; True when it was removed."""
        for _ in range(MAX_CONFLICT_RETRIES):
            node = await self.client.get(Node, self.node)
            meta = node.metadata
            if ((meta.labels if meta else None) or {}).get(COMPUTE_DOMAIN_LABEL) != domain_uid:
                return False
            if await self._patch_label(meta.resourceVersion if meta else None, None):
                return True
        raise ClaimError("error removing Node label for ComputeDomain: too many conflicting writes to the Node")

    async def _patch_label(self, resource_version: str | None, value: str | None) -> bool:
        patch: dict[str, Any] = {"metadata": {"labels": {COMPUTE_DOMAIN_LABEL: value}}}
        if resource_version:
            patch["metadata"]["resourceVersion"] = resource_version
        try:
            await self.client.patch(Node, self.node, patch, patch_type=PatchType.MERGE)
        except ApiError as exc:
            if exc.status.code == 409:
                return False
            raise
        return True
