"""``kubectl apply`` of DRA workloads onto the kubelet emulator: what the API server's controllers and the
scheduler do for a pod with ResourceClaims, in one process, so NVIDIA's demo manifests run unchanged.

For each pod (a Deployment's become ``replicas`` pods as its ReplicaSet would make them, a Job's
``parallelism`` pods): the pod is created bound to the node; each ``resourceClaimTemplateName`` becomes
a claim as the resourceclaim controller writes it (``generateName: <pod>-<claim>-``, the pod as controller, the
``resource.kubernetes.io/pod-claim-name`` annotation, ``status.resourceClaimStatuses``); a container asking
for an extended resource that a DeviceClass serves gets the scheduler's special claim (KEP-5004,
:mod:`fakegpu.scheduling.extended_resources`); the claims not yet allocated are allocated together by
:class:`fakegpu.scheduling.allocator.Allocator` and written back (``status.allocation``), and the pod is
added to every claim's ``reservedFor``; then the kubelet emulator runs the pod, reading its claims from the
API server and preparing them through the DRA drivers registered with it.

Follows kubernetes ``pkg/controller/resourceclaim/controller.go`` and
``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go`` (v1.36).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import yaml
from lightkube import ApiError, AsyncClient, codecs
from lightkube.resources import core_v1, resource_v1
from lightkube.types import PatchType

from fakegpu.kubelet.container_claims import ContainerClaim
from fakegpu.kubelet.emulator import KubeletEmulator, PodResult
from fakegpu.kubelet.pod_claims import PodClaim
from fakegpu.kubelet.pod_spec import ContainerSpec
from fakegpu.kubelet.pod_status import PodStatusWriter
from fakegpu.scheduling.allocator import AllocationError, Allocator
from fakegpu.scheduling.extended_resources import extended_resource_claim
from fakegpu.testing.manifest_checks import check_document

POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
"""The resourceclaim controller's annotation on a claim made from a template: the pod's claim entry."""
KINDS = ("Namespace", "DeviceClass", "ResourceClaimTemplate", "ResourceClaim", "Pod", "Deployment", "Job")
"""What a manifest may hold, created in this order."""


@dataclass
class AppliedPod:
    namespace: str
    name: str
    uid: str
    result: PodResult | None
    """The kubelet emulator's pod: phase, prepare error, CDI devices per claim UID; None while unschedulable."""
    claims: dict[str, str] = field(default_factory=dict)
    """The pod's claim entries (``spec.resourceClaims[].name``, or ``extended-resources``) -> ResourceClaim names."""
    unschedulable: str = ""
    """Why the scheduler left the pod Pending (its claims cannot be allocated on the node); "" once it runs."""


def load_documents(text: str, source: str = "manifest") -> list[dict[str, Any]]:
    """The objects of a multi-document YAML; ValueError naming the document for a kind that cannot be applied."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ValueError(f"{source}: not valid YAML{where}: {problem}") from None
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or doc.get("kind") not in KINDS:
            kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
            raise ValueError(
                f"{source}: document {i + 1}: kind {kind!r} cannot be applied; expected one of {', '.join(KINDS)}"
            )
        check_document(doc, i + 1, source)
    return docs


def workload_pods(workload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A Deployment's pods as its ReplicaSet makes them (``replicas``, named ``<deployment>-<template hash>-``
    plus a suffix), or a Job's running at once (``parallelism``, named ``<job>-`` plus a suffix)."""
    meta = workload["metadata"]
    template = workload["spec"]["template"]
    if workload["kind"] == "Job":
        prefix, count = f"{meta['name']}-", int(workload["spec"].get("parallelism", 1))
    else:
        digest = hashlib.sha256(yaml.safe_dump(template, sort_keys=True).encode()).hexdigest()[:10]
        prefix, count = f"{meta['name']}-{digest}-", int(workload["spec"].get("replicas", 1))
    pods = []
    for _ in range(count):
        pod_meta = dict(template.get("metadata") or {})
        pod_meta["generateName"] = prefix
        pod_meta["namespace"] = meta.get("namespace", "default")
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": dict(template["spec"])})
    return pods


CLAIM_BASE_MAX = 57
"""The resourceclaim controller keeps ``<pod>-<claim>-`` to 57 characters: room for 5 random ones in 63."""


def claim_generate_name(pod: str, entry: str) -> str:
    """``<pod>-<claim>-``, or both names cut in proportion to their lengths (and no trailing ``-``) when
    longer than :data:`CLAIM_BASE_MAX`, as the resourceclaim controller cuts them."""
    name = f"{pod}-{entry}-"
    if len(name) <= CLAIM_BASE_MAX:
        return name
    return f"{pod[: len(pod) * CLAIM_BASE_MAX // len(name)]}-{entry[: len(entry) * CLAIM_BASE_MAX // len(name)]}"


def template_claim(pod: Mapping[str, Any], entry: str, template: Mapping[str, Any]) -> dict[str, Any]:
    """The ResourceClaim the resourceclaim controller makes for the pod's claim ``entry`` from ``template``:
    the template's labels and annotations plus ``resource.kubernetes.io/pod-claim-name``, the pod as
    controller, the template's ``spec.spec``."""
    meta = pod["metadata"]
    template_meta = (template.get("spec") or {}).get("metadata") or {}
    owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    claim_meta: dict[str, Any] = {
        "generateName": claim_generate_name(meta["name"], entry),
        "namespace": meta.get("namespace", "default"),
        "annotations": {**(template_meta.get("annotations") or {}), POD_CLAIM_NAME: entry},
        "ownerReferences": [{**owner, "controller": True, "blockOwnerDeletion": True}],
    }
    if template_meta.get("labels"):
        claim_meta["labels"] = dict(template_meta["labels"])
    spec = template["spec"]["spec"]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": claim_meta, "spec": spec}


class ManifestApplier:
    """Applies manifests to the API server behind ``client`` and runs their pods on ``kubelet`` as ``node``.

    With a started ``status_writer`` (``fakegpu.kubelet.pod_status.PodStatusWriter`` on the same client and
    kubelet) each pod it runs has its status (phase, container statuses with ``allocatedResourcesStatus``)
    written back to the API server and kept up to date as device health changes."""

    def __init__(
        self, client: AsyncClient, kubelet: KubeletEmulator, node: str, status_writer: PodStatusWriter | None = None
    ) -> None:
        self.client = client
        self.kubelet = kubelet
        self.node = node
        self.status_writer = status_writer

    async def apply(self, manifests: str | Sequence[Mapping[str, Any]]) -> list[AppliedPod]:
        docs = load_documents(manifests) if isinstance(manifests, str) else [dict(d) for d in manifests]
        pods: list[dict[str, Any]] = []
        for kind in KINDS:
            for doc in (d for d in docs if d["kind"] == kind):
                if kind == "Pod":
                    pods.append(doc)
                elif kind in ("Deployment", "Job"):
                    pods.extend(workload_pods(doc))
                elif kind == "Namespace":
                    await self._namespace(doc)
                else:
                    await self.client.create(codecs.from_dict(doc))
        return [await self.run(pod) for pod in pods]

    async def _namespace(self, doc: Mapping[str, Any]) -> None:
        """Create a Namespace, keeping one that exists; a server that serves none (the tests' API server by
        default) needs none."""
        try:
            await self.client.create(codecs.from_dict(dict(doc)))
        except ApiError as exc:
            if exc.status.code not in (HTTPStatus.CONFLICT, HTTPStatus.NOT_FOUND):
                raise

    async def _list(self, kind: Any) -> list[dict[str, Any]]:
        where: dict[str, Any] = {"namespace": "*"} if kind is resource_v1.ResourceClaim else {}
        listed: Any = self.client.list(kind, **where)
        return [_dict(obj) async for obj in listed]

    async def _templates(self, pod: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """The ResourceClaimTemplate of each of the pod's claim entries that names one, read before the pod
        is created: ValueError naming the pod, the entry and the template when one does not exist."""
        meta = pod["metadata"]
        namespace = meta.get("namespace", "default")
        out: dict[str, dict[str, Any]] = {}
        for entry in pod["spec"].get("resourceClaims") or []:
            name = entry.get("resourceClaimTemplateName")
            if not name:
                continue
            try:
                out[entry["name"]] = _dict(
                    await self.client.get(resource_v1.ResourceClaimTemplate, name, namespace=namespace)
                )
            except ApiError as exc:
                if exc.status.code != HTTPStatus.NOT_FOUND:
                    raise
                pod_name = meta.get("name") or meta.get("generateName")
                raise ValueError(
                    f"Pod {namespace}/{pod_name}: resourceClaims entry {entry['name']}: ResourceClaimTemplate "
                    f"{namespace}/{name} does not exist"
                ) from None
        return out

    async def _template_claims(
        self, pod: Mapping[str, Any], templates: Mapping[str, Mapping[str, Any]]
    ) -> tuple[dict[str, str], list[dict[str, str]]]:
        """The pod's claim entries -> ResourceClaim names, creating those from ``templates`` as the
        resourceclaim controller does; and the pod's ``status.resourceClaimStatuses``."""
        claims: dict[str, str] = {}
        statuses = []
        for entry in pod["spec"].get("resourceClaims") or []:
            if entry.get("resourceClaimName"):
                claims[entry["name"]] = entry["resourceClaimName"]
                continue
            made = _dict(
                await self.client.create(codecs.from_dict(template_claim(pod, entry["name"], templates[entry["name"]])))
            )
            claims[entry["name"]] = made["metadata"]["name"]
            statuses.append({"name": entry["name"], "resourceClaimName": made["metadata"]["name"]})
        return claims, statuses

    async def run(self, pod: Mapping[str, Any]) -> AppliedPod:
        """Create one pod bound to the node, make and allocate its claims, run it on the kubelet."""
        templates = await self._templates(pod)
        body = {**pod, "spec": {**pod["spec"], "nodeName": self.node}}
        created = _dict(await self.client.create(codecs.from_dict(body)))
        meta = created["metadata"]
        namespace, name, uid = meta.get("namespace", "default"), meta["name"], meta["uid"]
        claims, statuses = await self._template_claims(created, templates)
        status: dict[str, Any] = {"resourceClaimStatuses": statuses} if statuses else {}
        classes = await self._list(resource_v1.DeviceClass)
        special = extended_resource_claim(created, classes, self.kubelet.allocatable())
        if special is not None:
            made = _dict(await self.client.create(codecs.from_dict(special[0])))
            claims["extended-resources"] = made["metadata"]["name"]
            status["extendedResourceClaimStatus"] = {"resourceClaimName": made["metadata"]["name"], **special[1]}
        if status:
            await self.client.patch(
                core_v1.Pod.Status, name, {"status": status}, namespace=namespace, patch_type=PatchType.MERGE
            )
        try:
            await self._allocate(namespace, name, uid, list(claims.values()), classes)
        except AllocationError as exc:
            return AppliedPod(namespace, name, uid, None, claims, unschedulable=str(exc))
        result = await self.kubelet.run_pod(
            uid,
            {c["name"]: _device_plugin_requests(c, self.kubelet.allocatable()) for c in created["spec"]["containers"]},
            name=name,
            namespace=namespace,
            init_containers=_init_containers(created["spec"].get("initContainers") or [], self.kubelet.allocatable()),
            claims=[PodClaim(namespace, c, "") for c in dict.fromkeys(claims.values())],
            container_claims=_container_claims(created["spec"], claims, status.get("extendedResourceClaimStatus")),
            claim_entries={s["name"]: s["resourceClaimName"] for s in statuses},
            images={str(c["name"]): str(c.get("image", "")) for c in created["spec"]["containers"]},
        )
        if self.status_writer is not None:
            self.status_writer.track(namespace, name, uid)
        return AppliedPod(namespace, name, uid, result, claims)

    async def _allocate(
        self, namespace: str, pod: str, uid: str, names: Iterable[str], classes: list[dict[str, Any]]
    ) -> None:
        """The scheduler's part: allocate the pod's unallocated claims together, reserve every claim for it."""
        every = await self._list(resource_v1.ResourceClaim)
        allocated = [c for c in every if (c.get("status") or {}).get("allocation")]
        node = _dict(await self.client.get(core_v1.Node, self.node))
        allocator = Allocator(
            self.node,
            await self._list(resource_v1.ResourceSlice),
            classes,
            allocated,
            node_labels=(node.get("metadata") or {}).get("labels") or {},
        )
        mine = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in every}
        missing = [n for n in dict.fromkeys(names) if (namespace, n) not in mine]
        if missing:
            raise AllocationError(f"pod {namespace}/{pod}: ResourceClaim {namespace}/{missing[0]} does not exist")
        wanted = [mine[(namespace, n)] for n in dict.fromkeys(names)]
        pending = [c for c in wanted if not (c.get("status") or {}).get("allocation")]
        allocations = dict(zip((c["metadata"]["name"] for c in pending), allocator.allocate(pending), strict=True))
        for claim in wanted:
            status = dict(claim.get("status") or {})
            if claim["metadata"]["name"] in allocations:
                status["allocation"] = allocations[claim["metadata"]["name"]]
            status["reservedFor"] = [*(status.get("reservedFor") or []), {"resource": "pods", "name": pod, "uid": uid}]
            await self.client.patch(
                resource_v1.ResourceClaim.Status,
                claim["metadata"]["name"],
                {"status": status},
                namespace=namespace,
                patch_type=PatchType.MERGE,
            )


def _dict(obj: Any) -> dict[str, Any]:
    """A lightkube object as the plain dict the allocator reads."""
    out: dict[str, Any] = obj.to_dict()
    return out


def _device_plugin_requests(container: Mapping[str, Any], allocatable: Mapping[str, int]) -> dict[str, int]:
    """A container's extended resources that a device plugin on the node serves (DRA serves the others)."""
    limits = (container.get("resources") or {}).get("limits") or {}
    return {k: int(v) for k, v in limits.items() if allocatable.get(k, 0) > 0}


def _init_containers(specs: Sequence[Mapping[str, Any]], allocatable: Mapping[str, int]) -> list[ContainerSpec]:
    return [
        ContainerSpec(
            str(c["name"]),
            _device_plugin_requests(c, allocatable),
            "sidecar" if c.get("restartPolicy") == "Always" else "init",
        )
        for c in specs
    ]


def _container_claims(
    spec: Mapping[str, Any], claims: Mapping[str, str], extended: Mapping[str, Any] | None
) -> dict[str, list[ContainerClaim]]:
    """Per container (init containers too), the ResourceClaims and requests it uses: its ``resources.claims``
    entries (pod claim name -> ResourceClaim), and for the extended-resource claim the requests
    ``requestMappings`` gives it (kubernetes pkg/kubelet/cm/dra/manager.go ``GetResources``, v1.36)."""
    out: dict[str, list[ContainerClaim]] = {}
    for container in [*(spec.get("initContainers") or []), *spec["containers"]]:
        refs = out.setdefault(str(container["name"]), [])
        for entry in (container.get("resources") or {}).get("claims") or []:
            if entry.get("name") in claims:
                refs.append(ContainerClaim(claims[entry["name"]], str(entry.get("request") or "")))
    extended = extended or {}
    for mapping in extended.get("requestMappings") or []:
        ref = ContainerClaim(str(extended["resourceClaimName"]), str(mapping["requestName"]))
        out.setdefault(str(mapping.get("containerName")), []).append(ref)
    return out
