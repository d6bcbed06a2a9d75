"""NVIDIA's DRA demo specs applied unchanged to fakegpu's DRA driver through the kubelet emulator.

Each manifest under ``tests/integration/nvidia_demos/`` is NVIDIA's, re-typed (its header names the upstream
path and commit). :class:`fakegpu.testing.manifest_apply.ManifestApplier` does what the API server's
controllers and kube-scheduler do (claims from templates, allocation by :mod:`fakegpu.scheduling`, the
pod in each claim's ``reservedFor``), the kubelet emulator reads the claims from the tests' API server and
has them prepared by the real DRA driver over its Unix socket, and each test checks that every pod gets
the devices NVIDIA's demo README says it gets (follows kubernetes-sigs/dra-driver-nvidia-gpu
``demo/specs/quickstart/README.md`` and ``demo/specs/extended-resources/*.yaml``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.dra.device_classes import device_classes
from fakegpu.dra.feature_gates import FeatureGates
from fakegpu.kubelet.dra_manager import Backoff
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.testing.manifest_apply import AppliedPod, ManifestApplier
from tests.apiserver import serving
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.cdi_runtime import resolve
from tests.eventually import eventually

NODE = "node-a"
DRIVER = "gpu.nvidia.com"
DEMOS = Path(__file__).parent / "nvidia_demos"
FAST = Backoff(initial=0.05, cap=0.2)
SHARING_GATES = FeatureGates({"TimeSlicingSettings": True, "MPSSupport": True})
"""The quickstart's sharing demos need NVIDIA's alpha gates on (the chart's ``featureGates``)."""


@dataclass
class DemoNode:
    server: FakeApiServer
    driver: DraDriver
    kubelet: KubeletEmulator
    applier: ManifestApplier
    cdi_root: Path

    async def apply(self, demo: str) -> list[AppliedPod]:
        return await self.applier.apply((DEMOS / demo).read_text())

    def claim(self, namespace: str, name: str) -> dict[str, Any]:
        return next(c for c in self.server.objects("resourceclaims", namespace) if c["metadata"]["name"] == name)

    def devices(self, pod: AppliedPod, entry: str) -> list[str]:
        """The devices the allocation gave the pod's claim ``entry``."""
        claim = self.claim(pod.namespace, pod.claims[entry])
        return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]

    def visible(self, pod: AppliedPod) -> list[str]:
        """The GPU or MIG UUIDs each of the pod's CDI devices names (fakegpu's ``FAKEGPU_VISIBLE_DEVICES``,
        where NVIDIA's devices add their device nodes)."""
        assert pod.result is not None
        names = [n for ids in pod.result.cdi_devices.values() for n in ids]
        return [resolve(self.cdi_root, [n]).env.get("FAKEGPU_VISIBLE_DEVICES", "") for n in names]

    def container_env(self, pod: AppliedPod) -> dict[str, str]:
        """What a CDI runtime puts into the pod's containers for all its prepared claims."""
        assert pod.result is not None
        names = [n for ids in pod.result.cdi_devices.values() for n in ids]
        return resolve(self.cdi_root, names).env

    def env_of(self, pod: AppliedPod, container: str) -> dict[str, str]:
        """What a CDI runtime puts into one container: the CDI devices of the claims and requests it names."""
        assert pod.result is not None
        return resolve(self.cdi_root, self.kubelet.container_cdi_devices(pod.uid, container)).env

    def uuid_of(self, device: str) -> str:
        """A device's ``uuid`` attribute in the node's ResourceSlices."""
        for obj in self.server.objects("resourceslices"):
            for d in obj["spec"].get("devices") or []:
                if d["name"] == device:
                    return str(d["attributes"]["uuid"]["string"])
        raise AssertionError(f"no device {device}")


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE) as server:
        for device_class in device_classes():  # what NVIDIA's chart (and deploy/overlays/deviceclasses) installs
            server.create_direct(device_class)
        yield server


@asynccontextmanager
async def demo_node(
    server: FakeApiServer, root: Path, gpus: str, *, mig_config: Path | None = None, mig_layout: str | None = None
) -> AsyncIterator[DemoNode]:
    """``fakegpu dra`` (sharing gates on) and the kubelet emulator on one node, and the applier in front."""
    inputs = InventoryInputs(
        node_name=NODE,
        gpus=(gpus,),
        mig_config=str(mig_config) if mig_config else None,
        mig_layout=mig_layout,
    )
    settings = DraSettings(driver=DRIVER, cdi_root=root / "cdi", mig_mode="static", feature_gates=SHARING_GATES)
    driver = DraDriver(LiveInventory(load_inventory(inputs)), KubeletPaths(root / "kubelet"), settings, server.client)
    await driver.start()
    client = server.client()
    kubelet = KubeletEmulator(root / "kubelet", prepare_backoff=FAST, api_client=client)
    try:
        await driver.wait_published()
        await kubelet.start()
        await eventually(lambda: DRIVER in kubelet.dra_plugins.plugins, "the DRA driver to register with the kubelet")
        yield DemoNode(server, driver, kubelet, ManifestApplier(client, kubelet, NODE), root / "cdi")
    finally:
        await kubelet.stop()
        await driver.stop()
        await client.close()


def _now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def running(pods: list[AppliedPod]) -> list[AppliedPod]:
    for pod in pods:
        assert pod.result is not None, f"{pod.namespace}/{pod.name}: {pod.unschedulable}"
        assert pod.result.phase == "Running", f"{pod.name}: {pod.result.phase} {pod.result.prepare_error}"
    return pods


async def test_gpu_test1_two_pods_get_distinct_gpus(apiserver, root):
    """quickstart/v1/gpu-test1.yaml: two pods, one container each, each asking for 1 distinct GPU."""
    async with demo_node(apiserver, root, "2xa100-40gb") as node:
        pod1, pod2 = running(await node.apply("gpu-test1.yaml"))
        assert (node.devices(pod1, "gpu"), node.devices(pod2, "gpu")) == (["gpu-0"], ["gpu-1"])
        claim = node.claim("gpu-test1", pod1.claims["gpu"])
        assert claim["metadata"]["name"].startswith("pod1-gpu-")
        assert claim["metadata"]["annotations"] == {"resource.kubernetes.io/pod-claim-name": "gpu"}
        assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "pod1", "uid": pod1.uid}]
        (uuid1,), (uuid2,) = node.visible(pod1), node.visible(pod2)
        assert uuid1 != uuid2 and uuid1.startswith("GPU-") and uuid2.startswith("GPU-")


async def test_gpu_test2_two_containers_share_one_gpu(apiserver, root):
    """gpu-test2.yaml: one pod, two containers, shared access to a single GPU (one claim, one device)."""
    async with demo_node(apiserver, root, "2xa100-40gb") as node:
        (pod,) = running(await node.apply("gpu-test2.yaml"))
        assert node.devices(pod, "shared-gpu") == ["gpu-0"]
        assert pod.result is not None and len(pod.result.cdi_devices) == 1


async def test_gpu_test3_one_global_claim_shared_by_two_pods(apiserver, root):
    """gpu-test3.yaml: one ResourceClaim, two pods, both get the same GPU; the claim reserves both."""
    async with demo_node(apiserver, root, "2xa100-40gb") as node:
        pod1, pod2 = running(await node.apply("gpu-test3.yaml"))
        assert pod1.claims == pod2.claims == {"shared-gpu": "single-gpu"}
        claim = node.claim("gpu-test3", "single-gpu")
        assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == ["gpu-0"]
        assert [r["name"] for r in claim["status"]["reservedFor"]] == ["pod1", "pod2"]
        assert node.visible(pod1) == node.visible(pod2) and node.visible(pod1)[0].startswith("GPU-")


async def test_gpu_test4_mig_devices_of_each_pod_share_a_parent(apiserver, root):
    """gpu-test4.yaml after the quickstart's half-balanced mig-parted config: the Deployment's 4 replicas each
    get 2x 1g.5gb, 1x 2g.10gb and 1x 3g.20gb MIG devices on one parent GPU (``matchAttribute:
    gpu.nvidia.com/parentUUID``), each replica on a different parent."""
    config = DEMOS / "half-balanced.yaml"
    async with demo_node(apiserver, root, "8xa100-40gb", mig_config=config, mig_layout="half-balanced") as node:
        pods = running(await node.apply("gpu-test4.yaml"))
        assert len(pods) == 4 and len({p.name for p in pods}) == 4
        parents = []
        for pod in pods:
            devices = node.devices(pod, "mig-devices")
            assert len(devices) == 4
            assert [d.split("-mig-")[1].split("-")[0] for d in devices] == ["1g5gb", "1g5gb", "2g10gb", "3g20gb"]
            assert len({d.split("-mig-")[0] for d in devices}) == 1, devices
            parents.append(devices[0].split("-mig-")[0])
            visible = node.visible(pod)
            assert len(set(visible)) == 4 and all(v.startswith("MIG-") for v in visible), visible
        assert sorted(parents) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


async def test_gpu_test5_time_slicing_and_mps_configs_reach_their_gpus(apiserver, root):
    """gpu-test5.yaml: two GPUs in one claim, TimeSlicing (interval Long) for ``ts-gpu`` and MPS (50 % threads,
    10Gi pinned memory) for ``mps-gpu``; the claim's configs reach the driver with their requests."""
    async with demo_node(apiserver, root, "2xa100-40gb") as node:
        (pod,) = running(await node.apply("gpu-test5.yaml"))
        claim = node.claim("gpu-test5", pod.claims["shared-gpus"])
        results = claim["status"]["allocation"]["devices"]["results"]
        assert [(r["request"], r["device"]) for r in results] == [("ts-gpu", "gpu-0"), ("mps-gpu", "gpu-1")]
        configs = claim["status"]["allocation"]["devices"]["config"]
        assert [(c["source"], c["requests"], c["opaque"]["parameters"]["sharing"]["strategy"]) for c in configs] == [
            ("FromClaim", ["ts-gpu"], "TimeSlicing"),
            ("FromClaim", ["mps-gpu"], "MPS"),
        ]
        assert node.container_env(pod)["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
        # Each container gets only the request it names (kubernetes pkg/kubelet/cm/dra/manager.go
        # GetResources @ e0a566e7): the time-slicing containers see gpu-0 without MPS, the MPS ones gpu-1.
        for container in ("ts-ctr0", "ts-ctr1"):
            env = node.env_of(pod, container)
            assert env["FAKEGPU_VISIBLE_DEVICES"] == node.uuid_of("gpu-0"), container
            assert not [k for k in env if k.startswith("CUDA_MPS_")], container
        for container in ("mps-ctr0", "mps-ctr1"):
            env = node.env_of(pod, container)
            assert env["FAKEGPU_VISIBLE_DEVICES"] == node.uuid_of("gpu-1"), container
            assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps", container


async def test_gpu_test_mps_two_containers_share_one_gpu_through_mps(apiserver, root):
    """gpu-test-mps.yaml: one pod, two containers share one GPU through an MPS control daemon."""
    async with demo_node(apiserver, root, "2xa100-40gb") as node:
        (pod,) = running(await node.apply("gpu-test-mps.yaml"))
        assert node.devices(pod, "shared-gpu") == ["gpu-0"]
        env = node.container_env(pod)
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
        assert env["FAKEGPU_VISIBLE_DEVICES"].startswith("GPU-")


async def test_gpu_test6_names_index_which_nvidia_no_longer_publishes(apiserver, root):
    """gpu-test6.yaml selects by ``index``, which NVIDIA's driver stopped publishing (v25.8.0): on a real
    cluster the scheduler fails every replica with a CEL runtime error, and so does fakegpu's allocator."""
    async with demo_node(apiserver, root, "8xa100-40gb") as node:
        pods = await node.apply("gpu-test6.yaml")
        assert len(pods) == 4
        for pod in pods:
            assert pod.result is None
            assert "request gpu: request selector #0: CEL runtime error" in pod.unschedulable
            assert "index" in pod.unschedulable


async def test_extended_resource_gpu_full_gets_the_schedulers_claim(apiserver, root):
    """extended-resources/gpu-full.yaml: ``nvidia.com/gpu: 1`` without resourceClaims; the scheduler writes a
    claim (annotation, request ``container-0-request-0``, class gpu.nvidia.com) and the pod gets one GPU."""
    async with demo_node(apiserver, root, "2xa100-40gb") as node:
        (pod,) = running(await node.apply("extended-resources-gpu-full.yaml"))
        claim = node.claim(pod.namespace, pod.claims["extended-resources"])
        assert claim["metadata"]["name"].startswith("gpu-full-pod-extended-resources-")
        assert claim["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
        assert claim["metadata"]["ownerReferences"][0]["uid"] == pod.uid
        request = claim["spec"]["devices"]["requests"][0]
        assert request == {
            "name": "container-0-request-0",
            "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1},
        }
        assert node.devices(pod, "extended-resources") == ["gpu-0"]
        stored = next(p for p in apiserver.objects("pods", pod.namespace) if p["metadata"]["name"] == pod.name)
        assert stored["status"]["extendedResourceClaimStatus"] == {
            "resourceClaimName": claim["metadata"]["name"],
            "requestMappings": [
                {
                    "containerName": "cuda-container",
                    "resourceName": "nvidia.com/gpu",
                    "requestName": "container-0-request-0",
                }
            ],
        }


async def test_extended_resource_mig_class_applied_later_serves_nvidia_com_gpu(apiserver, root):
    """extended-resources/mig-1g-12gb.yaml: its DeviceClass also names ``nvidia.com/gpu``; the newest class
    serves the resource, so the pod gets one 1g.12gb MIG device (on an H100 94GB where NVIDIA used a GH200)."""
    installed = max(c["metadata"]["creationTimestamp"] for c in apiserver.objects("deviceclasses"))
    # creation times have whole seconds, and on a tie the lower name wins (gpu.nvidia.com): the demo's class is
    # applied after the chart's, as on a cluster where the chart was installed before
    await eventually(lambda: _now_stamp() > installed, "the clock to pass the chart classes' creation second")
    async with demo_node(apiserver, root, "1xh100-94gb", mig_layout="all-1g.12gb") as node:
        (pod,) = running(await node.apply("extended-resources-mig-1g-12gb.yaml"))
        claim = node.claim(pod.namespace, pod.claims["extended-resources"])
        assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "mig-1g-12gb.gpu.nvidia.com"
        (device,) = node.devices(pod, "extended-resources")
        assert "-mig-1g12gb-" in device


async def test_mig_and_mps_sharing_demo_four_pods_share_each_claim(apiserver, root):
    """NVIDIA's MIG + MPS sharing demo (classic DRA, translated to structured claims; see the file's header):
    the Job's 4 pods all use the same GPU under time-slicing, the same GPU under MPS, the same 1g.5gb MIG
    device under time-slicing and the same one under MPS; every claim reserves all four pods."""
    config = DEMOS / "half-balanced.yaml"
    async with demo_node(apiserver, root, "8xa100-40gb", mig_config=config, mig_layout="half-balanced") as node:
        pods = running(await node.apply("mig-mps-sharing.yaml"))
        assert len(pods) == 4
        claims = {name: node.claim("sharing-demo", name) for name in pods[0].claims.values()}
        devices = {
            name: [r["device"] for r in c["status"]["allocation"]["devices"]["results"]] for name, c in claims.items()
        }
        assert devices["gpu-ts-sharing"] == ["gpu-4"] and devices["gpu-mps-sharing"] == ["gpu-5"]
        assert devices["mig-ts-sharing"] != devices["mig-mps-sharing"]
        assert all("-mig-1g5gb-" in devices[n][0] for n in ("mig-ts-sharing", "mig-mps-sharing"))
        for claim in claims.values():
            assert sorted(r["uid"] for r in claim["status"]["reservedFor"]) == sorted(p.uid for p in pods)
        visible = {tuple(node.visible(p)) for p in pods}
        assert len(visible) == 1, "every pod sees the same four devices"
        assert node.container_env(pods[0])["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"


async def test_a_missing_claim_template_is_named_before_the_pod_is_created(apiserver, root):
    """The resourceclaim controller cannot make a claim from a template that does not exist (kubernetes
    pkg/controller/resourceclaim/controller.go (v1.36) reports it for the pod); the applier says so before it
    creates the pod, leaving no pod behind."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "lonely", "namespace": "default"},
        "spec": {
            "containers": [{"name": "ctr", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "nope"}],
        },
    }
    async with demo_node(apiserver, root, "1xa100-40gb") as node:
        with pytest.raises(ValueError, match=r"Pod default/lonely: resourceClaims entry gpu: ResourceClaimTemplate "):
            await node.applier.apply([pod])
        assert not node.server.objects("pods")
