"""Namespaces and CRDs on the fake API server go the way a real server takes them down (``namespaces_and_crds``):
deleting one only marks it while anything it holds remains, so a teardown test can see what would hang."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import httpx2
import pytest
from lightkube import ApiError, AsyncClient
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Namespace
from lightkube.resources.resource_v1 import ResourceClaimTemplate
from lightkube.types import PatchType

from fakegpu.dra.compute_domain.resources import ComputeDomain
from tests.apiserver import FakeApiServer
from tests.deploy.manifests import one, render

FINALIZER = "example.com/hold"
CRD_NAME = "computedomains.resource.nvidia.com"
Obj = dict[str, Any]


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer("1.36", nvidia_crds=True, namespaces_and_crds=True) as srv:
        yield srv
        assert srv.errors == []


@pytest.fixture
async def client(server: FakeApiServer) -> AsyncIterator[AsyncClient]:
    kube = server.client()
    yield kube
    await kube.close()


def template(namespace: str, finalizers: list[str]) -> ResourceClaimTemplate:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    body: Obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": namespace, "finalizers": finalizers},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }
    return cast(ResourceClaimTemplate, ResourceClaimTemplate.from_dict(body))


def domain(namespace: str, finalizers: list[str]) -> Any:
    return ComputeDomain.from_dict(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": "cd", "namespace": namespace, "finalizers": finalizers},
            "spec": {"channel": {"resourceClaimTemplate": {"name": "cd-channel"}}},
        }
    )


async def refused(client: AsyncClient, obj: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        await client.create(obj)
    return info.value


async def test_a_namespace_terminates_once_the_finalizers_of_what_it_holds_are_gone(
    server: FakeApiServer, client: AsyncClient
) -> None:
    created = await client.create(cast(Namespace, Namespace.from_dict({"metadata": {"name": "team"}})))
    assert created.spec is not None and created.spec.finalizers == ["kubernetes"]
    assert created.status is not None and created.status.phase == "Active"
    await client.create(template("team", [FINALIZER]))
    await client.create(template("other", []))

    await client.delete(Namespace, "team")
    namespace = await client.get(Namespace, "team")
    assert namespace.status is not None and namespace.status.phase == "Terminating"
    held = await client.get(ResourceClaimTemplate, "t", namespace="team")
    assert held.metadata is not None and held.metadata.deletionTimestamp is not None
    error = await refused(client, template("team", []))
    assert error.status.code == 403 and "because it is being terminated" in (error.status.message or "")

    await client.patch(
        ResourceClaimTemplate, "t", {"metadata": {"finalizers": None}}, namespace="team", patch_type=PatchType.MERGE
    )
    assert server.get_object("namespaces", "team") is None
    assert server.get_object("resourceclaimtemplates", "t", "team") is None
    assert server.get_object("resourceclaimtemplates", "t", "other") is not None, "another namespace's stays"


async def test_a_crd_terminates_once_its_custom_resources_are_gone_and_is_then_not_served(
    server: FakeApiServer, client: AsyncClient
) -> None:
    crd = one(render("compute-domains"), "CustomResourceDefinition", CRD_NAME)
    await client.create(cast(CustomResourceDefinition, CustomResourceDefinition.from_dict(crd)))
    await client.create(domain("team", [FINALIZER]))

    await client.delete(CustomResourceDefinition, CRD_NAME)
    stored = server.get_object("customresourcedefinitions", CRD_NAME)
    assert stored is not None, "a CRD whose resources keep a finalizer stays"
    assert stored["metadata"]["finalizers"] == ["customresourcecleanup.apiextensions.k8s.io"]
    assert stored["status"]["conditions"][0]["type"] == "Terminating"
    marked = server.get_object("computedomains", "cd", "team")
    assert marked is not None and marked["metadata"]["deletionTimestamp"]
    error = await refused(client, domain("other", []))
    assert error.status.code == 405

    await client.patch(
        ComputeDomain, "cd", {"metadata": {"finalizers": None}}, namespace="team", patch_type=PatchType.MERGE
    )
    assert server.get_object("customresourcedefinitions", CRD_NAME) is None
    with pytest.raises(ApiError) as info:
        _ = [d async for d in client.list(ComputeDomain, namespace="team")]
    assert info.value.status.code == 404, "the kind is no longer served"


async def test_an_empty_namespace_and_an_unused_crd_go_at_once(server: FakeApiServer, client: AsyncClient) -> None:
    await client.create(cast(Namespace, Namespace.from_dict({"metadata": {"name": "empty"}})))
    await client.delete(Namespace, "empty")
    assert server.get_object("namespaces", "empty") is None
    crd = one(render("compute-domains"), "CustomResourceDefinition", CRD_NAME)
    await client.create(cast(CustomResourceDefinition, CustomResourceDefinition.from_dict(crd)))
    await client.delete(CustomResourceDefinition, CRD_NAME)
    assert server.get_object("customresourcedefinitions", CRD_NAME) is None


async def test_kubectl_finds_crds_by_short_name_and_sees_the_end_of_a_watch_lists_initial_events(
    server: FakeApiServer,
) -> None:
    # What the teardown's `kubectl get crd NAME` and `kubectl delete --wait` need from the server.
    async with httpx2.AsyncClient(base_url=server.url) as http:
        groups = [g["name"] for g in (await http.get("/apis")).json()["groups"]]
        assert "apiextensions.k8s.io" in groups
        (crds,) = (await http.get("/apis/apiextensions.k8s.io/v1")).json()["resources"][:1]
        assert (crds["name"], crds["shortNames"]) == ("customresourcedefinitions", ["crd", "crds"])
        query = "watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
        async with http.stream("GET", f"/api/v1/namespaces?{query}&timeoutSeconds=1") as response:
            (line,) = [json.loads(x) async for x in response.aiter_lines() if x]
    assert line["type"] == "BOOKMARK"
    assert line["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
