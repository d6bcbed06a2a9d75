"""A GPU fault at runtime on a node of a ComputeDomain: the node's IMEX daemon goes NotReady, and the domain with
it; a ``fabric`` fault recovered brings both back to Ready.

Follows kubernetes-sigs/dra-driver-nvidia-gpu: the daemon's readiness is ``compute-domain-daemon check``, i.e.
``nvidia-imex-ctl -q`` answering exactly READY (``cmd/compute-domain-daemon/main.go`` ``check`` @ 0807eed);
the daemon writes its clique entry's status from its pod's readiness (``cdclique.go`` @ 3fe9487) and the
controller the domain's (``cmd/compute-domain-controller``). The compute-domain plugin reads the clique only at
start and every 10 minutes (``computedomain.go`` ``refreshGPUCliqueID`` @ 024a2c1; ``nvlib.go`` ``getCliqueID``
@ 6807cc7), so a fabric error struck at runtime leaves the clique as it was.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu.dra.compute_domain.controller import ComputeDomainController
from fakegpu.dra.compute_domain.fabric_clique import FabricError, FabricGates, node_clique_id
from fakegpu.dra.compute_domain.host_imex import READY, UNAVAILABLE, HostImexDaemon
from fakegpu.dra.daemon import DraDriver
from fakegpu.sharing.gpu_faults import GpuFault
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from tests.apiserver import FakeApiServer
from tests.claim_builders import channel_claim, compute_domain
from tests.dra_kubelet_client import prepare
from tests.eventually import eventually
from tests.integration.compute_domain_drivers import DRIVER_NS, NODE, ComputeDomainDrivers, serve_node, socket_of

CLUSTER = "1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10"
CLIQUE = f"{CLUSTER}.3"
FABRIC_NODE = f"version: v1\nfabric: {{clusterUUID: {CLUSTER}, cliqueID: 3}}\ngpus: [{{model: b200, count: 2}}]\n"


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    yield from serve_node()


@pytest.fixture
async def drivers(root: Path, apiserver: FakeApiServer) -> AsyncIterator[ComputeDomainDrivers]:
    drivers = ComputeDomainDrivers(root, apiserver)
    yield drivers
    await drivers.stop_all()


@pytest.fixture
async def controller(apiserver: FakeApiServer) -> AsyncIterator[ComputeDomainController]:
    client = apiserver.client()
    controller = ComputeDomainController(client, DRIVER_NS, status_interval=0.1)
    await controller.start()
    yield controller
    await controller.stop()
    await client.close()


def domain_status(apiserver: FakeApiServer) -> str | None:
    stored = apiserver.get_object("computedomains", "cd", "default") or {}
    return (stored.get("status") or {}).get("status")


def clique_entry(apiserver: FakeApiServer) -> dict[str, Any]:
    (clique,) = apiserver.objects("computedomaincliques", DRIVER_NS)
    (entry,) = [d for d in clique["daemons"] if d["nodeName"] == NODE]
    return dict(entry)


async def joined_domain(apiserver: FakeApiServer, driver: DraDriver) -> None:
    """A one-node domain with a channel claim prepared on the node: its IMEX daemon joined, the domain Ready."""
    body = compute_domain("cd")
    body["spec"]["numNodes"] = 1
    uid = apiserver.create_direct(body)["metadata"]["uid"]
    claim = apiserver.create_direct(channel_claim("wl", NODE, uid))
    ref = ("default", "wl", claim["metadata"]["uid"])

    async def prepared() -> bool:
        return (await prepare(socket_of(driver), [ref])).claims[ref[2]].error == ""

    await eventually(prepared, "the channel claim prepared once the node's IMEX daemon is Ready")
    await eventually(lambda: domain_status(apiserver) == "Ready", "the domain Ready", 10.0)


async def test_a_fabric_fault_takes_the_domain_not_ready_and_its_recovery_brings_it_back(
    apiserver, drivers, controller
):
    driver = await drivers.start(FABRIC_NODE, start_delay=0.0)
    await joined_domain(apiserver, driver)
    gpu = driver.live.inventory.node.gpus[1]
    driver.live.strike_gpu("1", GpuFault(kind="fabric", status="ERROR_NOT_READY"))
    await eventually(lambda: clique_entry(apiserver)["status"] == "NotReady", "the node's IMEX daemon NotReady")
    await eventually(lambda: domain_status(apiserver) == "NotReady", "the domain NotReady", 10.0)
    assert driver.compute_domains is not None
    assert driver.compute_domains.daemon.status == "NotReady"
    driver.live.recover_gpu(gpu.uuid, "fabric")
    await eventually(lambda: clique_entry(apiserver)["status"] == "Ready", "the IMEX daemon Ready again")
    await eventually(lambda: domain_status(apiserver) == "Ready", "the domain Ready again", 10.0)
    # The clique never changed: the plugin reads it at start and at its 10-minute refresh only.
    assert driver.compute_domains.clique.value == CLIQUE == clique_entry(apiserver)["cliqueID"]


@pytest.mark.parametrize(
    ("kind", "recover"),
    [("off-bus", None), ("gpu-lost", None), ("xid", None), ("thermal", "thermal")],
)
async def test_other_faults_and_the_imex_daemon(apiserver, drivers, controller, kind, recover):
    """Off the bus, lost and a fatal XID take the daemon NotReady for good (NVIDIA's plugins never recover
    them); a thermal excursion never touches it."""
    driver = await drivers.start(FABRIC_NODE, start_delay=0.0)
    await joined_domain(apiserver, driver)
    fault = GpuFault(kind="xid", xid=48) if kind == "xid" else GpuFault.model_validate({"kind": kind})
    driver.live.strike_gpu("0", fault)
    if kind == "thermal":
        assert driver.compute_domains is not None
        await driver.compute_domains.daemon.reconcile()
        assert clique_entry(apiserver)["status"] == "Ready" and domain_status(apiserver) == "Ready"
        return
    await eventually(lambda: domain_status(apiserver) == "NotReady", f"the domain NotReady after {kind}", 10.0)
    driver.live.recover_gpu("0", "reset")
    assert driver.compute_domains is not None
    await driver.compute_domains.daemon.reconcile()
    assert clique_entry(apiserver)["status"] == "NotReady"


async def test_the_clique_refresh_fails_on_a_runtime_fabric_error_and_keeps_the_clique(apiserver, drivers):
    driver = await drivers.start(FABRIC_NODE, start_delay=0.0)
    assert driver.compute_domains is not None
    clique = driver.compute_domains.clique
    driver.live.strike_gpu("0", GpuFault(kind="fabric"))
    gpu = driver.live.inventory.node.gpus[0]
    with pytest.raises(RuntimeError) as refused:
        await clique.refresh()
    assert str(refused.value) == (
        "error getting cliqueID: error getting fabric information from one or more devices: NVLink fabric "
        f"registration error (device 0/{gpu.uuid}): status=ERROR_UNKNOWN, refusing to start"
    )
    assert clique.value == CLIQUE


def test_a_fabric_fault_overrides_the_node_spec_where_the_plugin_reads_the_fabric(root):
    spec = root / "node.yaml"
    spec.write_text(FABRIC_NODE)
    live = LiveInventory(load_inventory(InventoryInputs(node_name=NODE, node_spec=str(spec))))
    node = live.inventory.node
    assert node_clique_id(node) == CLIQUE
    faults = {node.gpus[1].uuid: "ERROR_TIMEOUT"}
    with pytest.raises(FabricError, match=r"device 1/.*status=ERROR_TIMEOUT, refusing to start"):
        node_clique_id(node, FabricGates(), faults)
    # Gate off: go-nvlib's IsFabricAttached is false for that GPU; the other GPU still names the clique.
    assert node_clique_id(node, FabricGates(crash_on_errors=False), faults) == CLIQUE
    both = dict.fromkeys((g.uuid for g in node.gpus), "ERROR_TIMEOUT")
    assert node_clique_id(node, FabricGates(crash_on_errors=False), both) == ""


async def test_the_host_managed_daemon_answers_unavailable_while_a_gpu_is_off_the_fabric(root):
    spec = root / "node.yaml"
    spec.write_text(FABRIC_NODE)
    live = LiveInventory(load_inventory(InventoryInputs(node_name=NODE, node_spec=str(spec))))
    host = HostImexDaemon(root / "imex.sock", live)
    assert host.status() == READY
    live.strike_gpu("0", GpuFault(kind="fabric"))
    assert host.status() == UNAVAILABLE
    live.recover_gpu("0", "fabric")
    assert host.status() == READY
