"""The cluster scenarios of the catalog, run against the tests' API server with stand-ins for what a real cluster
has (``tests/integration/cluster_standins.py``): each scenario file runs unchanged, as on a real cluster.

Follows what a real Kubernetes v1.36.2 cluster showed for fakegpu's daemons: ``allocatedResourcesStatus``
entries ``claim:<name>`` and ``nvidia.com/gpu`` (kubernetes ``pkg/kubelet/cm/dra/manager.go`` and
``pkg/kubelet/cm/devicemanager/manager.go`` ``UpdateAllocatedResourcesStatus``, v1.36), and NVIDIA's DRA
driver's health taints (kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/device_health.go``
@ 15a116f).
"""

from __future__ import annotations

import io
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from lightkube.resources.core_v1 import Node

from fakegpu.cli.cluster_scenario import ClusterOptions, run_cluster_scenario
from fakegpu.control.server import AdminServer
from fakegpu.dra.admin_ops import dra_ops
from fakegpu.dra.compute_domain.controller import ComputeDomainController
from fakegpu.dra.compute_domain.resources import DRIVER_NAMESPACE
from fakegpu.fakeplugin.admin_ops import device_plugin_ops
from fakegpu.kubelet.pod_status import PodStatusWriter
from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.testing.fake_node import FakeNode
from fakegpu.testing.manifest_apply import ManifestApplier
from fakegpu.testing.scenario.cluster_model import ClusterScenario, load_cluster_scenario, parse_cluster_scenario
from fakegpu.testing.scenario.output import EXIT_FAIL, EXIT_PASS
from tests.apiserver import FakeApiServer, serving
from tests.integration.cluster_standins import NodeStatusWriter, PodPlacer, VirtualPodPlacer
from tests.integration.dra_kubelet_side import kubelet_side
from tests.reliability.raw_calls import start_dra_driver

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
NODE = "gpu-node-1"


@dataclass
class Ran:
    status: int
    out: str


async def run(scenario: ClusterScenario, server: FakeApiServer, **options: object) -> Ran:
    out = io.StringIO()
    status = await run_cluster_scenario(scenario, server.client, out, ClusterOptions(**options))  # type: ignore[arg-type]
    return Ran(status, out.getvalue())


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE, nvidia_crds=True) as server:
        yield server


@dataclass
class DraNode:
    """A node running fakegpu's DRA driver (health gate on, admin socket), with the kubelet emulator in front."""

    admin_socket: Path
    placer: PodPlacer


@pytest.fixture
async def dra_node(apiserver: FakeApiServer, root: Path) -> AsyncIterator[DraNode]:
    scenario = load_cluster_scenario(SCENARIOS / "gpu-lost-under-dra-pod.yaml")
    driver = await start_dra_driver(apiserver, root, node=NODE, gpus="2xh100-80gb")
    admin = AdminServer(root / "dra.sock", dra_ops(driver))
    try:
        await admin.start()
        async with (
            kubelet_side(apiserver, root, NODE) as side,
            PodPlacer(side.applier, scenario.cluster.namespace) as placer,
        ):
            yield DraNode(admin.path, placer)
    finally:
        await admin.stop()
        await driver.stop()


async def test_a_gpu_lost_under_a_running_dra_pod(apiserver: FakeApiServer, dra_node: DraNode):
    """The pod's claim turns Unhealthy in its status and its device is tainted gpu.nvidia.com/gpu-lost
    (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/device_health.go @ 15a116f; KEP-4680 as a
    real Kubernetes v1.36.2 kubelet writes it)."""
    scenario = load_cluster_scenario(SCENARIOS / "gpu-lost-under-dra-pod.yaml")
    ran = await run(scenario, apiserver, admin_socket=str(dra_node.admin_socket))
    assert ran.status == EXIT_PASS, ran.out
    assert dra_node.placer.errors == []
    assert "PASS gpu-lost-under-dra-pod" in ran.out


TIME_SLICING_4 = {
    "version": "v1",
    "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
}
"""The config the scenario's header asks the plugin for (NVIDIA/k8s-device-plugin docs: time-slicing)."""


@pytest.fixture
async def plugin_node(apiserver: FakeApiServer, root: Path) -> AsyncIterator[DraNode]:
    scenario = load_cluster_scenario(SCENARIOS / "ecc-on-time-sliced-gpu.yaml")
    config = root / "time-slicing-4.yaml"
    config.write_text(yaml.safe_dump(TIME_SLICING_4))
    client = apiserver.client()
    inputs = InventoryInputs(node_name=NODE, gpus=("2xh100-80gb",), config_file=str(config))
    node = FakeNode(root / "node", inputs, api_client=client)
    admin = AdminServer(root / "plugin.sock", device_plugin_ops(node.live, node.plugins, node.calls))
    writer = PodStatusWriter(client, node.kubelet)
    try:
        await node.start()
        await admin.start()
        await writer.start()
        applier = ManifestApplier(client, node.kubelet, NODE, writer)
        async with NodeStatusWriter(client, node.kubelet, NODE), PodPlacer(applier, scenario.cluster.namespace) as p:
            yield DraNode(admin.path, p)
    finally:
        await writer.stop()
        await admin.stop()
        await node.stop()
        await client.close()


async def test_b_uncorrectable_ecc_on_one_gpu_of_a_time_sliced_node(apiserver: FakeApiServer, plugin_node: DraNode):
    """The pod's replica turns Unhealthy and allocatable nvidia.com/gpu drops by the GPU's 4 replicas (8 -> 4):
    XID 94 is a critical XID, not one of the ignored application XIDs (NVIDIA/k8s-device-plugin
    internal/rm/health.go @ 02597b9), and every replica of the GPU goes, as with the fix of #1929 (PR #1930)."""
    scenario = load_cluster_scenario(SCENARIOS / "ecc-on-time-sliced-gpu.yaml")
    ran = await run(scenario, apiserver, admin_socket=str(plugin_node.admin_socket))
    assert ran.status == EXIT_PASS, ran.out
    assert plugin_node.placer.errors == []


@pytest.fixture
async def compute_domain_controller(apiserver: FakeApiServer) -> AsyncIterator[ComputeDomainController]:
    """fakegpu's ComputeDomain controller in the namespace the virtual nodes write their cliques to."""
    client = apiserver.client()
    controller = ComputeDomainController(client, DRIVER_NAMESPACE, status_interval=0.05)
    await controller.start()
    try:
        yield controller
    finally:
        await controller.stop()
        await client.close()


async def test_c_a_fabric_error_takes_a_4_node_compute_domain_not_ready(
    apiserver: FakeApiServer, compute_domain_controller: ComputeDomainController
):
    """The domain turns Ready on four virtual nodes of one clique, NotReady when the fabric fails under worker-0
    and Ready again once it registers (kubernetes-sigs/dra-driver-nvidia-gpu cmd/compute-domain-controller
    computedomain.go calculateGlobalStatus and cmd/compute-domain-daemon cdclique.go @ 0807eed)."""
    scenario = load_cluster_scenario(SCENARIOS / "fabric-error-compute-domain-not-ready.yaml")
    client = apiserver.client()
    try:
        async with VirtualPodPlacer(client, scenario.cluster.namespace) as placer:
            ran = await run(scenario, apiserver)
    finally:
        await client.close()
    assert ran.status == EXIT_PASS, ran.out
    assert placer.unschedulable == ["worker-4"]
    nodes = [apiserver.get_object("nodes", n) or {} for n in placer.placed.values() if n]
    racks = {node["metadata"]["labels"]["nvidia.com/gpu.clique"] for node in nodes}
    assert len(racks) == 1, "the four workers share one NVLink clique"


FLEET_SCALE = 200.0
"""Ten minutes of the fleet scenario's schedule in 3 s."""


async def test_d_five_percent_of_a_1000_gpu_fleet_fail_over_ten_minutes(apiserver: FakeApiServer):
    """50 of 1000 GPUs fall off the bus one at a time on the fleet library's schedule (its ScaledClock): each one's
    device is tainted gpu.nvidia.com/xid=79 (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/
    device_health.go @ 15a116f), and the nodes without a fault are never written."""
    scenario = load_cluster_scenario(SCENARIOS / "fleet-five-percent-failing.yaml")
    ran = await run(scenario, apiserver, time_scale=FLEET_SCALE)
    assert ran.status == EXIT_PASS, ran.out
    (fault_line,) = [line for line in ran.out.splitlines() if " fleet_fault " in line]
    gpus, nodes, calls = (int(n) for n in re.findall(r"(\d+) GPUs on (\d+) nodes, (\d+) calls", fault_line)[0])
    assert gpus == 50
    assert calls <= 10 * nodes, "at most 10 API calls per faulted node"


async def test_an_expectation_that_never_holds_fails_with_what_the_cluster_showed(apiserver: FakeApiServer):
    """The step waits its ``within`` and fails (exit 1) naming what it waited for and the last count seen."""
    body = {
        "name": "t",
        "issue": "a/b#1",
        "description": "d",
        "cluster": {},
        "steps": [
            {"virtual_nodes": "--count 2 --gpus 8xh100-80gb --gpu-mode dra --name-prefix t-"},
            {"expect": {"within": 0.3, "tainted_devices": {"count": 1, "node_prefix": "t-"}}},
        ],
    }
    ran = await run(parse_cluster_scenario(body, "t.yaml"), apiserver)
    assert ran.status == EXIT_FAIL
    lines = ran.out.splitlines()
    assert lines[-6].split()[:2] == ["1", "expect"] and lines[-6].endswith("FAIL")
    assert lines[-5:] == [
        "          waited 0.3 s for: 1 tainted device(s)",
        "          last seen:",
        "          expected 1 device(s) of gpu.nvidia.com with a taint, got 0 of 16",
        "FAIL t after " + lines[-2].split("after ")[1],
        "  left in the cluster: the virtual nodes of --name-prefix t- (--cleanup deletes them)",
    ]


async def test_time_scale_speeds_the_fault_schedule_only_not_wait_or_within(apiserver: FakeApiServer):
    """``--time-scale`` divides a fleet fault's ``over`` (the schedule, as ``virtual-nodes --time-scale`` does);
    ``wait`` and ``within`` measure the cluster's reaction and keep their seconds: at 100x a 0.4 s wait still
    takes 0.4 s and an expectation that never holds still waits its 0.4 s."""
    body = {
        "name": "t",
        "issue": "a/b#1",
        "description": "d",
        "cluster": {},
        "steps": [
            {"virtual_nodes": "--count 2 --gpus 8xh100-80gb --gpu-mode dra --name-prefix t-"},
            {"wait": 0.4},
            {"expect": {"within": 0.4, "tainted_devices": {"count": 1, "node_prefix": "t-"}}},
        ],
    }
    ran = await run(parse_cluster_scenario(body, "t.yaml"), apiserver, time_scale=100.0)
    assert ran.status == EXIT_FAIL
    assert "  fleet fault schedules run 100x faster (--time-scale)" in ran.out.splitlines()
    (wait_line,) = [line for line in ran.out.splitlines() if " wait " in line]
    assert int(wait_line.split()[-3]) >= 400, wait_line
    assert "          waited 0.4 s for: 1 tainted device(s)" in ran.out.splitlines()


CLEANUP_BODY = {
    "name": "c",
    "issue": "a/b#1",
    "description": "d",
    "cluster": {"needs": "a cluster serving resource.k8s.io/v1"},
    "steps": [
        {
            "virtual_nodes": "--count 2 --gpus 8xh100-80gb --gpu-mode dra --name-prefix c- "
            "--feature-gates NVMLDeviceHealthCheck=true"
        },
        {
            "apply": "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: one-gpu}\n"
            "spec: {spec: {devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}]}}}\n"
        },
        {"expect": {"within": 1, "tainted_devices": {"count": 0, "node_prefix": "c-"}}},
        {"fleet_fault": {"fault": "off-bus", "fraction": 1.0}},
        {"expect": {"within": 5, "tainted_devices": {"count": 16, "node_prefix": "c-"}}},
    ],
}


async def test_cleanup_deletes_what_a_run_created_so_a_second_run_passes(apiserver: FakeApiServer):
    """Without ``--cleanup`` a run leaves its fleet (faults and all) and its objects, says so, and a second run
    fails at its first ``expect``; with it, the objects it created and its virtual nodes (the library's
    ``virtual-nodes --delete``) are gone and the scenario runs again. Its ``needs`` is printed first."""
    scenario = parse_cluster_scenario(CLEANUP_BODY, "c.yaml")
    for _ in range(2):
        cleaned = await run(scenario, apiserver, cleanup=True)
        assert cleaned.status == EXIT_PASS, cleaned.out
        assert "  needs: a cluster serving resource.k8s.io/v1" in cleaned.out.splitlines()[:3]
        assert cleaned.out.splitlines()[-1] == "  cleanup: deleted 1 object(s) and 2 virtual node(s)"
        client = apiserver.client()
        nodes = [n.metadata.name async for n in client.list(Node) if n.metadata is not None]
        await client.close()
        assert [n for n in nodes if n and n.startswith("c-")] == []
    first = await run(scenario, apiserver)
    assert first.status == EXIT_PASS, first.out
    assert first.out.splitlines()[-1] == (
        "  left in the cluster: 1 object(s) created and the virtual nodes of --name-prefix c- (--cleanup deletes them)"
    )
    again = await run(scenario, apiserver)
    assert again.status == EXIT_FAIL, again.out
    assert "expected 0 device(s) of gpu.nvidia.com with a taint, got 16 of 16" in again.out
