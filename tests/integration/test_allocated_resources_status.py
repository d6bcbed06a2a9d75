"""Device health in a pod's status (KEP-4680): the kubelet emulator's ``allocatedResourcesStatus`` from the real
daemons' health over their Unix sockets, and the pod's status written to the tests' API server.

Follows kubernetes ``pkg/kubelet/cm/devicemanager/manager.go`` ``UpdateAllocatedResourcesStatus`` and
``pkg/kubelet/cm/dra/manager.go`` ``UpdateAllocatedResourcesStatus`` / ``HandleWatchResourcesStream`` (v1.36),
``pkg/kubelet/cm/dra/healthinfo.go`` (at commit 0062353), and what a real Kubernetes v1.36.2 kubelet wrote
for fakegpu's device plugin and DRA driver (entry names, the CDI device ID as a DRA ``resourceID``, the
driver's message in ``message``). That reading's message, "XID 79", came from an older fakegpu; the message
checked here is the one fakegpu sends now, NVIDIA's text from kubernetes-sigs/dra-driver-nvidia-gpu
``cmd/gpu-kubelet-plugin/device_health_status.go`` @ bc3c4d8 (main): "critical XID 79 reported by NVML".
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakegpu.cli.main import main
from fakegpu.control.server import AdminServer
from fakegpu.dra import health_service
from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.dra.device_classes import device_classes
from fakegpu.kubelet.admin_ops import kubelet_ops
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.kubelet.pod_status import PodStatusWriter
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.gpu_faults import GpuFault
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.testing.fake_node import FakeNode
from fakegpu.testing.manifest_apply import AppliedPod, ManifestApplier
from tests.apiserver import serving
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.eventually import eventually
from tests.integration.dra_kubelet_side import FAST, kubelet_side
from tests.reliability.raw_calls import start_dra_driver

NODE = "node-a"
DRIVER = "gpu.nvidia.com"

# A pod with one claim `g` from a template asking for one gpu.nvidia.com device (the pod of the reading on a
# real Kubernetes v1.36.2 cluster).
MANIFEST = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer, namespace: default}
spec:
  resourceClaims:
  - {name: g, resourceClaimTemplateName: one-gpu}
  containers:
  - name: main
    image: ubuntu:24.04
    resources:
      claims:
      - {name: g}
"""


@dataclass
class DraNode:
    server: FakeApiServer
    driver: DraDriver
    kubelet: KubeletEmulator
    writer: PodStatusWriter
    applier: ManifestApplier

    def stored_pod(self, pod: AppliedPod) -> dict[str, Any]:
        return next(p for p in self.server.objects("pods", pod.namespace) if p["metadata"]["name"] == pod.name)

    def stored_resources_status(self, pod: AppliedPod) -> list[dict[str, Any]] | None:
        statuses = (self.stored_pod(pod).get("status") or {}).get("containerStatuses") or []
        return statuses[0].get("allocatedResourcesStatus") if statuses else None


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE) as server:
        for device_class in device_classes():
            server.create_direct(device_class)
        yield server


@pytest.fixture
async def node(apiserver: FakeApiServer, root: Path) -> AsyncIterator[DraNode]:
    """``fakegpu dra --feature-gates NVMLDeviceHealthCheck=true`` (it serves the health stream), the kubelet
    emulator reading claims from the API server, and a status writer in front of both."""
    driver = await start_dra_driver(apiserver, root, node=NODE, gpus="2xh100-80gb")
    try:
        async with kubelet_side(apiserver, root, NODE) as side:
            yield DraNode(apiserver, driver, side.kubelet, side.writer, side.applier)
    finally:
        await driver.stop()


async def test_a_dra_claim_turns_unhealthy_in_the_pod_status_after_off_bus(node: DraNode):
    """The entry is ``claim:<pod claim name>``, its ``resourceID`` the CDI device ID of the prepared device;
    Healthy (no message) before, Unhealthy with the driver's XID message after the GPU fell off the bus; and the
    API server's copy follows (kubernetes pkg/kubelet/cm/dra/manager.go UpdateAllocatedResourcesStatus,
    v1.36; the reading on a real Kubernetes v1.36.2 cluster)."""
    (pod,) = await node.applier.apply(MANIFEST)
    assert pod.result is not None and pod.result.phase == "Running"
    (cdi_id,) = pod.result.cdi_devices[next(iter(pod.result.cdi_devices))]
    claim_uid = next(iter(pod.result.cdi_devices))
    assert cdi_id == f"k8s.gpu.nvidia.com/claim={claim_uid}-gpu-0"
    healthy = [{"name": "claim:g", "resources": [{"health": "Healthy", "resourceID": cdi_id}]}]
    assert node.kubelet.allocated_resources_status(pod.uid) == {"main": healthy}
    await eventually(lambda: node.stored_resources_status(pod) == healthy, "the API server's copy, healthy")
    assert node.stored_pod(pod)["status"]["phase"] == "Running"

    node.driver.live.strike_gpu("0", GpuFault(kind="off-bus"))  # gpu-0, the claim's device

    def unhealthy() -> list[dict[str, Any]] | None:
        return node.stored_resources_status(pod)

    await eventually(
        lambda: (unhealthy() or [{}])[0].get("resources", [{}])[0].get("health") == "Unhealthy",
        "the API server's copy to turn Unhealthy",
    )
    (entry,) = unhealthy() or []
    (resource,) = entry["resources"]
    assert entry["name"] == "claim:g"
    assert resource["resourceID"] == cdi_id
    assert resource["message"] == "critical XID 79 reported by NVML"
    # A health change the pod does not see (the other GPU) is looked at, and nothing is written for it.
    patches = status_patches(node.server)
    passes = node.writer.passes
    node.driver.live.strike_gpu("1", GpuFault(kind="off-bus"))
    await eventually(lambda: node.writer.passes > passes, "the writer to look at the change")
    assert status_patches(node.server) == patches


def status_patches(server: FakeApiServer) -> int:
    return sum(1 for r in server.requests if r.method == "PATCH" and r.path.endswith("/status") and "/pods/" in r.path)


async def test_a_health_stream_that_ends_leaves_the_claims_devices_unknown(node: DraNode):
    """When the driver's health stream ends the kubelet clears the driver from its health info cache, and its
    devices read Unknown without a message until a new stream reports them (kubernetes
    pkg/kubelet/cm/dra/manager.go HandleWatchResourcesStream, v1.36; pkg/kubelet/cm/dra/healthinfo.go
    getHealthInfo at commit 0062353)."""
    (pod,) = await node.applier.apply(MANIFEST)
    await eventually(lambda: node.writer.pending() == [] and node.writer.writes > 0, "the first status write")
    node.driver.health.stop_streams()  # every stream ends now, and any new one at once

    def healths() -> list[tuple[str, str]]:
        entries = node.stored_resources_status(pod) or []
        return [(r["health"], r.get("message", "")) for e in entries for r in e["resources"]]

    await eventually(lambda: healths() == [("Unknown", "")], "the API server's copy to read Unknown")


async def test_health_older_than_its_timeout_reads_unknown_and_is_written_without_a_new_report(
    node: DraNode, monkeypatch: pytest.MonkeyPatch
):
    """A device whose last report is older than its ``health_check_timeout_seconds`` reads Unknown (no message);
    the kubelet emulator looks again when the timeout passes, so the API server's copy changes with no report
    coming (kubernetes pkg/kubelet/cm/dra/healthinfo.go getHealthInfo at commit 0062353)."""
    monkeypatch.setattr(health_service, "HEALTH_CHECK_TIMEOUT_SECONDS", 1)
    node.driver.health.heartbeat = 3600.0  # the driver goes quiet after its next report
    (pod,) = await node.applier.apply(MANIFEST)
    node.driver.live.strike_gpu("1", GpuFault(kind="off-bus"))  # a report (the other GPU) with the 1 s timeout
    await eventually(
        lambda: (
            node.kubelet.dra_health.drivers.get(DRIVER, {}).get(f"{NODE}/gpu-0") is not None
            and node.kubelet.dra_health.drivers[DRIVER][f"{NODE}/gpu-0"].timeout == 1.0
        ),
        "the kubelet to take the 1 s timeout",
    )

    def healths() -> list[str]:
        return [r["health"] for e in node.stored_resources_status(pod) or [] for r in e["resources"]]

    await eventually(lambda: healths() == ["Unknown"], "the API server's copy to read Unknown", timeout=10)


async def test_a_driver_without_the_health_service_gets_no_stream_and_its_devices_read_unknown(
    apiserver: FakeApiServer, root: Path
):
    """A plugin that does not list ``v1alpha1.DRAResourceHealth`` (NVIDIA's driver without the
    NVMLDeviceHealthCheck gate) is not asked for health; the claim's entry is there, Unknown (kubernetes
    pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go and pkg/kubelet/cm/dra/manager.go, v1.36)."""
    inputs = InventoryInputs(node_name=NODE, gpus=("2xh100-80gb",))
    settings = DraSettings(driver=DRIVER, cdi_root=root / "cdi", mig_mode="static")
    driver = DraDriver(
        LiveInventory(load_inventory(inputs)), KubeletPaths(root / "kubelet"), settings, apiserver.client
    )
    await driver.start()
    client = apiserver.client()
    kubelet = KubeletEmulator(root / "kubelet", prepare_backoff=FAST, api_client=client)
    try:
        await driver.wait_published()
        await kubelet.start()
        await eventually(lambda: DRIVER in kubelet.dra_plugins.plugins, "the DRA driver to register")
        (pod,) = await ManifestApplier(client, kubelet, NODE).apply(MANIFEST)
        assert pod.result is not None and pod.result.phase == "Running"
        (entry,) = kubelet.allocated_resources_status(pod.uid)["main"]
        assert entry["name"] == "claim:g"
        assert [r["health"] for r in entry["resources"]] == ["Unknown"]
        assert kubelet.health_streams.opened == 0
    finally:
        await kubelet.stop()
        await driver.stop()
        await client.close()


async def test_ctl_pods_shows_the_health_line_per_resource_id_and_the_api_field(node: DraNode, root: Path, capsys):
    """``fakegpu ctl pods`` prints one line per resource ID (entry, ID, health, the driver's message);
    ``-o json`` carries each container's ``allocatedResourcesStatus`` exactly as the pod's status has it."""
    server = AdminServer(root / "kubelet" / "fakegpu-kubelet.sock", kubelet_ops(node.kubelet))
    await server.start()
    try:
        (pod,) = await node.applier.apply(MANIFEST)
        node.driver.live.strike_gpu("0", GpuFault(kind="off-bus"))
        await eventually(
            lambda: (
                [r["health"] for e in node.kubelet.allocated_resources_status(pod.uid)["main"] for r in e["resources"]]
                == ["Unhealthy"]
            ),
            "the kubelet to see the GPU off the bus",
        )
        (entry,) = node.kubelet.allocated_resources_status(pod.uid)["main"]
        (resource,) = entry["resources"]
        argv = ["ctl", "--kubelet-dir", str(root / "kubelet"), "pods"]
        assert await asyncio.to_thread(main, argv) == 0
        text = capsys.readouterr().out
        line = f"    health   claim:g {resource['resourceID']}: Unhealthy ({resource['message']})"
        assert line in text.splitlines(), text
        assert await asyncio.to_thread(main, [*argv, "-o", "json"]) == 0
        (shown,) = json.loads(capsys.readouterr().out)
        assert shown["containers"][0]["allocatedResourcesStatus"] == [entry]
    finally:
        await server.stop()


# --- device plugin ---------------------------------------------------------------------------------------------


@pytest.fixture
async def dp_node(root: Path) -> AsyncIterator[FakeNode]:
    """``fakegpu plugin --gpus 2xh100-80gb`` and the kubelet emulator (the reading's device-plugin node)."""
    async with FakeNode(root / "dp", InventoryInputs(node_name=NODE, gpus=("2xh100-80gb",))) as fake:
        yield fake


def dp_entries(fake: FakeNode, uid: str) -> list[dict[str, Any]]:
    (main,) = fake.container_statuses(uid)
    return list(main.get("allocatedResourcesStatus", []))


async def test_a_device_plugin_gpu_off_the_bus_turns_unhealthy_in_the_container_status(dp_node: FakeNode):
    """One entry named for the resource, the device ID as ``resourceID``, Healthy before and Unhealthy after the
    GPU fell off the bus, no message (follows kubernetes pkg/kubelet/cm/devicemanager/manager.go
    UpdateAllocatedResourcesStatus, v1.36; the reading on a real Kubernetes v1.36.2 cluster)."""
    pod = await dp_node.run_pod("p1", {"main": {"nvidia.com/gpu": 1}}, name="trainer")
    assert pod.admitted
    (device,) = dp_node.kubelet.manager.container_devices("p1", "main")["nvidia.com/gpu"]
    assert device.startswith("GPU-")
    assert dp_entries(dp_node, "p1") == [
        {"name": "nvidia.com/gpu", "resources": [{"health": "Healthy", "resourceID": device}]}
    ]
    gpu = next(g for g in dp_node.inventory.node.gpus if g.uuid == device)
    dp_node.live.strike_gpu(gpu.uuid, GpuFault(kind="off-bus"))
    await dp_node.wait_kubelet_current(what="the GPU off the bus")
    assert dp_entries(dp_node, "p1") == [
        {"name": "nvidia.com/gpu", "resources": [{"health": "Unhealthy", "resourceID": device}]}
    ]


async def test_a_container_without_devices_has_no_entry_and_an_ended_stream_reads_unhealthy(dp_node: FakeNode):
    """A container that holds no device gets no ``allocatedResourcesStatus``; when the plugin's ListAndWatch
    stream ends the kubelet marks every device of the resource Unhealthy (``markResourceUnhealthy``), and once
    the grace period has forgotten the resource its devices read Healthy again, the kubelet's default for a
    device it does not know (kubernetes pkg/kubelet/cm/devicemanager/manager.go, v1.36)."""
    await dp_node.run_pod("p1", {"main": {"nvidia.com/gpu": 1}, "idle": {}}, name="two")
    statuses = {s["name"]: s for s in dp_node.container_statuses("p1")}
    assert "allocatedResourcesStatus" not in statuses["idle"]
    assert dp_entries_of(statuses["main"]) == ["Healthy"]
    await dp_node.end_streams("nvidia.com/gpu")
    assert dp_entries_of(dp_node.container_statuses("p1")[0]) == ["Unhealthy"]
    await dp_node.stop_plugins()
    dp_node.kubelet.clock.advance(dp_node.kubelet.manager.grace_period + 1)
    assert dp_node.capacity() == {}  # the resource is forgotten
    assert dp_entries_of(dp_node.container_statuses("p1")[0]) == ["Healthy"]


def dp_entries_of(status: dict[str, Any]) -> list[str]:
    return [r["health"] for e in status.get("allocatedResourcesStatus", []) for r in e["resources"]]
