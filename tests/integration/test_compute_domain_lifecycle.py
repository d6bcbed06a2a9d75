"""A ComputeDomain from creation to every pod prepared, across four emulated GB200 nodes of one NVLink clique:
the in-process API server (with NVIDIA's CRDs), the compute-domain controller, on each node ``fakegpu dra
--compute-domains`` (GPU plugin, compute-domain plugin and its emulated IMEX daemon) and a kubelet emulator that
reads each pod's claims from the API server and prepares them as the kubelet does.

Only the scheduler and the resource-claim controller are played by the test: it writes each worker's claims
already allocated (4 GPUs and ``channel-0`` of its node), with the channel request and config copied from the
template the controller created, as the resource-claim controller copies it. The flow is NVIDIA's
(kubernetes-sigs/dra-driver-nvidia-gpu at commit 0807eed): a worker's channel prepare labels
its node for the domain and fails, retryably, until the node's IMEX daemon is Ready; the kubelet retries; the
domain turns Ready when all four nodes have joined. An XID on one node's GPU takes that node's daemon and the
domain to NotReady.

The transcript is the README's "Rack scale" walkthrough: the test compares it with the README's block.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from fakegpu.dra.compute_domain.controller import ComputeDomainController
from fakegpu.dra.compute_domain.kubelet_plugin import ComputeDomainSettings
from fakegpu.dra.compute_domain.resources import ComputeDomain
from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.kubelet.dra_manager import Backoff
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.kubelet.pod_claims import PodClaim
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from tests.apiserver import FakeApiServer
from tests.claim_builders import COMPUTE_DOMAIN_DRIVER, allocated_claim
from tests.eventually import eventually

README = Path(__file__).resolve().parents[2] / "README.md"
DRIVER_NS = "fakegpu"
NS = "default"
CLUSTER = "6a0b0570-d223-511b-b780-5222f79fbb84"
CLIQUE = f"{CLUSTER}.1"
NODES = [f"gb200-rack0-{i}" for i in range(4)]
GPU_DRIVER = "gpu.nvidia.com"
FAST = Backoff(initial=0.05, cap=0.3)
NODE_SPEC = f"""
version: v1
machine: GB200-NVL
fabric: {{clusterUUID: {CLUSTER}, cliqueID: 1}}
gpus: [{{model: gb200, count: 4}}]
"""


class Node:
    """One emulated GB200 node: its DRA driver (both plugins) and its kubelet."""

    def __init__(self, driver: DraDriver, kubelet: KubeletEmulator, live: LiveInventory) -> None:
        self.driver, self.kubelet, self.live = driver, kubelet, live


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer("1.36", nvidia_crds=True) as api:
        for name in NODES:
            api.add_node(name, {"nvidia.com/gpu.clique": CLIQUE})
        yield api
        assert api.errors == []
        assert api.rejections == [], "something wrote an object the API server's schemas refuse"


@pytest.fixture
async def controller(server: FakeApiServer) -> AsyncIterator[ComputeDomainController]:
    client = server.client()
    controller = ComputeDomainController(client, DRIVER_NS, status_interval=0.1)
    await controller.start()
    yield controller
    await controller.stop()
    await client.close()


@pytest.fixture
async def nodes(server: FakeApiServer, root: Path) -> AsyncIterator[list[Node]]:
    started: list[Node] = []
    try:
        for name in NODES:
            base = root / name
            base.mkdir()
            spec = base / "node.yaml"
            spec.write_text(NODE_SPEC)
            live = LiveInventory(load_inventory(InventoryInputs(node_name=name, node_spec=str(spec))))
            settings = DraSettings(
                cdi_root=base / "cdi",
                compute_domains=ComputeDomainSettings(namespace=DRIVER_NS, start_delay=0.2),
            )
            driver = DraDriver(live, KubeletPaths(base / "kubelet"), settings, server.client)
            await driver.start()
            kubelet = KubeletEmulator(base / "kubelet", prepare_backoff=FAST, api_client=server.client())
            await kubelet.start()
            started.append(Node(driver, kubelet, live))
            await driver.wait_published()
            await eventually(partial(registered, kubelet), f"both DRA plugins of {name} to register with its kubelet")
        yield started
    finally:
        for node in started:
            await node.kubelet.stop()
            await node.driver.stop()


def registered(kubelet: KubeletEmulator) -> bool:
    return all(d in kubelet.dra_plugins.plugins for d in (GPU_DRIVER, COMPUTE_DOMAIN_DRIVER))


def domain(server: FakeApiServer) -> dict[str, Any]:
    stored = server.get_object("computedomains", "train-16gpu", NS)
    assert stored is not None
    return stored


def status_line(server: FakeApiServer) -> str:
    status = domain(server).get("status") or {}
    nodes = status.get("nodes") or []
    ready = sum(1 for n in nodes if n.get("status") == "Ready")
    return f"computedomain/train-16gpu: {status.get('status', '-')}, {ready}/{len(nodes)} node(s) Ready (numNodes 4)"


def worker_claims(server: FakeApiServer, worker: int, node: str) -> list[PodClaim]:
    """What the resource-claim controller and the scheduler leave for worker ``worker`` on ``node``."""
    template = server.get_object("resourceclaimtemplates", "train-16gpu-imex", NS)
    assert template is not None
    request = template["spec"]["spec"]["devices"]["requests"][0]
    config = template["spec"]["spec"]["devices"]["config"]
    pod = {"resource": "pods", "name": f"train-16gpu-{worker}", "uid": f"pod-{worker}"}
    gpus = allocated_claim(f"train-16gpu-{worker}-gpus", node, [f"gpu-{i}" for i in range(4)], reserved_for=[pod])
    channel = allocated_claim(
        f"train-16gpu-{worker}-imex",
        node,
        ["channel-0"],
        driver=COMPUTE_DOMAIN_DRIVER,
        config=[{"source": "FromClaim", **c} for c in config],
        reserved_for=[pod],
        request=request["name"],
        device_class=request["exactly"]["deviceClassName"],
    )
    return [
        PodClaim(NS, obj["metadata"]["name"], server.create_direct(obj)["metadata"]["uid"], ())
        for obj in (gpus, channel)
    ]


def readme_block() -> str:
    text = README.read_text()
    start = text.index("<!-- rack-scale walkthrough -->")
    block = text[start:].split("```", 2)[1]
    return block.split("\n", 1)[1]  # after the fence's language line


async def test_a_compute_domain_from_creation_to_every_pod_prepared_and_an_xid(server, controller, nodes):
    out: list[str] = []
    client = server.client()
    await client.create(
        ComputeDomain.from_dict(
            {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomain",
                "metadata": {"name": "train-16gpu", "namespace": NS},
                "spec": {"numNodes": 4, "channel": {"resourceClaimTemplate": {"name": "train-16gpu-imex"}}},
            }
        )
    )
    await client.close()
    uid = domain(server)["metadata"]["uid"]
    await eventually(
        lambda: server.get_object("resourceclaimtemplates", "train-16gpu-imex", NS) is not None,
        "the controller to create the domain's channel claim template",
    )
    await eventually(lambda: (domain(server).get("status") or {}).get("status") == "NotReady", "status NotReady")
    template = server.get_object("resourceclaimtemplates", "train-16gpu-imex", NS)
    assert template is not None
    assert template["metadata"]["labels"]["resource.nvidia.com/computeDomain"] == uid
    params = template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["kind"] == "ComputeDomainChannelConfig" and params["domainID"] == uid
    out.append("$ kubectl apply -f deploy/examples/rack-scale/gang-job.yaml   # the ComputeDomain part")
    out.append("resourceclaimtemplate/train-16gpu-imex created by the controller (ComputeDomainChannelConfig)")
    out.append(status_line(server))

    pods = []
    for worker, (name, node) in enumerate(zip(NODES, nodes, strict=True)):
        claims = worker_claims(server, worker, name)
        pods.append(
            await node.kubelet.run_pod(f"pod-{worker}", {"worker": {}}, name=f"train-16gpu-{worker}", claims=claims)
        )
        if worker == 0:  # as run_pod answered: the kubelet retries in the background while the others start
            phase, reason, error = pods[0].phase, pods[0].reason, pods[0].prepare_error
    assert (phase, reason) == ("Pending", "ContainerCreating"), pods[0]
    out.append(f"pod/train-16gpu-0 on {NODES[0]}: {phase} ({reason})")
    out.append(f"  FailedPrepareDynamicResources: ... error asserting {error.split('error asserting ')[-1]}")

    async def all_running() -> None:
        states = [n.kubelet.pods[f"pod-{i}"].phase for i, n in enumerate(nodes)]
        assert states == ["Running"] * 4, states

    await eventually(all_running, "every worker's claims prepared once its node's IMEX daemon is Ready", 20.0)
    await eventually(lambda: (domain(server).get("status") or {}).get("status") == "Ready", "the domain Ready", 10.0)
    for i, node in enumerate(nodes):
        pod = node.kubelet.pods[f"pod-{i}"]
        devices = sorted(d for ids in pod.cdi_devices.values() for d in ids)
        channel = [d for d in devices if d.startswith("k8s.compute-domain.nvidia.com/claim=")]
        gpus = [d for d in devices if d.startswith("k8s.gpu.nvidia.com/claim=")]
        assert len(channel) == 1 and channel[0].endswith("-channel-0") and len(gpus) == 4, devices
        assert (server.get_object("nodes", NODES[i]) or {})["metadata"]["labels"][
            "resource.nvidia.com/computeDomain"
        ] == uid
    first = nodes[0].kubelet.pods["pod-0"]
    out.append(f"pod/train-16gpu-0 on {NODES[0]}: Running after {first.prepare_attempts} prepare attempt(s)")
    out.append(
        "  CDI devices: 4 x k8s.gpu.nvidia.com/claim=<uid>-gpu-N, k8s.compute-domain.nvidia.com/claim=<uid>-channel-0"
    )
    out.append(status_line(server))
    for entry in sorted(domain(server)["status"]["nodes"], key=lambda e: e["index"]):
        out.append(f"  {entry['name']}  index {entry['index']}  clique {entry['cliqueID']}  {entry['status']}")

    nodes[2].live.inject_xid("0", 79)
    out.append(f"$ fakegpu ctl --dra xid 0 79   # on {NODES[2]}: its GPU 0 falls off the bus")
    await eventually(
        lambda: (domain(server).get("status") or {}).get("status") == "NotReady",
        "an XID on a node of the domain to take the domain NotReady",
        10.0,
    )
    out.append(status_line(server))
    entry = next(e for e in domain(server)["status"]["nodes"] if e["name"] == NODES[2])
    assert entry["status"] == "NotReady"
    out.append(f"  {entry['name']}  index {entry['index']}  clique {entry['cliqueID']}  {entry['status']}")

    def latest_event() -> dict[str, Any]:
        """The controller records each Ready / NotReady transition as an Event, just after the status."""
        events = [e for e in server.objects("events") if e.get("involvedObject", {}).get("uid") == uid]
        assert events, "no event about the domain yet"
        last: dict[str, Any] = max(events, key=lambda e: int(e["metadata"]["resourceVersion"]))
        assert f"not ready: {NODES[2]}" in last["message"], last["message"]
        return last

    last = await eventually(latest_event, "the NotReady event naming the node")
    out.append(f"event: {last['type']} {last['reason']}: {last['message']}")

    transcript = "\n".join(out) + "\n"
    print(transcript)
    normalised = re.sub(r"after \d+ prepare attempt\(s\)", "after N prepare attempt(s)", transcript)
    assert normalised == readme_block()
