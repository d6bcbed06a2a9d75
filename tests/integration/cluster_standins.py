"""What a real cluster does around a cluster scenario, for the tests' API server (where nothing schedules and no
kubelet runs): the scenario files stay as they would run on a real cluster, these stand in for the rest.

- :class:`PodPlacer`: kube-scheduler, the resourceclaim controller and the node's kubelet for one node: it
  follows the pods of a namespace, and each new one without a node gets its claims made from their templates,
  allocated by ``fakegpu.scheduling.allocator`` (as ``fakegpu.testing.manifest_apply`` does), is bound to the
  node and run on the kubelet emulator, whose ``PodStatusWriter`` writes its status back;
- :class:`VirtualPodPlacer`: kube-scheduler and KWOK for virtual nodes: each new pod of a namespace goes to the
  first virtual node (in name order) its required pod affinity and anti-affinity allow and where its claims,
  made from their templates, can be allocated; the pod is bound there and marked Running, or, when no node
  fits, left Pending with ``PodScheduled`` False (Unschedulable) as the scheduler leaves it;
- :class:`NodeStatusWriter`: the kubelet's node status update, writing the kubelet emulator's capacity and
  allocatable to the Node when they change (kubernetes ``pkg/kubelet/nodestatus/setters.go`` ``MachineInfo``,
  v1.36).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from lightkube import AsyncClient, codecs
from lightkube.resources import core_v1, resource_v1
from lightkube.types import PatchType

from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.scheduling.allocator import AllocationError, Allocator
from fakegpu.testing.manifest_apply import AppliedPod, ManifestApplier, template_claim
from fakegpu.virtual_nodes.node_manifest import PREFIX_LABEL

POLL = 0.05


class PodPlacer:
    """Places each new pod of ``namespace`` on the applier's node (one pod at a time, in creation order)."""

    def __init__(self, applier: ManifestApplier, namespace: str) -> None:
        self.applier = applier
        self.namespace = namespace
        self.placed: dict[str, AppliedPod] = {}
        self.errors: list[str] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PodPlacer:
        self._task = asyncio.create_task(self._run(), name="pod-placer")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await cancel_and_wait([self._task])

    async def _run(self) -> None:
        client = self.applier.client
        while True:
            async for pod in client.list(core_v1.Pod, namespace=self.namespace):
                obj: dict[str, Any] = pod.to_dict()
                name = obj["metadata"]["name"]
                if name in self.placed or (obj.get("spec") or {}).get("nodeName"):
                    continue
                self.placed[name] = await self._place(obj)
            await asyncio.sleep(POLL)

    async def _place(self, pod: dict[str, Any]) -> AppliedPod:
        meta = pod["metadata"]
        await self.applier.client.patch(
            core_v1.Pod,
            meta["name"],
            {"spec": {"nodeName": self.applier.node}},
            namespace=meta["namespace"],
            patch_type=PatchType.MERGE,
        )
        pod = {**pod, "spec": {**pod["spec"], "nodeName": self.applier.node}}
        placed = await self.applier.run_created(pod, await self.applier._templates(pod))
        if placed.unschedulable:
            self.errors.append(placed.unschedulable)
        return placed


class VirtualPodPlacer:
    """Places each new pod of ``namespace`` on a virtual node (one per node), its claims allocated there."""

    def __init__(self, client: AsyncClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.placed: dict[str, str] = {}
        """Pod -> the node it was bound to ("" when it could not be placed)."""
        self.pod_labels: dict[str, dict[str, str]] = {}
        self.unschedulable: list[str] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> VirtualPodPlacer:
        self._task = asyncio.create_task(self._run(), name="virtual-pod-placer")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await cancel_and_wait([self._task])

    async def _list(self, kind: Any, **where: Any) -> list[dict[str, Any]]:
        return [o.to_dict() async for o in self.client.list(kind, **where)]

    async def _run(self) -> None:
        while True:
            for pod in await self._list(core_v1.Pod, namespace=self.namespace):
                name = pod["metadata"]["name"]
                if name not in self.placed and not (pod.get("spec") or {}).get("nodeName"):
                    await self._place(pod)
            await asyncio.sleep(POLL)

    async def _place(self, pod: dict[str, Any]) -> None:
        templates: dict[str, dict[str, Any]] = {}
        for entry in pod["spec"].get("resourceClaims") or []:
            name = entry.get("resourceClaimTemplateName")
            if name:
                found = await self._list(resource_v1.ResourceClaimTemplate, namespace=self.namespace)
                match = [t for t in found if t["metadata"]["name"] == name]
                if not match:
                    return  # the ComputeDomain controller has not made it yet: try again on the next look
                templates[entry["name"]] = match[0]
        claims = {entry: template_claim(pod, entry, t) for entry, t in templates.items()}
        nodes = [n for n in await self._list(core_v1.Node) if PREFIX_LABEL in (n["metadata"].get("labels") or {})]
        slices = await self._list(resource_v1.ResourceSlice)
        classes = await self._list(resource_v1.DeviceClass)
        every = await self._list(resource_v1.ResourceClaim, namespace="*")
        allocated = [c for c in every if (c.get("status") or {}).get("allocation")]
        for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
            name = node["metadata"]["name"]
            labels = node["metadata"].get("labels") or {}
            if not self._affinity_allows(pod, labels, {n["metadata"]["name"]: n for n in nodes}):
                continue
            try:
                allocations = Allocator(name, slices, classes, allocated, node_labels=labels).allocate(
                    list(claims.values())
                )
            except AllocationError:
                continue
            await self._bind(pod, name, claims, allocations)
            return
        await self._unschedulable(pod, len(nodes))

    def _affinity_allows(self, pod: dict[str, Any], labels: dict[str, str], nodes: dict[str, Any]) -> bool:
        """The pod's required pod affinity and anti-affinity (label selectors by ``matchLabels``) on a node with
        ``labels``, against the pods placed so far (kubernetes pkg/scheduler/framework/plugins/interpodaffinity,
        v1.36: a first pod of its own affinity group may go anywhere)."""
        affinity = (pod.get("spec") or {}).get("affinity") or {}
        for kind, together in (("podAffinity", True), ("podAntiAffinity", False)):
            terms = (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []
            for term in terms:
                wanted = (term.get("labelSelector") or {}).get("matchLabels") or {}
                key = term["topologyKey"]
                peers = [
                    (nodes.get(node) or {}).get("metadata", {}).get("labels", {}).get(key)
                    for peer_labels, node in self.labels_and_nodes()
                    if node and all(peer_labels.get(k) == v for k, v in wanted.items())
                ]
                if together and peers and any(value != labels.get(key) for value in peers):
                    return False
                if not together and labels.get(key) in peers:
                    return False
        return True

    def labels_and_nodes(self) -> list[tuple[dict[str, str], str]]:
        return [(self.pod_labels[name], node) for name, node in self.placed.items()]

    async def _unschedulable(self, pod: dict[str, Any], nodes: int) -> None:
        """What the scheduler writes on a pod it cannot place: ``PodScheduled`` False, reason Unschedulable."""
        meta = pod["metadata"]
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": f"0/{nodes} nodes are available",
        }
        await self.client.patch(
            core_v1.Pod.Status,
            meta["name"],
            {"status": {"phase": "Pending", "conditions": [condition]}},
            namespace=self.namespace,
            patch_type=PatchType.MERGE,
        )
        self.unschedulable.append(meta["name"])
        self.placed[meta["name"]] = ""

    async def _bind(
        self, pod: dict[str, Any], node: str, claims: dict[str, dict[str, Any]], allocations: list[dict[str, Any]]
    ) -> None:
        meta = pod["metadata"]
        ref = {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
        statuses = []
        for (entry, claim), allocation in zip(claims.items(), allocations, strict=True):
            made: dict[str, Any] = (await self.client.create(codecs.from_dict(claim))).to_dict()  # type: ignore[no-untyped-call]
            status = {"allocation": allocation, "reservedFor": [ref]}
            await self.client.patch(
                resource_v1.ResourceClaim.Status,
                made["metadata"]["name"],
                {"status": status},
                namespace=self.namespace,
                patch_type=PatchType.MERGE,
            )
            statuses.append({"name": entry, "resourceClaimName": made["metadata"]["name"]})
        await self.client.patch(
            core_v1.Pod,
            meta["name"],
            {"spec": {"nodeName": node}},
            namespace=self.namespace,
            patch_type=PatchType.MERGE,
        )
        await self.client.patch(
            core_v1.Pod.Status,
            meta["name"],
            {"status": {"phase": "Running", "resourceClaimStatuses": statuses}},
            namespace=self.namespace,
            patch_type=PatchType.MERGE,
        )
        self.placed[meta["name"]] = node
        self.pod_labels[meta["name"]] = dict(meta.get("labels") or {})


class NodeStatusWriter:
    """Writes the kubelet emulator's extended resources to the Node's ``status.capacity``/``allocatable``."""

    def __init__(self, client: AsyncClient, kubelet: KubeletEmulator, node: str) -> None:
        self.client = client
        self.kubelet = kubelet
        self.node = node
        self.written: dict[str, dict[str, str]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe: Any = None

    async def __aenter__(self) -> NodeStatusWriter:
        self._unsubscribe = self.kubelet.subscribe(self._wake.set)
        self._task = asyncio.create_task(self._run(), name="node-status-writer")
        self._wake.set()
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self._unsubscribe()
        await cancel_and_wait([self._task])

    def _status(self) -> dict[str, dict[str, str]]:
        return {
            "capacity": {k: str(v) for k, v in self.kubelet.capacity().items()},
            "allocatable": {k: str(v) for k, v in self.kubelet.allocatable().items()},
        }

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            status = self._status()
            if status != self.written:
                await self.client.patch(core_v1.Node.Status, self.node, {"status": status}, patch_type=PatchType.MERGE)
                self.written = status
