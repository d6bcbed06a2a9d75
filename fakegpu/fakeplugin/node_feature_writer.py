"""The device plugin's GFD part with ``useNodeFeatureAPI``: keeps the node's NodeFeature as GFD does.

NVIDIA's GFD (``internal/lm/output.go``, v0.20.0) gets ``nvidia-features-for-<node>`` in its namespace,
creates it when missing, and otherwise replaces its node-name label, spec and owner references when any of
them differ (an unchanged object is not written). Its owner references are worked out once per run from the
pod named by ``POD_NAME``; a pod that cannot be read is logged and the object written without owners, as GFD
does. The object itself is built by ``fakegpu.sharing.node_feature``.

Unlike GFD, which never deletes the object (the DaemonSet's garbage collection does), fakegpu deletes it when
the plugin stops if ``--cleanup-on-exit`` says the labels go: the same policy as the labels on the Node.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import Pod

from fakegpu.sharing.node_feature import GROUP, KIND, PLURAL, VERSION, node_feature, node_feature_name, owner_references

log = logging.getLogger(__name__)

NodeFeature = create_namespaced_resource(GROUP, VERSION, KIND, PLURAL)
"""Node Feature Discovery's NodeFeature, served once NFD's CRDs are installed."""


def _as_dict(obj: Any) -> dict[str, Any]:
    """A generic resource as the plain dict the API server sent."""
    return dict(obj.to_dict())


def _compared(obj: dict[str, Any]) -> tuple[Any, ...]:
    """What GFD sets and compares: the object's labels, spec and owner references."""
    meta = obj.get("metadata") or {}
    return (meta.get("labels") or {}, obj.get("spec") or {}, meta.get("ownerReferences") or [])


class NodeFeatureWriter:
    """Creates, updates and deletes one node's NodeFeature through lightkube's generic resource."""

    def __init__(self, node_name: str, namespace: str, pod_name: str = "") -> None:
        self.node_name = node_name
        self.namespace = namespace
        self.pod_name = pod_name
        self.name = node_feature_name(node_name)
        self._owners: list[dict[str, Any]] | None = None
        self.written = False
        """Whether this process has (or may have: a stop can cut a request short) written the object, so the
        stop knows there may be one to take back."""

    async def owners(self, client: AsyncClient) -> list[dict[str, Any]]:
        """The DaemonSet and pod owning GFD's pod, read once (GFD reads them once per run)."""
        if self._owners is not None:
            return self._owners
        self._owners = []
        if not self.pod_name:
            log.info("no pod name (POD_NAME): NodeFeature %s gets no owner references", self.name)
            return self._owners
        try:
            pod = await client.get(Pod, self.pod_name, namespace=self.namespace)
        except ApiError as exc:
            log.warning("reading pod %s/%s for owner references failed: %s", self.namespace, self.pod_name, exc)
            return self._owners
        meta = pod.metadata
        owners = [ref.to_dict() for ref in (meta.ownerReferences or [])] if meta else []
        self._owners = owner_references(self.pod_name, (meta.uid if meta else None) or "", owners)
        if not self._owners:
            log.info(
                "pod %s is not owned by a DaemonSet: NodeFeature %s gets no owner references", self.pod_name, self.name
            )
        return self._owners

    async def write(self, client: AsyncClient, labels: dict[str, str]) -> bool:
        """Create or update the object to carry ``labels``; False when it already did (nothing written)."""
        wanted = node_feature(self.node_name, self.namespace, labels, await self.owners(client))
        try:
            current = await client.get(NodeFeature, self.name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            self.written = True
            try:
                await client.create(NodeFeature.from_dict(wanted))
            except ApiError as missing:
                if missing.status.code != 404:
                    raise
                raise RuntimeError(
                    f"creating NodeFeature {self.namespace}/{self.name}: the API server does not serve "
                    f"{GROUP}/{VERSION} {PLURAL} (is Node Feature Discovery installed? Its master turns "
                    "NodeFeatures into Node labels; without it, turn useNodeFeatureAPI off)"
                ) from None
            log.info("created NodeFeature %s/%s (%d labels)", self.namespace, self.name, len(labels))
            return True
        existing = _as_dict(current)
        if _compared(existing) == _compared(wanted):
            self.written = True
            return False
        metadata = {**existing["metadata"], "labels": wanted["metadata"]["labels"]}
        metadata.pop("ownerReferences", None)
        if "ownerReferences" in wanted["metadata"]:
            metadata["ownerReferences"] = wanted["metadata"]["ownerReferences"]
        updated = {**existing, "metadata": metadata, "spec": wanted["spec"]}
        self.written = True
        await client.replace(NodeFeature.from_dict(updated))
        log.info("updated NodeFeature %s/%s (%d labels)", self.namespace, self.name, len(labels))
        return True

    async def delete(self, client: AsyncClient, timeout: float) -> bool:
        """Delete the object; False when it was already gone."""
        try:
            await asyncio.wait_for(client.delete(NodeFeature, self.name, namespace=self.namespace), timeout)
        except ApiError as exc:
            if exc.status.code == 404:
                return False
            raise
        finally:
            self.written = False
        log.info("deleted NodeFeature %s/%s", self.namespace, self.name)
        return True
