"""The fake DCGM exporter against the kubelet emulator: values and pod labels follow the allocations the
kubelet actually made, read back through its pod resources API as dcgm-exporter reads them."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc

from fakegpu.dra.device_map import published_devices
from fakegpu.kubeletapi.podresources.v1 import api_pb2 as pr
from fakegpu.kubeletapi.podresources.v1 import api_pb2_grpc as pr_grpc
from fakegpu.sharing.gpu_faults import GpuFault
from fakegpu.telemetry.dcgm.attribution import CallableAttribution, DeviceHolder, DraDevice, PodResourcesAttribution
from fakegpu.telemetry.dcgm.exporter import CONTENT_TYPE, DcgmExporter
from fakegpu.telemetry.dcgm.gpu_activity import UTILIZATION_ANNOTATION
from fakegpu.telemetry.http_endpoint import MetricsServer, parse_listen_address
from tests.inventory_builders import time_slicing
from tests.pod_resources_stub import DraKubelet

GPU = "nvidia.com/gpu"
SERIES = re.compile(r"^(?P<name>[A-Z_]+)\{(?P<labels>.*)\} (?P<value>\S+)$")
LABEL = re.compile(r'([A-Za-z_]+)="((?:[^"\\]|\\.)*)"')


def rows(text: bytes, name: str, **where: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in text.decode().splitlines():
        match = SERIES.match(line)
        if match and match["name"] == name:
            labels = dict(LABEL.findall(match["labels"]))
            if where.items() <= labels.items():
                out.append((labels, float(match["value"])))
    return out


def one(text: bytes, name: str, **where: str) -> tuple[dict[str, str], float]:
    found = rows(text, name, **where)
    assert len(found) == 1, (name, where, found)
    return found[0]


@asynccontextmanager
async def exporter_for(node, **kw) -> AsyncIterator[DcgmExporter]:
    attribution = PodResourcesAttribution(node.kubelet.pod_resources_socket)
    exporter = DcgmExporter(node.live, attribution, annotations=node.kubelet.pod_annotations, clock=lambda: 0.0, **kw)
    try:
        yield exporter
    finally:
        await exporter.stop()
        await attribution.close()


def allocated(node, uid: str, resource: str = GPU) -> list[str]:
    allocations = node.kubelet.manager.allocations
    return [i for a in allocations if (a.pod_uid, a.resource) == (uid, resource) for i in a.device_ids]


async def test_values_follow_device_plugin_allocations(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    gpus = [g.uuid for g in node.inventory.node.gpus]
    async with exporter_for(node) as exporter:
        idle = await exporter.scrape()
        assert [v for _, v in rows(idle, "DCGM_FI_DEV_GPU_UTIL")] == [0, 0]
        assert all("pod" not in labels for labels, _ in rows(idle, "DCGM_FI_DEV_FB_USED"))

        pod = await node.run_pod("uid-train", {"main": {GPU: 1}, "sidecar": {}}, name="train-0", namespace="ml")
        assert pod.admitted
        (held,) = allocated(node, "uid-train")
        other = next(g for g in gpus if g != held)
        text = await exporter.scrape()
        labels, util = one(text, "DCGM_FI_DEV_GPU_UTIL", UUID=held)
        assert (labels["pod"], labels["namespace"], labels["container"]) == ("train-0", "ml", "main")
        assert 55 <= util <= 85
        assert one(text, "DCGM_FI_DEV_GPU_UTIL", UUID=other)[1] == 0
        assert "pod" not in one(text, "DCGM_FI_DEV_GPU_UTIL", UUID=other)[0]
        used = one(text, "DCGM_FI_DEV_FB_USED", UUID=held)[1]
        assert used > 0 and used + one(text, "DCGM_FI_DEV_FB_FREE", UUID=held)[1] == 81559
        assert one(text, "DCGM_FI_DEV_POWER_USAGE", UUID=held)[1] > one(text, "DCGM_FI_DEV_POWER_USAGE", UUID=other)[1]
        assert one(text, "DCGM_FI_DEV_GPU_TEMP", UUID=held)[1] > one(text, "DCGM_FI_DEV_GPU_TEMP", UUID=other)[1]

        annotated = {UTILIZATION_ANNOTATION: "25"}
        await node.run_pod("uid-infer", {"srv": {GPU: 1}}, name="infer-0", namespace="web", annotations=annotated)
        text = await exporter.scrape()
        labels, util = one(text, "DCGM_FI_DEV_GPU_UTIL", UUID=other)
        assert labels["pod"] == "infer-0" and 24 <= util <= 26
        assert 0.23 <= one(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", UUID=other)[1] <= 0.27

        node.delete_pod("uid-train")
        text = await exporter.scrape()
        labels, util = one(text, "DCGM_FI_DEV_GPU_UTIL", UUID=held)
        assert util == 0 and "pod" not in labels
        assert one(text, "DCGM_FI_DEV_FB_USED", UUID=held)[1] == 0


async def test_xid_injected_through_the_live_inventory(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    gpu1 = node.inventory.node.gpus[1].uuid
    async with exporter_for(node) as exporter:
        node.live.inject_xid(gpu1, 79)
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable().get(GPU) == 1, what="GPU 1 unhealthy")
        text = await exporter.scrape()
        labels, xid = one(text, "DCGM_FI_DEV_XID_ERRORS", UUID=gpu1)
        assert xid == 79 and labels["err_code"] == "79" and labels["err_msg"] == "GPU has fallen off the bus"
        assert one(text, "DCGM_FI_DEV_XID_ERRORS", gpu="0")[1] == 0


async def test_gpu_faults_on_a_running_node(fakegpu_node):
    """Faults struck on a running node: the ECC counters and remapped rows (NVIDIA/dcgm-exporter
    etc/default-counters.csv @ b54068a9feef589e07fc36c22642ad4bb61f6420), DCGM_FI_DEV_XID_ERRORS for an XID the
    device plugin ignores (43: the kubelet keeps both GPUs), a reset, and a GPU off the bus whose series vanish
    (dcgm-exporter skips blank values)."""
    node = await fakegpu_node("2xh100-80gb")
    gpu0, gpu1 = (g.uuid for g in node.inventory.node.gpus)
    async with exporter_for(node) as exporter:
        node.live.strike_gpu(gpu0, GpuFault(kind="xid", xid=43))
        node.live.strike_gpu(gpu1, GpuFault(kind="ecc-uncorrectable", count=2))
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable().get(GPU) == 1, what="GPU 1 unhealthy")
        text = await exporter.scrape()
        assert one(text, "DCGM_FI_DEV_XID_ERRORS", UUID=gpu0)[1] == 43
        assert one(text, "DCGM_FI_DEV_XID_ERRORS", UUID=gpu1)[1] == 63
        assert one(text, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", UUID=gpu1)[1] == 2
        assert one(text, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", UUID=gpu1)[1] == 2
        node.live.recover_gpu(gpu1, "reset")
        text = await exporter.scrape()
        assert one(text, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", UUID=gpu1)[1] == 0
        assert one(text, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", UUID=gpu1)[1] == 2
        node.live.strike_gpu(gpu0, GpuFault(kind="off-bus"))
        await node.kubelet.wait_for(lambda: node.kubelet.allocatable().get(GPU) == 0, what="GPU 0 off the bus")
        text = await exporter.scrape()
        assert rows(text, "DCGM_FI_DEV_GPU_TEMP", UUID=gpu0) == [] and rows(text, "DCGM_FI_DEV_GPU_TEMP", UUID=gpu1)


async def test_mig_instance_carries_its_profile_and_instance(fakegpu_node):
    node = await fakegpu_node("1xh100-80gb", mig_layout="all-balanced", mig_strategy="mixed")
    gpu = node.inventory.node.gpus[0]
    async with exporter_for(node) as exporter:
        pod = await node.run_pod("uid-mig", {"c": {"nvidia.com/mig-1g.10gb": 1}}, name="small", namespace="ml")
        assert pod.admitted, pod.message
        (mig_uuid,) = allocated(node, "uid-mig", "nvidia.com/mig-1g.10gb")
        mig = next(m for m in gpu.mig_devices if m.uuid == mig_uuid)
        text = await exporter.scrape()
        assert rows(text, "DCGM_FI_DEV_GPU_UTIL") == []  # a MIG-enabled GPU has no utilisation series
        labels, active = one(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU_I_ID=str(mig.gi_id))
        assert labels["GPU_I_PROFILE"] == "1g.10gb" and labels["UUID"] == gpu.uuid and labels["gpu"] == "0"
        assert (labels["pod"], labels["namespace"], labels["container"]) == ("small", "ml", "c")
        assert 0.5 < active < 0.9
        assert len(rows(text, "DCGM_FI_DEV_FB_USED")) == len(gpu.mig_devices)
        for other in gpu.mig_devices:
            if other.uuid != mig_uuid:
                labels, active = one(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU_I_ID=str(other.gi_id))
                assert active == 0 and "pod" not in labels


async def test_time_slicing_replicas_map_to_their_gpu(fakegpu_node):
    node = await fakegpu_node("1xh100-80gb", config=time_slicing(4))
    gpu = node.inventory.node.gpus[0].uuid
    for uid, pod, target in (("uid-a", "pod-a", "30"), ("uid-b", "pod-b", "20")):
        result = await node.run_pod(uid, {"c": {GPU: 1}}, name=pod, annotations={UTILIZATION_ANNOTATION: target})
        assert result.admitted
    replicas = {uid: allocated(node, uid)[0] for uid in ("uid-a", "uid-b")}
    assert all(r.startswith(f"{gpu}::") for r in replicas.values())

    async with exporter_for(node, virtual_gpus=True) as exporter:
        text = await exporter.scrape()
        found = rows(text, "DCGM_FI_DEV_GPU_UTIL", UUID=gpu)
        assert [(labels["pod"], labels["vgpu"]) for labels, _ in found] == [
            ("pod-a", replicas["uid-a"].split("::")[1]),
            ("pod-b", replicas["uid-b"].split("::")[1]),
        ]
        assert found[0][1] == found[1][1] and 48 <= found[0][1] <= 52  # one GPU: 30 % + 20 %

    async with exporter_for(node) as exporter:  # dcgm-exporter's default: the last pod listed names it
        labels, util = one(await exporter.scrape(), "DCGM_FI_DEV_GPU_UTIL", UUID=gpu)
        assert labels["pod"] == "pod-b" and "vgpu" not in labels and 48 <= util <= 52


async def test_attribution_survives_a_kubelet_restart(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    await node.run_pod("uid-1", {"main": {GPU: 2}}, name="big", namespace="ml")
    async with exporter_for(node) as exporter:
        await node.restart_kubelet()
        text = await exporter.scrape()
        assert [labels["pod"] for labels, _ in rows(text, "DCGM_FI_DEV_GPU_UTIL")] == ["big", "big"]
        await exporter.start()  # the background refresher, for servers that render synchronously
        node.delete_pod("uid-1")
        await exporter.refresh()
        assert all("pod" not in labels for labels, _ in rows(exporter.render(), "DCGM_FI_DEV_GPU_UTIL"))


async def test_dra_prepared_claims_through_an_injected_callable(fakegpu_node):
    """The DRA daemon passes what it prepared; no kubelet involved."""
    node = await fakegpu_node("2xh100-80gb", mig_layout="all-balanced", mig_strategy="mixed")
    devices = published_devices(node.inventory.node, "static")
    name, device = next((n, d) for n, d in sorted(devices.items()) if d.profile == "3g.40gb")
    assert device.uuid is not None
    dra = DraDevice("claim-1", "gpu-test", "gpu.nvidia.com", "fake-node", name)
    prepared = [DeviceHolder(device.uuid, "gpu-test", "pod1", "ctr", dra)]
    exporter = DcgmExporter(node.live, CallableAttribution(lambda: prepared), clock=lambda: 0.0)
    labels, active = one(await exporter.scrape(), "DCGM_FI_PROF_GR_ENGINE_ACTIVE", dra_device_name=name)
    assert labels["GPU_I_PROFILE"] == "3g.40gb" and labels["pod"] == "pod1"
    assert labels["dra_claim_name"] == "claim-1" and labels["dra_pool_name"] == "fake-node"
    assert active > 0.5
    prepared.clear()
    gi = labels["GPU_I_ID"]
    labels, active = one(await exporter.scrape(), "DCGM_FI_PROF_GR_ENGINE_ACTIVE", UUID=device.parent_uuid, GPU_I_ID=gi)
    assert active == 0 and "pod" not in labels


async def test_dra_allocations_from_the_pod_resources_api(fakegpu_node, fakegpu_dir: Path):
    node = await fakegpu_node("2xh100-80gb")
    devices = published_devices(node.inventory.node, "static")
    claimed = pr.ClaimResource(driver_name="gpu.nvidia.com", pool_name="fake-node", device_name="gpu-1")
    response = pr.ListPodResourcesResponse(
        pod_resources=[
            pr.PodResources(
                name="pod1",
                namespace="gpu-test",
                containers=[
                    pr.ContainerResources(
                        name="ctr",
                        dynamic_resources=[
                            pr.DynamicResource(
                                claim_name="single-gpu", claim_namespace="gpu-test", claim_resources=[claimed]
                            )
                        ],
                    )
                ],
            )
        ]
    )
    socket = fakegpu_dir / "dra-kubelet.sock"
    server = grpc.aio.server()
    pr_grpc.add_PodResourcesListerServicer_to_server(DraKubelet(response), server)
    server.add_insecure_port(f"unix://{socket}")
    await server.start()

    def resolve(driver: str, pool: str, device: str) -> str | None:
        found = devices.get(device)
        return found.uuid if driver == "gpu.nvidia.com" and pool == "fake-node" and found else None

    attribution = PodResourcesAttribution(socket, dra_device_uuid=resolve)
    try:
        exporter = DcgmExporter(node.live, attribution, clock=lambda: 0.0)
        labels, util = one(await exporter.scrape(), "DCGM_FI_DEV_GPU_UTIL", gpu="1")
        assert util > 0 and labels["pod"] == "pod1" and labels["dra_claim_name"] == "single-gpu"
        assert labels["dra_device_name"] == "gpu-1" and labels["UUID"] == node.inventory.node.gpus[1].uuid
    finally:
        await attribution.close()
        await server.stop(0)
    # no socket: no attribution, the exporter keeps serving
    missing = PodResourcesAttribution(fakegpu_dir / "absent.sock")
    assert await missing.holders() == []


async def test_served_over_http_like_dcgm_exporter(fakegpu_node):
    """The wiring the daemons use: ``--dcgm-address`` -> fakegpu.telemetry.http_endpoint.MetricsServer rendering
    ``exporter.scrape`` (each scrape re-reads the pod resources API, as dcgm-exporter does)."""
    node = await fakegpu_node("1xh100-80gb")
    async with exporter_for(node) as exporter:
        server = MetricsServer(
            parse_listen_address("127.0.0.1:0", "--dcgm-address"),
            exporter.registry,
            render=exporter.scrape,
            content_type=CONTENT_TYPE,
            flag="--dcgm-address",
        )
        await server.start()
        try:
            await node.run_pod("uid-1", {"c": {GPU: 1}}, name="served", namespace="ml")
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            response = await reader.read()
            writer.close()
        finally:
            await server.stop()
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"Content-Type: text/plain; version=0.0.4" in head
    labels, util = one(body, "DCGM_FI_DEV_GPU_UTIL", gpu="0")
    assert labels["pod"] == "served" and util > 0
