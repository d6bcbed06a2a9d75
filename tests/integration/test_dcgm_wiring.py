"""``fakegpu plugin --dcgm-address`` and ``fakegpu dra --dcgm-address``: the daemons serve the fake
dcgm-exporter, attributing the pods the kubelet (emulator) actually gave devices to."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User

from fakegpu.cli.main import full_parser as cli_parser
from fakegpu.dra.daemon import DraDriver, DraSettings, run_dra_daemon
from fakegpu.dra.device_map import published_devices
from fakegpu.fakeplugin.daemon import NodeSettings, run_plugin_daemon
from fakegpu.kube.pod_annotations import PodAnnotations, describe_error
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.kubeletapi.podresources.v1 import api_pb2 as pr
from fakegpu.kubeletapi.podresources.v1 import api_pb2_grpc as pr_grpc
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.dcgm.attribution import pod_resources_socket
from fakegpu.telemetry.dcgm.endpoint import DcgmEndpoint
from fakegpu.telemetry.dcgm.exporter import DEFAULT_SEED, DEFAULT_STEP_SECONDS
from fakegpu.telemetry.dcgm.gpu_activity import UTILIZATION_ANNOTATION
from fakegpu.telemetry.http_endpoint import ListenAddress
from fakegpu.telemetry.telemetry_settings import TelemetrySettings
from tests.apiserver import FakeApiServer
from tests.claim_builders import allocated_claim
from tests.daemon_tasks import stop_and_wait
from tests.dra_kubelet_client import prepare, unprepare
from tests.eventually import eventually
from tests.http_get import http_get
from tests.pod_resources_stub import DraKubelet

NODE = "dcgm-node"
GPU = "nvidia.com/gpu"


def served_url(caplog: pytest.LogCaptureFixture) -> str:
    found = re.findall(r"serving metrics on (http://\S+)", caplog.text)
    assert found, "the DCGM endpoint never started"
    return str(found[-1])


def series(body: str, metric: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in body.splitlines():
        if line.startswith(metric + "{"):
            labels_text, value = line[len(metric) + 1 :].rsplit("} ", 1)
            labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
            out.append((labels, float(value)))
    return out


async def test_plugin_daemon_serves_dcgm_metrics_for_the_pods_the_kubelet_admitted(root, caplog):
    """Pods from the kubelet's PodResources; the target utilisation from the pod's annotation on the API."""
    caplog.set_level(logging.INFO, logger="fakegpu.telemetry.http_endpoint")
    apiserver = FakeApiServer("1.36").start()
    apiserver.create_direct(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "train", "namespace": "ml", "annotations": {"fakegpu.io/gpu-utilization": "40"}},
            "spec": {"containers": [{"name": "trainer", "image": "busybox:1.36"}]},
        }
    )
    node = NodeSettings(kubeconfig=str(apiserver.kubeconfig(root / "kubeconfig")))
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_plugin_daemon(
            InventoryInputs(node_name=NODE, gpus=("2xa100-40gb",)),
            KubeletPaths(root / "kubelet"),
            stop=stop,
            node=node,
            telemetry=TelemetrySettings(dcgm_address=ListenAddress("127.0.0.1", 0)),
        )
    )
    try:
        await kubelet.wait_for(lambda: kubelet.allocatable().get(GPU) == 2 or task.done(), 10.0, "devices")
        assert not task.done()
        url = served_url(caplog)
        status, headers, body = await http_get(url)
        assert status == 200 and headers["content-type"].startswith("text/plain")
        idle = series(body, "DCGM_FI_DEV_GPU_UTIL")
        assert len(idle) == 2 and all(v == 0 for _, v in idle) and all("pod" not in lbl for lbl, _ in idle)

        result = await kubelet.run_pod(
            "uid-1",
            {"trainer": {GPU: 1}},
            name="train",
            namespace="ml",
            annotations={"fakegpu.io/gpu-utilization": "40"},
        )
        assert result.admitted
        first_step = int(time.time() // DEFAULT_STEP_SECONDS)
        _, _, body = await http_get(url)
        held = [(lbl, v) for lbl, v in series(body, "DCGM_FI_DEV_GPU_UTIL") if lbl.get("pod")]
        assert len(held) == 1
        labels, value = held[0]
        assert (labels["pod"], labels["namespace"], labels["container"], labels["Hostname"]) == (
            "train",
            "ml",
            "trainer",
            NODE,
        )
        assert 39 <= value <= 41
        assert labels["modelName"] == "NVIDIA A100-SXM4-40GB"
        # The model moves once per 10 s step: within a step the value repeats exactly; in the next one it
        # stays within the annotation's band (40 % +- 1 point of jitter).
        step = int(time.time() // DEFAULT_STEP_SECONDS)
        _, _, again = await http_get(url)
        same_step = step == int(time.time() // DEFAULT_STEP_SECONDS) == first_step
        (held_again,) = [v for lbl, v in series(again, "DCGM_FI_DEV_GPU_UTIL") if lbl.get("pod")]
        assert 39 <= held_again <= 41
        if same_step:
            assert held_again == value
    finally:
        try:
            await stop_and_wait(stop, task)
        finally:
            await kubelet.stop()
            apiserver.stop()
    assert apiserver.count("get", "pods") == 1, "one lookup, then the cache"


def test_a_bad_dcgm_address_is_one_line_and_exit_2(root):
    out = subprocess.run(
        [sys.executable, "-m", "fakegpu", "plugin", "--kubelet-dir", str(root), "--dcgm-address", "nine"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 2
    assert out.stderr.startswith("fakegpu: error: --dcgm-address: 'nine': ")
    assert "Traceback" not in out.stderr


# --- pod annotations: a slow or unreachable API server never makes a scrape slow ---------------------------


@contextlib.contextmanager
def black_hole() -> Iterator[str]:
    """An 'API server' that accepts connections (the kernel's backlog) and never answers: a hung apiserver."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def annotations_from(server: str, **kw: Any) -> PodAnnotations:
    config = KubeConfig.from_one(cluster=Cluster(server=server), user=User())
    return PodAnnotations(lambda: AsyncClient(config=config, trust_env=False), **kw)


async def timed_scrape(url: str) -> tuple[float, str]:
    started = time.monotonic()
    status, _, body = await http_get(url)
    assert status == 200
    return time.monotonic() - started, body


@pytest.mark.parametrize("api", ["hung", "refusing"])
async def test_an_unreachable_api_server_keeps_scrapes_fast(api, fakegpu_node, caplog, timing):
    node = await fakegpu_node("4xa100-40gb")
    for i in range(4):  # four pods: four lookups, which used to run one after the other with 5 s each
        assert (await node.run_pod(f"uid-{i}", {"c": {GPU: 1}}, name=f"p{i}", namespace="ml")).admitted
    caplog.set_level(logging.INFO)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(black_hole()) if api == "hung" else closed_port()
        annotations = annotations_from(server)
        endpoint = DcgmEndpoint(node.live, node.root, ListenAddress("127.0.0.1", 0), annotations=annotations)
        await endpoint.start()
        try:
            took, body = await timed_scrape(endpoint.server.url)
            timing.within(took, 2.5, "the first scrape")
            held = [lbl["pod"] for lbl, _ in series(body, "DCGM_FI_DEV_GPU_UTIL") if lbl.get("pod")]
            assert sorted(held) == ["p0", "p1", "p2", "p3"]  # served, with the default target
            took, _ = await timed_scrape(endpoint.server.url)
            timing.within(took, 0.5, "the second scrape (failed lookups back off, not retried on every scrape)")
        finally:
            await endpoint.stop()
    warnings = [r.getMessage() for r in caplog.records if r.name == "fakegpu.kube.pod_annotations"]
    assert len(warnings) == 1, warnings  # once, not per pod or per scrape
    if api == "hung":
        assert "no answer within 2s" in warnings[0]
    else:
        assert "ConnectError" in warnings[0] or "Connect" in warnings[0], warnings[0]


async def test_lookups_recover_keep_the_last_answer_and_say_so(fakegpu_node, caplog):
    apiserver = FakeApiServer("1.36").start()
    try:
        apiserver.create_direct(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ml", "annotations": {UTILIZATION_ANNOTATION: "20"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            }
        )
        annotations = annotations_from(apiserver.url, ttl=0.0, backoff_initial=0.05)
        caplog.set_level(logging.INFO, logger="fakegpu.kube.pod_annotations")
        await annotations.prefetch({("ml", "p")})
        assert annotations("ml", "p") == {UTILIZATION_ANNOTATION: "20"}
        apiserver.fail_next("get", "pods", 500, times=3, message="etcd is sad")
        for _ in range(3):
            await asyncio.sleep(0.11)  # time passing: past the backoff, so it tries again and fails again
            await annotations.prefetch({("ml", "p")})
            assert annotations("ml", "p") == {UTILIZATION_ANNOTATION: "20"}  # the last answer stays
        await asyncio.sleep(0.5)  # time passing: past the grown backoff, the next lookup may go out
        await annotations.prefetch({("ml", "p")})
        await annotations.close()
    finally:
        apiserver.stop()
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in messages] == ["WARNING", "INFO"], messages
    assert "pod ml/p" in messages[0][1] and "etcd is sad" in messages[0][1]
    assert messages[1][1] == "pod annotation lookups work again"


def test_an_error_without_text_is_named_by_its_type():
    assert describe_error(TimeoutError()) == "TimeoutError"
    assert describe_error(OSError("refused")) == "OSError: refused"


# --- --dcgm-seed --------------------------------------------------------------------------------------------


def test_the_cli_takes_a_seed():
    for command in ("plugin", "dra"):
        assert cli_parser().parse_args([command]).dcgm_seed == DEFAULT_SEED == "fakegpu"
        assert cli_parser().parse_args([command, "--dcgm-seed", "node-7"]).dcgm_seed == "node-7"


async def test_the_endpoint_passes_the_seed_to_the_model(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    assert (await node.run_pod("uid-1", {"c": {GPU: 1}}, name="p", namespace="ml")).admitted

    async def body(seed: str) -> bytes:
        endpoint = DcgmEndpoint(node.live, node.root, ListenAddress("127.0.0.1", 0), seed=seed)
        endpoint.exporter.clock = lambda: 0.0
        try:
            return await endpoint.scrape()
        finally:
            await endpoint.stop()

    first = await body("a")
    assert first == await body("a")
    assert first != await body("b")


# --- the DRA daemon's --dcgm-address --------------------------------------------------------------------


DRIVER = "gpu.nvidia.com"


def reserved_claim(name: str, device: str, pods: list[str]) -> dict[str, Any]:
    """A claim in namespace ``ml`` reserved for ``pods`` and for a Job (not a pod: no DCGM attribution)."""
    consumers = [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"} for pod in pods]
    consumers.append({"apiGroup": "batch", "resource": "jobs", "name": "not-a-pod", "uid": "uid-job"})
    return allocated_claim(name, NODE, [device], namespace="ml", reserved_for=consumers)


async def test_dra_daemon_serves_dcgm_metrics_for_prepared_claims(root, caplog):
    """Without ``dynamic_resources`` from the kubelet (before 1.34, or no PodResources socket at all), the
    prepared claims say who holds what: the pods the claim is reserved for, in its namespace."""
    caplog.set_level(logging.INFO, logger="fakegpu.telemetry.http_endpoint")
    apiserver = FakeApiServer("1.36").start()
    apiserver.add_node(NODE)
    paths = KubeletPaths(root / "kubelet")
    settings = DraSettings(cdi_root=root / "cdi", kubeconfig=str(apiserver.kubeconfig(root / "kubeconfig")))
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_dra_daemon(
            InventoryInputs(node_name=NODE, gpus=("2xh100-80gb",)),
            paths,
            settings,
            stop=stop,
            telemetry=TelemetrySettings(dcgm_address=ListenAddress("127.0.0.1", 0), dcgm_seed="dra-test"),
        )
    )
    try:
        await eventually(
            lambda: task.done() or (paths.dra_socket(DRIVER).exists() and "serving metrics" in caplog.text),
            "the DRA socket and the metrics endpoint",
        )
        assert not task.done(), task
        url = served_url(caplog)
        _, _, body = await http_get(url)
        assert all("pod" not in lbl for lbl, _ in series(body, "DCGM_FI_DEV_GPU_UTIL"))

        uid = apiserver.create_direct(reserved_claim("train", "gpu-1", ["trainer-0", "trainer-1"]))["metadata"]["uid"]
        assert (await prepare(paths.dra_socket(DRIVER), [("ml", "train", uid)])).claims[uid].error == ""
        _, _, body = await http_get(url)
        held = [lbl for lbl, _ in series(body, "DCGM_FI_DEV_GPU_UTIL") if lbl.get("pod")]
        assert [(lbl["gpu"], lbl["pod"], lbl["namespace"], lbl["container"]) for lbl in held] == [
            ("1", "trainer-1", "ml", "")  # both pods hold it; dcgm-exporter's default names the last
        ]
        assert (held[0]["dra_claim_name"], held[0]["dra_claim_namespace"]) == ("train", "ml")
        assert (held[0]["dra_driver_name"], held[0]["dra_pool_name"], held[0]["dra_device_name"]) == (
            DRIVER,
            NODE,
            "gpu-1",
        )
        (busy,) = [v for lbl, v in series(body, "DCGM_FI_DEV_GPU_UTIL") if lbl["gpu"] == "1"]
        assert busy > 0
        lookups = apiserver.count("get", "resourceclaims")
        await http_get(url)
        assert apiserver.count("get", "resourceclaims") == lookups, "the claim's pods are cached"

        # A kubelet that lists dynamic_resources (1.34+): its pod and container win, no claim lookups.
        claimed = pr.ClaimResource(driver_name=DRIVER, pool_name=NODE, device_name="gpu-1")
        response = pr.ListPodResourcesResponse(
            pod_resources=[
                pr.PodResources(
                    name="trainer-0",
                    namespace="ml",
                    containers=[
                        pr.ContainerResources(
                            name="main",
                            dynamic_resources=[
                                pr.DynamicResource(claim_name="train", claim_namespace="ml", claim_resources=[claimed])
                            ],
                        )
                    ],
                )
            ]
        )
        socket_path = pod_resources_socket(paths.root)
        socket_path.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server()
        pr_grpc.add_PodResourcesListerServicer_to_server(DraKubelet(response), server)
        server.add_insecure_port(f"unix://{socket_path}")
        await server.start()
        try:
            _, _, body = await http_get(url)
        finally:
            await server.stop(0)
        held = [lbl for lbl, _ in series(body, "DCGM_FI_DEV_GPU_UTIL") if lbl.get("pod")]
        assert [(lbl["gpu"], lbl["pod"], lbl["container"], lbl["dra_device_name"]) for lbl in held] == [
            ("1", "trainer-0", "main", "gpu-1")
        ]
        assert apiserver.count("get", "resourceclaims") == lookups
    finally:
        stop.set()
        await asyncio.wait_for(task, 5.0)
        apiserver.stop()


async def test_prepared_device_uuid_maps_this_drivers_devices_only(root):
    apiserver = FakeApiServer("1.36").start()
    apiserver.add_node(NODE)
    inputs = InventoryInputs(node_name=NODE, gpus=("1xh100-80gb",), mig_layout="all-3g.40gb")
    live = LiveInventory(load_inventory(inputs))
    driver = DraDriver(
        live,
        KubeletPaths(root / "kubelet"),
        DraSettings(cdi_root=root / "cdi"),
        apiserver.client,
    )
    await driver.start()
    try:
        await driver.wait_published()
        mig = live.inventory.node.gpus[0].mig_devices[0]
        published = published_devices(live.inventory.node, "static")
        device = next(name for name, d in published.items() if d.uuid == mig.uuid)
        assert driver.prepared_device_uuid(DRIVER, NODE, device) is None  # not prepared yet
        uid = apiserver.create_direct(reserved_claim("c", device, ["p"]))["metadata"]["uid"]
        assert (await prepare(driver.plugin.dra_socket, [("ml", "c", uid)])).claims[uid].error == ""
        assert driver.prepared_device_uuid(DRIVER, NODE, device) == mig.uuid
        assert driver.prepared_device_uuid("other.example.com", NODE, device) is None
        assert driver.prepared_device_uuid(DRIVER, "other-pool", device) is None
        holders = await driver.prepared_claim_holders()([])
        assert [(h.device_id, h.namespace, h.pod, h.container) for h in holders] == [(mig.uuid, "ml", "p", "")]
        await unprepare(driver.plugin.dra_socket, [("ml", "c", uid)])
        assert driver.prepared_device_uuid(DRIVER, NODE, device) is None
        assert await driver.prepared_claim_holders()([]) == []
    finally:
        await driver.stop()
        apiserver.stop()
