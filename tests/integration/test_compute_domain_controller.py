"""The compute-domain controller against the fake API server with NVIDIA's CRDs: what NVIDIA's controller does
for a ComputeDomain (kubernetes-sigs/dra-driver-nvidia-gpu cmd/compute-domain-controller/computedomain.go
``onAddOrUpdate``, cdstatus.go; driver 25.12, gates IMEXDaemonsWithDNSNames and ComputeDomainCliques on),
minus the IMEX DaemonSet, which fakegpu's node plugins stand in for.

The fake server checks every template the controller writes with kubernetes-validate (the 1.36 schema) and
every ComputeDomain write with the CRD's own schema, so ``server.rejections == []`` means all were valid."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceClaimTemplate

from fakegpu.dra.compute_domain.controller import ComputeDomainController
from fakegpu.dra.compute_domain.resources import ComputeDomain, ComputeDomainClique
from tests.apiserver import FakeApiServer
from tests.eventually import eventually

DRIVER_NS = "fakegpu"
NS = "team"
INTERVAL = 0.05
FINALIZER = "resource.nvidia.com/computeDomain"
LABEL = "resource.nvidia.com/computeDomain"
Obj = dict[str, Any]


@pytest.fixture
def server() -> Any:
    with FakeApiServer("1.36", nvidia_crds=True) as srv:
        yield srv
        assert srv.errors == []


@pytest.fixture
async def client(server: FakeApiServer) -> AsyncIterator[AsyncClient]:
    kube = server.client()
    yield kube
    await kube.close()


@contextlib.asynccontextmanager
async def running(server: FakeApiServer) -> AsyncIterator[ComputeDomainController]:
    """A controller with its own client, in-process, stopped (and its client closed) on the way out."""
    kube = server.client()
    controller = ComputeDomainController(kube, DRIVER_NS, status_interval=INTERVAL)
    await controller.start()
    try:
        yield controller
    finally:
        await controller.stop()
        await kube.close()


@pytest.fixture
async def controller(server: FakeApiServer) -> AsyncIterator[ComputeDomainController]:
    async with running(server) as ctl:
        yield ctl


async def create_domain(client: AsyncClient, name: str = "cd", **spec: Any) -> Obj:
    body = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}, **spec},
    }
    created: Obj = (await client.create(ComputeDomain.from_dict(body))).to_dict()
    return created


def stored_domain(server: FakeApiServer, name: str = "cd") -> Obj | None:
    return server.get_object("computedomains", name, NS)


def status_of(server: FakeApiServer, name: str = "cd") -> str | None:
    domain = stored_domain(server, name)
    return None if domain is None else (domain.get("status") or {}).get("status")


def events(server: FakeApiServer, reason: str) -> list[Obj]:
    return [e for e in server.objects("events", NS) if e["reason"] == reason]


def daemon(node: str, status: str, index: int = 0, clique: str = "cluster-a.1") -> Obj:
    return {"nodeName": node, "ipAddress": f"10.0.0.{index + 1}", "cliqueID": clique, "index": index, "status": status}


async def write_clique(client: AsyncClient, server: FakeApiServer, uid: str, daemons: list[Obj]) -> None:
    """As a node plugin (standing in for an IMEX daemon) writes its clique: ``<uid>.<clique>`` in the driver's
    namespace, labelled with the domain and the clique."""
    name = f"{uid}.cluster-a.1"
    body: Obj = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainClique",
        "metadata": {
            "name": name,
            "namespace": DRIVER_NS,
            "labels": {LABEL: uid, "resource.nvidia.com/computeDomain.cliqueID": "cluster-a.1"},
        },
        "daemons": daemons,
    }
    existing = server.get_object("computedomaincliques", name, DRIVER_NS)
    if existing is None:
        await client.create(ComputeDomainClique.from_dict(body))
    else:
        body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        await client.replace(ComputeDomainClique.from_dict(body))


def expected_templates(uid: str) -> tuple[Obj, Obj]:
    """What kubernetes-sigs/dra-driver-nvidia-gpu templates/compute-domain-workload-claim-template.tmpl.yaml and
    compute-domain-daemon-resource-claim-template.tmpl.yaml render (resource.k8s.io/v1)."""

    def spec(request: str, device_class: str, parameters: Obj) -> Obj:
        return {
            "spec": {
                "devices": {
                    "requests": [{"name": request, "exactly": {"deviceClassName": device_class}}],
                    "config": [
                        {
                            "requests": [request],
                            "opaque": {"driver": "compute-domain.nvidia.com", "parameters": parameters},
                        }
                    ],
                }
            }
        }

    workload = spec(
        "channel",
        "compute-domain-default-channel.nvidia.com",
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainChannelConfig",
            "domainID": uid,
            "allocationMode": "Single",
        },
    )
    daemon_spec = spec(
        "daemon",
        "compute-domain-daemon.nvidia.com",
        {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainDaemonConfig", "domainID": uid},
    )
    return workload, daemon_spec


async def test_a_new_domain_gets_finalizer_templates_and_ready_status(
    server: FakeApiServer, client: AsyncClient, controller: ComputeDomainController
) -> None:
    uid = (await create_domain(client))["metadata"]["uid"]
    await eventually(lambda: status_of(server) == "Ready", "ComputeDomain Ready (numNodes 0)", 10)
    domain = stored_domain(server)
    assert domain is not None
    assert domain["metadata"]["finalizers"] == [FINALIZER]
    assert domain["status"] == {"status": "Ready"}
    workload_spec, daemon_spec = expected_templates(uid)
    workload = server.get_object("resourceclaimtemplates", "cd-channel", NS)
    assert workload is not None
    assert workload["apiVersion"] == "resource.k8s.io/v1"
    assert workload["metadata"]["labels"] == {LABEL: uid, "resource.nvidia.com/computeDomainTarget": "Workload"}
    assert workload["metadata"]["finalizers"] == [FINALIZER]
    assert workload["spec"] == workload_spec
    daemon_template = server.get_object("resourceclaimtemplates", f"computedomain-daemon-{uid}", DRIVER_NS)
    assert daemon_template is not None
    assert daemon_template["metadata"]["labels"] == {LABEL: uid, "resource.nvidia.com/computeDomainTarget": "Daemon"}
    assert daemon_template["metadata"]["finalizers"] == [FINALIZER]
    assert daemon_template["spec"] == daemon_spec
    (ready,) = await eventually(lambda: events(server, "ComputeDomainReady"), "the Ready event (after the status)")
    assert ready["involvedObject"]["uid"] == uid and ready["type"] == "Normal"
    assert server.rejections == []


async def test_status_waits_for_num_nodes_ready_daemons(
    server: FakeApiServer, client: AsyncClient, controller: ComputeDomainController
) -> None:
    uid = (await create_domain(client, numNodes=2))["metadata"]["uid"]
    await eventually(lambda: status_of(server) == "NotReady", "ComputeDomain NotReady (0 of 2 nodes)", 10)
    await write_clique(client, server, uid, [daemon("n1", "Ready", 0)])
    await eventually(
        lambda: len((stored_domain(server) or {}).get("status", {}).get("nodes", [])) == 1, "n1 in status.nodes", 10
    )
    assert status_of(server) == "NotReady", "one of two nodes is not enough"
    await write_clique(client, server, uid, [daemon("n1", "Ready", 0), daemon("n2", "NotReady", 1)])
    await eventually(
        lambda: len((stored_domain(server) or {}).get("status", {}).get("nodes", [])) == 2, "n2 in status.nodes", 10
    )
    assert status_of(server) == "NotReady", "n2 is not ready yet"
    await write_clique(client, server, uid, [daemon("n1", "Ready", 0), daemon("n2", "Ready", 1)])
    await eventually(lambda: status_of(server) == "Ready", "ComputeDomain Ready with both nodes", 10)
    domain = stored_domain(server)
    assert domain is not None
    assert domain["status"]["nodes"] == [
        {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "cluster-a.1", "index": 0, "status": "Ready"},
        {"name": "n2", "ipAddress": "10.0.0.2", "cliqueID": "cluster-a.1", "index": 1, "status": "Ready"},
    ]
    (ready,) = await eventually(lambda: events(server, "ComputeDomainReady"), "the Ready event (after the status)")
    assert "ready: n1, n2" in ready["message"]
    await write_clique(client, server, uid, [daemon("n1", "Ready", 0), daemon("n2", "NotReady", 1)])
    await eventually(lambda: status_of(server) == "NotReady", "ComputeDomain NotReady again", 10)
    not_ready = await eventually(
        lambda: [e for e in events(server, "ComputeDomainNotReady") if "not ready: n2" in e["message"]],
        "a NotReady event naming n2",
        10,
    )
    assert not_ready[0]["type"] == "Warning"
    assert server.rejections == []


async def test_entries_off_the_fabric_are_kept(
    server: FakeApiServer, client: AsyncClient, controller: ComputeDomainController
) -> None:
    """A node without a clique gets its entry from the node plugin (cliqueID "", index -1); the controller
    keeps it next to the cliques' entries and counts it."""
    await create_domain(client, numNodes=1)
    await eventually(lambda: status_of(server) == "NotReady", "ComputeDomain NotReady", 10)
    domain = stored_domain(server)
    assert domain is not None
    entry = {"name": "cpu-1", "ipAddress": "10.1.0.1", "cliqueID": "", "index": -1, "status": "Ready"}
    await client.replace(ComputeDomain.Status.from_dict({**domain, "status": {"status": "NotReady", "nodes": [entry]}}))
    await eventually(lambda: status_of(server) == "Ready", "Ready with the off-fabric node", 10)
    passes = controller.passes
    await eventually(lambda: controller.passes >= passes + 2, "two more status passes")
    final = stored_domain(server)
    assert final is not None and final["status"]["nodes"] == [entry]


async def test_spec_update_is_refused(
    server: FakeApiServer, client: AsyncClient, controller: ComputeDomainController
) -> None:
    await create_domain(client, numNodes=1)
    await eventually(
        lambda: FINALIZER in (stored_domain(server) or {}).get("metadata", {}).get("finalizers", []), "finalizer", 10
    )

    async def replace_refused() -> ApiError:
        """The refusal of a spec change; a 409 (the controller wrote the status in between) is "not yet"."""
        current = await client.get(ComputeDomain, "cd", namespace=NS)
        changed: Obj = dict(current.to_dict())  # type: ignore[no-untyped-call]
        changed["spec"]["numNodes"] = 3
        with pytest.raises(ApiError) as info:
            await client.replace(ComputeDomain.from_dict(changed))
        assert info.value.status.code != 409, "conflict with the controller's write: read again"
        return info.value

    refused = await eventually(replace_refused, "the spec change refused", 10)
    assert refused.status.code == 422
    assert 'spec: Invalid value: "object": A computeDomain.spec is immutable' in str(refused.status.message)


async def test_deletion_cleans_up_and_removes_the_finalizer(
    server: FakeApiServer, client: AsyncClient, controller: ComputeDomainController
) -> None:
    uid = (await create_domain(client))["metadata"]["uid"]
    await eventually(lambda: status_of(server) == "Ready", "ComputeDomain Ready", 10)
    server.add_node("n1", labels={LABEL: uid, "keep": "me"})
    server.add_node("n2", labels={LABEL: "another-domain"})
    await write_clique(client, server, uid, [daemon("n1", "Ready", 0)])
    await client.delete(ComputeDomain, "cd", namespace=NS)
    await eventually(lambda: stored_domain(server) is None, "ComputeDomain gone (finalizer removed)", 10)
    assert server.objects("resourceclaimtemplates") == []
    assert server.objects("computedomaincliques") == []
    n1 = await client.get(Node, "n1")
    n2 = await client.get(Node, "n2")
    assert n1.metadata is not None and n2.metadata is not None
    assert n1.metadata.labels is not None and n2.metadata.labels is not None
    assert LABEL not in n1.metadata.labels and n1.metadata.labels["keep"] == "me"
    assert n2.metadata.labels[LABEL] == "another-domain", "another domain's node label is left alone"
    assert server.rejections == []


async def test_restart_is_idempotent(server: FakeApiServer, client: AsyncClient) -> None:
    async with running(server):
        await create_domain(client)
        await eventually(lambda: status_of(server) == "Ready", "ComputeDomain Ready", 10)
    assert server.count("create", "resourceclaimtemplates") == 2
    writes = server.count("update", "computedomains")
    gets = server.count("get", "computedomains")
    async with running(server):
        await eventually(lambda: server.count("get", "computedomains") >= gets + 5, "the new controller syncing", 10)
    assert server.count("create", "resourceclaimtemplates") == 2, "no template created twice"
    assert len(server.objects("resourceclaimtemplates")) == 2
    assert server.count("update", "computedomains") == writes, "nothing rewritten"
    assert len(events(server, "ComputeDomainReady")) == 1


async def test_a_taken_template_name_keeps_the_domain_not_ready(
    server: FakeApiServer, client: AsyncClient, controller: ComputeDomainController
) -> None:
    squatter = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "cd-channel", "namespace": NS},
        "spec": {
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}
        },
    }
    await client.create(cast(ResourceClaimTemplate, ResourceClaimTemplate.from_dict(squatter)))
    await create_domain(client)
    warning = await eventually(lambda: events(server, "ResourceClaimTemplateExists"), "a collision event", 10)
    assert "already exists and belongs to no ComputeDomain" in warning[0]["message"]
    await eventually(lambda: status_of(server) == "NotReady", "the domain NotReady while its template name is taken")
    await client.delete(ResourceClaimTemplate, "cd-channel", namespace=NS)
    await eventually(lambda: status_of(server) == "Ready", "Ready once the name is free", 10)
    template = server.get_object("resourceclaimtemplates", "cd-channel", NS)
    assert template is not None and LABEL in template["metadata"]["labels"]
    assert len(events(server, "ResourceClaimTemplateExists")) == 1


async def test_api_failures_are_retried(
    server: FakeApiServer, client: AsyncClient, controller: ComputeDomainController
) -> None:
    server.fail_next("create", "resourceclaimtemplates", 500, times=2)
    server.fail_next("update", "computedomains", 503)
    await create_domain(client)
    await eventually(lambda: status_of(server) == "Ready", "Ready despite failed writes", 15)
    assert len(server.objects("resourceclaimtemplates")) == 2
