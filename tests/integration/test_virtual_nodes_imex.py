"""``fakegpu virtual-nodes --watch`` on a virtual NVL72 fleet plays the nodes' IMEX daemons: a 4-node
ComputeDomain turns Ready once its pods' channel claims are allocated on four nodes of one clique, NotReady
when one of them gets a fabric fault, Ready again when it recovers.

Follows kubernetes-sigs/dra-driver-nvidia-gpu at commit 0807eed: ``cmd/compute-domain-kubelet-plugin``
(``device_state.go``: a channel claim labels the node ``resource.nvidia.com/computeDomain=<domain UID>``),
``cmd/compute-domain-daemon`` (``cdclique.go``: the daemon's entry in the ComputeDomainClique
``<domain UID>.<clique>``, Ready while ``main.go`` ``check`` passes) and ``cmd/compute-domain-controller``
(``cdstatus.go``, ``computedomain.go`` ``calculateGlobalStatus``: Ready once ``numNodes`` entries are Ready),
with fakegpu's ComputeDomain controller running against the tests' API server. Nothing schedules here: the
test writes each claim's allocation and ``reservedFor`` and binds its pod as the scheduler would (directly,
with ``tests.claim_builders.channel_claim``; no allocator runs)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from fakegpu.cli.virtual_nodes_command import run_virtual_nodes
from fakegpu.dra.compute_domain.controller import ComputeDomainController
from fakegpu.dra.compute_domain.resources import ComputeDomain
from fakegpu.sharing.fault_record import FAULTS_ANNOTATION, encode_faults
from fakegpu.sharing.gpu_faults import parse_fault_text
from fakegpu.virtual_nodes.imex_daemons import ImexDaemons
from fakegpu.virtual_nodes.watcher import Watcher
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.apiserver.serving import serving
from tests.claim_builders import channel_claim
from tests.eventually import eventually
from tests.integration.virtual_nodes_harness import parse

DRIVER_NS = "fakegpu"
NS = "team"
RACK = "fakegpu.io/topology-rack"
LABEL = "resource.nvidia.com/computeDomain"
CLIQUE_WRITES = ("create", "update", "patch", "delete")
Obj = dict[str, Any]


@dataclass
class Fleet:
    server: FakeApiServer
    client: AsyncClient
    out: io.StringIO
    imex: ImexDaemons

    def rack(self, rack: str) -> list[str]:
        return sorted(
            n["metadata"]["name"] for n in self.server.objects("nodes") if n["metadata"]["labels"].get(RACK) == rack
        )

    def domain(self) -> Obj:
        found = self.server.get_object("computedomains", "train", NS)
        assert found is not None
        return found

    def status(self) -> str | None:
        return (self.domain().get("status") or {}).get("status")

    def entries(self) -> dict[str, str]:
        """Node -> status of every daemon entry in the domain's cliques."""
        out: dict[str, str] = {}
        for clique in self.server.objects("computedomaincliques", DRIVER_NS):
            out.update({d["nodeName"]: d["status"] for d in clique.get("daemons") or []})
        return out

    def clique_writes(self) -> int:
        return sum(self.server.count(verb, "computedomaincliques") for verb in CLIQUE_WRITES)

    async def set_faults(self, node: str, text: str | None) -> None:
        """Write the node's fault annotation as ``fakegpu virtual-nodes --fault`` records it (None: recovered)."""
        value = None if text is None else encode_faults({0: (parse_fault_text(text, "test"),)})
        patch = {"metadata": {"annotations": {FAULTS_ANNOTATION: value}}}
        await self.client.patch(Node, node, patch, patch_type=PatchType.MERGE)

    async def seen(self, node: str, faulted: bool) -> None:
        """Wait until the IMEX daemons have read the node's annotation change."""

        def read() -> bool:
            seen = self.imex.seen.get(node)
            return seen is not None and (seen.not_ready is not None) == faulted

        await eventually(read, f"the IMEX daemons to read the faults of {node}")


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with serving(nvidia_crds=True) as api:
        yield api
    assert api.rejections == [], "something sent an object the API server rejected"


@pytest.fixture
async def fleet(server: FakeApiServer) -> AsyncIterator[Fleet]:
    controller_client = server.client()
    controller = ComputeDomainController(controller_client, DRIVER_NS, status_interval=0.05)
    await controller.start()
    client = server.client()
    stop = asyncio.Event()
    out = io.StringIO()
    args = parse("--gpus", "4xgb200", "--racks", "2", "--nodes-per-rack", "4", "--gpu-mode", "dra", "--watch")
    watchers: list[Watcher] = []
    task = asyncio.create_task(
        run_virtual_nodes(args, client=client, stop=stop, out=out, err=out, retry_pause=0.01, watching=watchers.append)
    )
    await eventually(lambda: bool(watchers) or task.done(), "the watch to start")
    assert not task.done(), out.getvalue()
    imex = watchers[0].imex
    assert imex is not None, "a fleet of NVL72 racks in the dra mode plays its IMEX daemons"
    try:
        yield Fleet(server, client, out, imex)
    finally:
        stop.set()
        code = await asyncio.wait_for(task, 5)
        await controller.stop()
        await client.close()
        await controller_client.close()
    assert code == 0, out.getvalue()


async def run_workers(fleet: Fleet, uid: str, nodes: list[str]) -> None:
    """Four workers of the domain, as the scheduler leaves them: each pod's channel claim allocated
    ``channel-0`` on its node and reserved for the pod, then the pod bound to that node."""
    for i, node in enumerate(nodes):
        pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"worker-{i}", "namespace": NS},
            "spec": {
                "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "channel"}]}}],
                "resourceClaims": [{"name": "channel", "resourceClaimName": f"worker-{i}-channel"}],
            },
        }
        stored = fleet.server.create_direct(pod)
        claim = channel_claim(f"worker-{i}-channel", node, uid, namespace=NS)
        claim["status"]["reservedFor"] = [{"resource": "pods", "name": f"worker-{i}", "uid": stored["metadata"]["uid"]}]
        fleet.server.create_direct(claim)
        stored["spec"]["nodeName"] = node
        fleet.server.update_direct(stored)


async def create_domain(client: AsyncClient, num_nodes: int) -> str:
    body = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "train", "namespace": NS},
        "spec": {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": "train-channel"}}},
    }
    created = await client.create(ComputeDomain.from_dict(body))
    return str(created.metadata.uid)


async def test_a_domain_on_one_rack_turns_ready_goes_not_ready_on_a_fabric_fault_and_back(fleet):
    """The ComputeDomain of four workers on rack 0 is Ready with one Ready entry per node in the clique
    ``<domain UID>.<clique>`` and the nodes labelled; a fabric fault on one node takes its entry and the
    domain NotReady; clearing it (the fabric re-registers) brings both back."""
    uid = await create_domain(fleet.client, 4)
    rack0 = fleet.rack("rack-0")
    assert len(rack0) == 4
    await eventually(lambda: fleet.status() == "NotReady", "the controller's first status")
    await run_workers(fleet, uid, rack0)

    await eventually(lambda: fleet.status() == "Ready", "the domain Ready", detail=fleet.domain)
    assert fleet.entries() == dict.fromkeys(rack0, "Ready")
    (clique,) = fleet.server.objects("computedomaincliques", DRIVER_NS)
    node0 = fleet.server.get_object("nodes", rack0[0])
    assert node0 is not None
    assert clique["metadata"]["name"] == f"{uid}.{node0['metadata']['labels']['nvidia.com/gpu.clique']}"
    assert sorted(d["index"] for d in clique["daemons"]) == [0, 1, 2, 3]
    for name in rack0:
        node = fleet.server.get_object("nodes", name)
        assert node is not None and node["metadata"]["labels"][LABEL] == uid
    assert [d["name"] for d in fleet.domain()["status"]["nodes"]] == sorted(rack0)

    reads, writes = fleet.server.count("get", "computedomaincliques"), fleet.clique_writes()
    await fleet.set_faults(rack0[2], "fabric")
    await eventually(lambda: fleet.status() == "NotReady", "the domain NotReady after the fabric fault")
    assert fleet.entries() == {**dict.fromkeys(rack0, "Ready"), rack0[2]: "NotReady"}
    assert fleet.server.count("get", "computedomaincliques") - reads == 1
    assert fleet.clique_writes() - writes == 1, "one read and one patch of the clique per change"
    assert f"IMEX daemon on node {rack0[2]}: NotReady (GPU 0: NVLink fabric registration failed" in (
        fleet.out.getvalue()
    )

    await fleet.set_faults(rack0[2], None)
    await eventually(lambda: fleet.status() == "Ready", "the domain Ready after the recovery")
    assert fleet.entries() == dict.fromkeys(rack0, "Ready")
    (again,) = fleet.server.objects("computedomaincliques", DRIVER_NS)
    assert {d["nodeName"]: d["index"] for d in again["daemons"]} == {
        d["nodeName"]: d["index"] for d in clique["daemons"]
    }, "a node keeps its index"


async def test_a_fault_on_a_node_outside_the_domain_writes_nothing(fleet):
    uid = await create_domain(fleet.client, 4)
    rack0, rack1 = fleet.rack("rack-0"), fleet.rack("rack-1")
    await run_workers(fleet, uid, rack0)
    await eventually(lambda: fleet.status() == "Ready", "the domain Ready", detail=fleet.domain)

    def labelled() -> bool:
        nodes = [fleet.server.get_object("nodes", name) for name in rack0[:4]]
        return all(n is not None and LABEL in n["metadata"]["labels"] for n in nodes)

    # The label patches race the clique write: count patches once all four are in.
    await eventually(labelled, "the domain's four nodes labelled")
    writes, node_patches = fleet.clique_writes(), fleet.server.count("patch", "nodes")

    await fleet.set_faults(rack1[0], "gpu-lost")
    await fleet.seen(rack1[0], faulted=True)
    # The watch has read the fault; a pass over what it left (the loop's may still be on its way) writes
    # whatever the fault warrants before the counts are read.
    await fleet.imex.reconcile()

    assert fleet.clique_writes() == writes
    assert fleet.server.count("patch", "nodes") == node_patches + 1  # the test's own annotation patch
    assert fleet.status() == "Ready"
    assert rack1[0] not in fleet.entries()


async def test_a_deleted_pod_takes_its_node_out_of_the_domain(fleet):
    """The kubelet unprepares a deleted pod's claim: the plugin removes the node label and the daemon its
    entry (NVIDIA's ``RemoveNodeLabel``); the domain, one node short, is NotReady."""
    uid = await create_domain(fleet.client, 4)
    rack0 = fleet.rack("rack-0")
    await run_workers(fleet, uid, rack0)
    await eventually(lambda: fleet.status() == "Ready", "the domain Ready", detail=fleet.domain)

    fleet.server.delete_direct("pods", "worker-3", namespace=NS)
    await eventually(lambda: rack0[3] not in fleet.entries(), "the entry of the pod's node removed")
    await eventually(lambda: fleet.status() == "NotReady", "the domain NotReady")
    node = fleet.server.get_object("nodes", rack0[3])
    assert node is not None and LABEL not in node["metadata"]["labels"]


async def test_with_compute_domain_cliques_off_no_daemon_is_played(server):
    """With the gate off NVIDIA's daemons write the domain's ``status.nodes`` themselves
    (``cmd/compute-domain-daemon/cdstatus.go`` at commit 3fe9487), a path the virtual nodes do not play: it
    says so once, and follows nothing."""
    client = server.client()
    stop = asyncio.Event()
    out = io.StringIO()
    args = parse(
        "--gpus", "4xgb200", "--racks", "1", "--nodes-per-rack", "2", "--gpu-mode", "dra", "--watch",
        "--feature-gates", "ComputeDomainCliques=false",
    )  # fmt: skip
    watchers: list[Watcher] = []
    task = asyncio.create_task(
        run_virtual_nodes(args, client=client, stop=stop, out=out, err=out, retry_pause=0.01, watching=watchers.append)
    )
    try:
        await eventually(lambda: bool(watchers) or task.done(), "the watch to start")
        assert watchers and watchers[0].imex is None, out.getvalue()
        assert "ComputeDomainCliques is off: the virtual nodes do not play their IMEX daemons" in out.getvalue()
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 5) == 0, out.getvalue()
        await client.close()
    assert server.count("list", "pods") == server.count("list", "resourceclaims") == 0


async def test_a_failing_or_conflicting_write_is_tried_again(fleet):
    """A clique write the API server refuses past the client's retries is tried again after a pause (NVIDIA's
    daemon retries through its work queue); one that conflicts with another writer reads the clique again."""
    uid = await create_domain(fleet.client, 4)
    rack0 = fleet.rack("rack-0")
    await run_workers(fleet, uid, rack0)
    await eventually(lambda: fleet.status() == "Ready", "the domain Ready", detail=fleet.domain)

    fleet.server.fail_next("patch", "computedomaincliques", 503, times=4)
    await fleet.set_faults(rack0[1], "fabric status=ERROR_TIMEOUT")
    await eventually(lambda: fleet.status() == "NotReady", "the domain NotReady despite the failed writes")
    assert "warning: IMEX daemons: patching ComputeDomainClique" in fleet.out.getvalue()

    fleet.server.fail_next("patch", "computedomaincliques", 409)
    await fleet.set_faults(rack0[1], None)
    await eventually(lambda: fleet.status() == "Ready", "the domain Ready after the conflict")
    assert fleet.entries() == dict.fromkeys(rack0, "Ready")
