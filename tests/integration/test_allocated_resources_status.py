"""Device health in a pod's status (KEP-4680): the kubelet emulator's ``allocatedResourcesStatus`` from the real
daemons' health over their Unix sockets, and the pod's status written to the tests' API server.

Follows kubernetes ``pkg/kubelet/cm/devicemanager/manager.go`` ``UpdateAllocatedResourcesStatus`` and
``pkg/kubelet/cm/dra/manager.go`` ``UpdateAllocatedResourcesStatus`` / ``HandleWatchResourcesStream`` (v1.36),
``pkg/kubelet/cm/dra/healthinfo.go`` (at commit 0062353), and what a real Kubernetes v1.36.2 kubelet wrote
for fakegpu's device plugin and DRA driver (entry names, the CDI device ID as a DRA ``resourceID``, the
driver's message).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakegpu.dra.daemon import DraDriver
from fakegpu.dra.device_classes import device_classes
from fakegpu.kubelet.dra_manager import Backoff
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.kubelet.pod_status import PodStatusWriter
from fakegpu.sharing.gpu_faults import GpuFault
from fakegpu.testing.manifest_apply import AppliedPod, ManifestApplier
from tests.apiserver import serving
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.eventually import eventually
from tests.reliability.raw_calls import start_dra_driver

NODE = "node-a"
DRIVER = "gpu.nvidia.com"
FAST = Backoff(initial=0.05, cap=0.2)

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
    client = apiserver.client()
    kubelet = KubeletEmulator(root / "kubelet", prepare_backoff=FAST, api_client=client)
    writer = PodStatusWriter(client, kubelet)
    try:
        await kubelet.start()
        await writer.start()
        await eventually(lambda: kubelet.health_streams.reports > 0, "the kubelet to read the driver's health")
        yield DraNode(apiserver, driver, kubelet, writer, ManifestApplier(client, kubelet, NODE, writer))
    finally:
        await writer.stop()
        await kubelet.stop()
        await driver.stop()
        await client.close()


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
    assert "XID 79" in resource["message"]
    writes = node.writer.writes
    assert node.writer.pending() == []
    assert writes == node.writer.writes  # nothing unchanged is written again
