"""The fake API server with NVIDIA's CRDs installed (``nvidia_crds=True``) refuses and defaults ComputeDomains
and ComputeDomainCliques as a real server with deploy/overlays/compute-domains does (the schema of
kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu/crds/
resource.nvidia.com_computedomains.yaml, driver 25.12)."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from lightkube import ApiError, AsyncClient

from fakegpu.dra.compute_domain.resources import ComputeDomain, ComputeDomainClique
from tests.apiserver import FakeApiServer

IMMUTABLE = 'spec: Invalid value: "object": A computeDomain.spec is immutable'


@pytest.fixture
def server():
    with FakeApiServer("1.36", nvidia_crds=True) as srv:
        yield srv
        assert srv.errors == []


@pytest.fixture
async def client(server: FakeApiServer):
    kube = server.client()
    yield kube
    await kube.close()


def domain(name: str = "cd", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}, **spec},
    }


def clique(daemons: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainClique",
        "metadata": {"name": "uid.cluster.1", "namespace": "fakegpu"},
        "daemons": daemons,
    }


async def create(client: AsyncClient, obj: dict[str, Any]) -> dict[str, Any]:
    kind = ComputeDomain if obj["kind"] == "ComputeDomain" else ComputeDomainClique
    created: dict[str, Any] = (await client.create(kind.from_dict(obj))).to_dict()
    return created


async def refused(client: AsyncClient, obj: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as info:
        await create(client, obj)
    assert info.value.status.code == 422
    return str(info.value.status.message)


async def test_create_fills_in_the_schema_defaults_and_drops_status(client: AsyncClient) -> None:
    body = domain()
    body["status"] = {"status": "Ready"}
    created = await create(client, body)
    assert created["spec"] == {
        "channel": {"resourceClaimTemplate": {"name": "cd-channel"}, "allocationMode": "Single"},
        "numNodes": 0,
    }
    assert "status" not in created


async def test_unknown_fields_are_pruned(client: AsyncClient) -> None:
    body = domain(numNodes=2, surprise=True)
    created = await create(client, body)
    assert "surprise" not in created["spec"]
    assert created["spec"]["numNodes"] == 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"channel": {}}, "spec.channel.resourceClaimTemplate: Required value"),
        ({"channel": {"resourceClaimTemplate": {}}}, "spec.channel.resourceClaimTemplate.name: Required value"),
        (
            {"channel": {"resourceClaimTemplate": {"name": "x"}, "allocationMode": "Some"}},
            'spec.channel.allocationMode: Unsupported value: "Some": supported values: "All", "Single"',
        ),
        (
            {"channel": {"resourceClaimTemplate": {"name": "x"}}, "numNodes": -1},
            "spec.numNodes: Invalid value: -1: spec.numNodes in body should be greater than or equal to 0",
        ),
        ({"numNodes": 1}, "spec.channel: Required value"),
    ],
)
async def test_invalid_specs_are_refused_with_the_field(client: AsyncClient, spec: Any, message: str) -> None:
    body = domain()
    body["spec"] = spec
    assert message in await refused(client, body)


async def test_spec_is_immutable_but_metadata_is_not(client: AsyncClient) -> None:
    created = await create(client, domain(numNodes=1))
    changed = ComputeDomain.from_dict({**created, "spec": {**created["spec"], "numNodes": 2}})
    with pytest.raises(ApiError) as info:
        await client.replace(changed)
    assert info.value.status.code == 422
    assert IMMUTABLE in str(info.value.status.message)
    # The same spec written back without its defaults is the same spec once defaulted: accepted.
    relabelled = dict(created)
    relabelled["metadata"] = {**created["metadata"], "labels": {"a": "b"}, "finalizers": ["x/y"]}
    relabelled["spec"] = {"channel": {"resourceClaimTemplate": {"name": "cd-channel"}}, "numNodes": 1}
    updated = (await client.replace(ComputeDomain.from_dict(relabelled))).to_dict()
    assert updated["metadata"]["labels"] == {"a": "b"}
    assert updated["spec"]["channel"]["allocationMode"] == "Single"


async def test_status_only_through_the_subresource_with_defaults(client: AsyncClient) -> None:
    created = await create(client, domain())
    with_status = {**created, "status": {"status": "Ready"}}
    after_update = (await client.replace(ComputeDomain.from_dict(with_status))).to_dict()
    assert "status" not in after_update
    written = {
        **after_update,
        "spec": {"channel": {"resourceClaimTemplate": {"name": "ignored"}}},
        "status": {"nodes": [{"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "", "index": -1}]},
    }
    status = (await client.replace(ComputeDomain.Status.from_dict(written))).to_dict()
    assert status["spec"] == created["spec"], "spec is ignored on /status"
    assert status["status"] == {
        "status": "NotReady",
        "nodes": [{"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "", "index": -1, "status": "NotReady"}],
    }


async def test_status_nodes_are_validated_and_keyed_by_name(client: AsyncClient) -> None:
    created = await create(client, domain())
    node = {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0, "status": "Ready"}
    for nodes, message in (
        ([node, {**node, "index": 1}], 'status.nodes[1]: Duplicate value: {"name": "n1"}'),
        ([{"name": "n1", "cliqueID": ""}], "status.nodes[0].ipAddress: Required value"),
        ([{**node, "status": "Failed"}], 'status.nodes[0].status: Unsupported value: "Failed"'),
    ):
        with pytest.raises(ApiError) as info:
            await client.replace(
                ComputeDomain.Status.from_dict({**created, "status": {"status": "Ready", "nodes": nodes}})
            )
        assert info.value.status.code == 422
        assert message in str(info.value.status.message)


async def test_cliques_list_daemons_by_node_name(client: AsyncClient) -> None:
    daemon = {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "cluster.1", "index": 0}
    created = await create(client, clique([daemon]))
    assert created["daemons"] == [{**daemon, "status": "NotReady"}]
    assert 'daemons[1]: Duplicate value: {"nodeName": "n1"}' in await refused(client, clique([daemon, daemon]))
    assert "daemons[0].cliqueID: Required value" in await refused(
        client, clique([{"nodeName": "n2", "ipAddress": "10.0.0.2"}])
    )


async def test_discovery_lists_the_nvidia_group(server: FakeApiServer) -> None:
    async with httpx2.AsyncClient(base_url=server.url) as http:
        groups = (await http.get("/apis")).json()["groups"]
        assert [g["name"] for g in groups] == ["resource.k8s.io", "resource.nvidia.com"]
        group = (await http.get("/apis/resource.nvidia.com")).json()
        assert group["preferredVersion"]["groupVersion"] == "resource.nvidia.com/v1beta1"
        resources = (await http.get("/apis/resource.nvidia.com/v1beta1")).json()["resources"]
        assert [r["name"] for r in resources] == ["computedomaincliques", "computedomains", "computedomains/status"]
        core = (await http.get("/api/v1")).json()["resources"]
        assert "events" in [r["name"] for r in core]


async def test_without_the_crds_the_group_is_not_served() -> None:
    with FakeApiServer("1.36") as plain:
        async with httpx2.AsyncClient(base_url=plain.url) as http:
            groups = (await http.get("/apis")).json()["groups"]
            assert [g["name"] for g in groups] == ["resource.k8s.io"]
            assert (await http.get("/apis/resource.nvidia.com")).status_code == 404


async def test_an_object_stored_behind_the_apis_back_is_defaulted_as_one_written_through_it() -> None:
    """A real API server defaults what it reads from storage; so a domain the test stores directly can be
    updated (finalizer added) without its missing defaults reading as a spec change."""
    with FakeApiServer("1.36", nvidia_crds=True) as server:
        stored = server.create_direct(
            {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomain",
                "metadata": {"name": "cd", "namespace": "default"},
                "spec": {"channel": {"resourceClaimTemplate": {"name": "t"}}},
            }
        )
        assert stored["spec"] == {
            "numNodes": 0,
            "channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "Single"},
        }
        client = server.client()
        body = (await client.get(ComputeDomain, "cd", namespace="default")).to_dict()  # type: ignore[no-untyped-call]
        body["metadata"]["finalizers"] = ["resource.nvidia.com/computeDomain"]
        await client.replace(ComputeDomain.from_dict(body))
        after = server.get_object("computedomains", "cd", "default")
        assert after is not None and after["metadata"]["finalizers"] == ["resource.nvidia.com/computeDomain"]
        await client.close()
