"""``fakegpu plugin --dcgm-address`` and ``fakegpu dra --dcgm-address``: the daemons serve the fake
dcgm-exporter, attributing the pods the kubelet (emulator) actually gave devices to."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakeplugin.daemon import NodeSettings, run_plugin_daemon
from fakeplugin.kubelet.emulator import KubeletEmulator
from kubeletapi.kubelet_paths import KubeletPaths
from sharing.inputs import InventoryInputs
from telemetry.http_endpoint import ListenAddress
from tests.apiserver import FakeApiServer
from tests.integration.test_metrics import http_get

NODE = "dcgm-node"
GPU = "nvidia.com/gpu"


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fgdcgm-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


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
    caplog.set_level(logging.INFO, logger="telemetry.http_endpoint")
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
            dcgm_address=ListenAddress("127.0.0.1", 0),
            node=node,
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
        assert 38 <= value <= 42
        assert labels["modelName"] == "NVIDIA A100-SXM4-40GB"
        _, _, again = await http_get(url)
        (held_again,) = [v for lbl, v in series(again, "DCGM_FI_DEV_GPU_UTIL") if lbl.get("pod")]
        assert held_again <= 42
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5.0)
        await kubelet.stop()
        apiserver.stop()
    assert apiserver.count("get", "pods") == 1, "one lookup, then the cache"


def test_a_bad_dcgm_address_is_one_line_and_exit_2(root):
    out = subprocess.run(
        [sys.executable, "-m", "fakegpu.cli", "plugin", "--kubelet-dir", str(root), "--dcgm-address", "nine"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 2
    assert out.stderr.startswith("fakegpu: error: --dcgm-address: 'nine': ")
    assert "Traceback" not in out.stderr
