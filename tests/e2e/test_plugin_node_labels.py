"""``fakegpu plugin --label-node --config-dir`` against a real API server.

A real kubelet is not needed for the Node side: the plugin serves the kubelet emulator locally while it
labels and follows a throwaway Node object (KWOK-annotated and tainted, so nothing schedules on it) in
the cluster KUBECONFIG points at. The Node is always deleted at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from lightkube import AsyncClient
from lightkube.models.core_v1 import NodeSpec, Taint
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from fakegpu.fakeplugin.daemon import NodeSettings, run_plugin_daemon
from fakegpu.fakeplugin.node_sync import ConfigSelection
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.sharing.label_ownership import OWNED_LABELS_ANNOTATION
from tests.daemon_tasks import stop_and_wait
from tests.eventually import eventually

GPU = "nvidia.com/gpu"


@pytest.fixture
async def throwaway_node() -> AsyncIterator[tuple[AsyncClient, str]]:
    client = AsyncClient()
    name = f"fakegpu-e2e-{uuid.uuid4().hex[:8]}"
    node = Node(
        metadata=ObjectMeta(name=name, annotations={"kwok.x-k8s.io/node": "fake"}, labels={"type": "kwok"}),
        spec=NodeSpec(taints=[Taint(key="kwok.x-k8s.io/node", value="fake", effect="NoSchedule")]),
    )
    await client.create(node)
    try:
        yield client, name
    finally:
        with contextlib.suppress(Exception):
            await client.delete(Node, name)
        await client.close()


async def wait_labels(
    client: AsyncClient, name: str, key: str, value: str | None, timeout: float = 20.0
) -> dict[str, str]:
    labels: dict[str, str] = {}

    async def matched() -> bool:
        node = await client.get(Node, name)
        labels.clear()
        labels.update((node.metadata and node.metadata.labels) or {})
        return labels.get(key) == value

    await eventually(
        matched, f"{key} to become {value!r}", timeout, interval=0.2, detail=lambda: f"{key}: {labels.get(key)!r}"
    )
    return labels


async def test_plugin_labels_its_node_and_follows_the_config_label(throwaway_node):
    client, name = throwaway_node
    root = Path(tempfile.mkdtemp(prefix="fge2e-", dir="/tmp"))
    configs = root / "configs"
    configs.mkdir()
    (configs / "default").write_text("version: v1\n")
    (configs / "ts4").write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
    )
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    stop = asyncio.Event()
    settings = NodeSettings(
        label_node=True, selection=ConfigSelection(configs), kubeconfig=os.environ["KUBECONFIG"], resync_interval=1.0
    )
    inputs = InventoryInputs(node_name=name, gpus=("2xa100-40gb",))
    task = asyncio.create_task(run_plugin_daemon(inputs, KubeletPaths(root / "kubelet"), stop=stop, node=settings))
    try:
        labels = await wait_labels(client, name, "nvidia.com/gpu.count", "2")
        assert labels["nvidia.com/gpu.replicas"] == "1" and labels["type"] == "kwok"
        node = await client.get(Node, name)
        assert node.metadata is not None and OWNED_LABELS_ANNOTATION in (node.metadata.annotations or {})

        await client.patch(
            Node, name, {"metadata": {"labels": {"nvidia.com/device-plugin.config": "ts4"}}}, patch_type=PatchType.MERGE
        )
        await kubelet.wait_for(lambda: kubelet.allocatable().get(GPU) == 8, 20.0, "time-slicing")
        labels = await wait_labels(client, name, "nvidia.com/gpu.replicas", "4")
        assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    finally:
        try:
            await stop_and_wait(stop, task, timeout=10.0)
        finally:
            await kubelet.stop()
            shutil.rmtree(root, ignore_errors=True)
