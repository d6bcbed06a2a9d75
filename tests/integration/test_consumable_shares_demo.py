"""NVIDIA's consumable-shares demo applied unchanged to fakegpu's DRA driver through the kubelet emulator.

The three ``consumable-shares-*.yaml`` manifests in ``tests/integration/nvidia_demos/`` are NVIDIA's
``demo/specs/consumable-shares/`` (re-typed; each header names its upstream path and commit). The driver runs
as NVIDIA's README says to run it for each (``--consumable-shares=4``, ``memory``, ``unlimited`` with the
``ConsumableShares`` gate); :class:`fakegpu.testing.manifest_apply.ManifestApplier` makes the Deployments'
pods and claims and allocates them as kube-scheduler does with consumable capacity (KEP-5075), and the kubelet
emulator has the real driver prepare them. Each test checks what NVIDIA's ``demo/specs/consumable-shares/
README.md`` (kubernetes-sigs/dra-driver-nvidia-gpu at 735809d) says each pod gets.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakegpu.dra.consumable_shares import parse_consumable_shares
from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.dra.device_classes import device_classes
from fakegpu.dra.feature_gates import parse_feature_gates
from fakegpu.kubelet.dra_manager import Backoff
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.testing.manifest_apply import AppliedPod, ManifestApplier, load_documents
from tests.apiserver import serving
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.cdi_runtime import resolve
from tests.eventually import eventually

NODE = "node-a"
DRIVER = "gpu.nvidia.com"
DEMOS = Path(__file__).parent / "nvidia_demos"
GATES = parse_feature_gates("ConsumableShares=true")
"""The chart's ``featureGates.ConsumableShares=true``; ``consumableShares`` is the mode each test passes."""


@dataclass
class SharedNode:
    server: FakeApiServer
    driver: DraDriver
    applier: ManifestApplier
    cdi_root: Path

    async def apply(self, demo: str) -> list[AppliedPod]:
        pods = await self.applier.apply((DEMOS / demo).read_text())
        for pod in pods:
            assert pod.result is not None, f"{pod.namespace}/{pod.name}: {pod.unschedulable}"
            assert (pod.result.phase, pod.result.prepare_error) == ("Running", ""), pod
        return pods

    def result(self, pod: AppliedPod) -> dict[str, Any]:
        """The one allocation result of the pod's claim ``gpu``."""
        claims = self.server.objects("resourceclaims", pod.namespace)
        claim = next(c for c in claims if c["metadata"]["name"] == pod.claims["gpu"])
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        return dict(result)

    def visible(self, pod: AppliedPod) -> str:
        """The GPU the pod's container sees (``FAKEGPU_VISIBLE_DEVICES`` of its CDI devices)."""
        assert pod.result is not None
        names = [n for ids in pod.result.cdi_devices.values() for n in ids]
        return resolve(self.cdi_root, names).env["FAKEGPU_VISIBLE_DEVICES"]


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE) as server:
        for device_class in device_classes():  # what NVIDIA's chart installs
            server.create_direct(device_class)
        yield server


@asynccontextmanager
async def shared_node(server: FakeApiServer, root: Path, shares: str, gpus: str) -> AsyncIterator[SharedNode]:
    inputs = InventoryInputs(node_name=NODE, gpus=(gpus,))
    settings = DraSettings(
        cdi_root=root / "cdi", feature_gates=GATES, consumable_shares=parse_consumable_shares(shares, GATES)
    )
    driver = DraDriver(LiveInventory(load_inventory(inputs)), KubeletPaths(root / "kubelet"), settings, server.client)
    await driver.start()
    client = server.client()
    kubelet = KubeletEmulator(root / "kubelet", prepare_backoff=Backoff(initial=0.05, cap=0.2), api_client=client)
    try:
        await driver.wait_published()
        await kubelet.start()
        await eventually(lambda: DRIVER in kubelet.dra_plugins.plugins, "the DRA driver to register with the kubelet")
        yield SharedNode(server, driver, ManifestApplier(client, kubelet, NODE), root / "cdi")
    finally:
        await kubelet.stop()
        await driver.stop()
        await client.close()


async def test_integer_sharing_four_replicas_share_one_gpu(apiserver, root):
    """integer-sharing.yaml with --consumable-shares=4: 'Up to N claims (each consuming 1 share by default) can
    share a single physical or MIG GPU' -- the four replicas each hold one of gpu-0's four shares."""
    async with shared_node(apiserver, root, "4", "1xh100-80gb") as node:
        pods = await node.apply("consumable-shares-integer-sharing.yaml")
        assert len(pods) == 4
        results = [node.result(p) for p in pods]
        assert {r["device"] for r in results} == {"gpu-0"}
        assert len({r["shareID"] for r in results}) == 4
        assert all(r["consumedCapacity"] == {"memory": "0", "shares": "1"} for r in results)
        gpu0 = node.driver.live.inventory.node.gpus[0].uuid
        assert [node.visible(p) for p in pods] == [gpu0] * 4


async def test_integer_sharing_scaled_past_the_shares_leaves_a_replica_pending(apiserver, root):
    """The README's 'Scaling Replicas' (``kubectl scale deployment ... --replicas``) on a one-GPU node: four
    shares, so a fifth replica of integer-sharing stays Pending with the scheduler's reason."""
    docs = load_documents((DEMOS / "consumable-shares-integer-sharing.yaml").read_text())
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    deployment["spec"]["replicas"] = 5
    async with shared_node(apiserver, root, "4", "1xh100-80gb") as node:
        pods = await node.applier.apply(docs)
        running = [p for p in pods if p.result is not None and p.result.phase == "Running"]
        pending = [p for p in pods if p.result is None]
        assert (len(running), len(pending)) == (4, 1)
        assert "cannot allocate on node node-a" in pending[0].unschedulable, pending[0].unschedulable


async def test_memory_sharing_two_replicas_take_4gi_each_of_one_gpu(apiserver, root):
    """memory-sharing.yaml with --consumable-shares=memory: 'If a ResourceClaim specifies a fractional memory
    request (e.g. 4Gi), it consumes only that requested amount, allowing multiple fractional claims to
    co-allocate' -- both replicas on gpu-0, 4Gi each."""
    async with shared_node(apiserver, root, "memory", "1xh100-80gb") as node:
        pods = await node.apply("consumable-shares-memory-sharing.yaml")
        results = [node.result(p) for p in pods]
        assert [(r["device"], r["consumedCapacity"]) for r in results] == [("gpu-0", {"memory": "4Gi"})] * 2
        assert results[0]["shareID"] != results[1]["shareID"]


async def test_unlimited_sharing_two_replicas_take_no_memory(apiserver, root):
    """unlimited-sharing.yaml with --consumable-shares=unlimited: 'Claims that do not specify a memory capacity
    request will allocate 0 quota, allowing an unlimited number of claims to co-allocate on the device'."""
    async with shared_node(apiserver, root, "unlimited", "1xh100-80gb") as node:
        pods = await node.apply("consumable-shares-unlimited-sharing.yaml")
        results = [node.result(p) for p in pods]
        assert [(r["device"], r["consumedCapacity"]) for r in results] == [("gpu-0", {"memory": "0"})] * 2
        gpu0 = node.driver.live.inventory.node.gpus[0].uuid
        assert [node.visible(p) for p in pods] == [gpu0, gpu0]
