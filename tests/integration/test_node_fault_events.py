"""GPU faults and recoveries as core/v1 Events on the Node, from the device plugin's node sync and the DRA
driver, against the tests' API server.

Follows client-go's event recorder for the Event's shape and for repeats (kubernetes/kubernetes
staging/src/k8s.io/client-go/tools/record/events_cache.go @ 00080d4: the same source, object, type, reason and
message is a patch of ``count`` and ``lastTimestamp`` on the Event already written), and NVIDIA NVSentinel's
platform connector for the reasons (platform-connectors/pkg/connectors/kubernetes/process_node_events.go @
033cd49). NVIDIA's device plugin and DRA driver record no such Events (k8s-device-plugin internal/rm/health.go,
dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/driver.go ``deviceHealthEvents``: only health and taints).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu.control.client import admin_call
from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.fakeplugin.daemon import NodeSettings, run_plugin_daemon
from fakegpu.kube.node_events import DEVICE_PLUGIN_COMPONENT, DRA_COMPONENT
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.gpu_faults import GpuFault
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from tests.apiserver import FakeApiServer
from tests.apiserver.serving import serving
from tests.daemon_tasks import stop_and_wait
from tests.eventually import eventually

NODE = "gpu-node-1"


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    """Serves core/v1 Events (``nvidia_crds``)."""
    with serving(NODE, nvidia_crds=True) as server:
        yield server


def node_events(apiserver: FakeApiServer, reason: str | None = None) -> list[dict[str, Any]]:
    """The Events ``kubectl describe node`` lists for NODE (involvedObject kind Node, its name)."""
    return [
        e
        for e in apiserver.objects("events", "default")
        if e["involvedObject"]["kind"] == "Node"
        and e["involvedObject"]["name"] == NODE
        and (reason is None or e["reason"] == reason)
    ]


def node_uid(apiserver: FakeApiServer) -> str:
    node = apiserver.get_object("nodes", NODE)
    assert node is not None
    return str(node["metadata"]["uid"])


async def test_the_device_plugin_records_an_xid_on_the_node_and_counts_a_repeat(apiserver, root):
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    stop = asyncio.Event()
    admin = root / "admin.sock"
    settings = NodeSettings(label_node=True, kubeconfig=str(apiserver.kubeconfig(root / "kc")), resync_interval=0.2)
    task = asyncio.create_task(
        run_plugin_daemon(
            InventoryInputs(node_name=NODE, gpus=("2xa100-40gb",)),
            KubeletPaths(root / "kubelet"),
            stop=stop,
            node=settings,
            admin_socket=admin,
        )
    )
    try:

        def labelled() -> bool:
            return "nvidia.com/gpu.count" in (apiserver.get_object("nodes", NODE) or {})["metadata"]["labels"]

        await eventually(lambda: labelled() or task.done(), "the node sync running")
        assert node_events(apiserver) == []
        await admin_call(admin, "xid", target="1", xid=48)
        await eventually(lambda: node_events(apiserver, "GpuXidErrorIsNotHealthy"), "the XID's Event")
        (event,) = node_events(apiserver)
        assert event["type"] == "Warning"
        assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid(apiserver)}
        assert event["source"] == {"component": DEVICE_PLUGIN_COMPONENT, "host": NODE}
        assert event["reportingComponent"] == DEVICE_PLUGIN_COMPONENT and event["count"] == 1
        assert event["message"].startswith("GPU 1 (GPU-") and event["message"].endswith("): xid, XID 48: an XID event")
        await admin_call(admin, "xid", target="1", xid=48)
        await eventually(lambda: node_events(apiserver)[0]["count"] == 2, "the repeat counted on the same Event")
        assert len(node_events(apiserver)) == 1
        assert apiserver.count("create", "events") == 1 and apiserver.count("patch", "events") == 1
    finally:
        try:
            assert await stop_and_wait(stop, task) == [0]
        finally:
            await kubelet.stop()


async def start_driver(apiserver: FakeApiServer, root: Path, gpus: str = "2xh100-80gb") -> DraDriver:
    live = LiveInventory(load_inventory(InventoryInputs(node_name=NODE, gpus=(gpus,))))
    driver = DraDriver(live, KubeletPaths(root / "kubelet"), DraSettings(cdi_root=root / "cdi"), apiserver.client)
    await driver.start()
    await driver.wait_published()
    return driver


async def test_the_dra_driver_records_a_fault_and_its_recovery_from_any_path(apiserver, root):
    driver = await start_driver(apiserver, root)
    live = driver.live
    try:
        gpu = live.inventory.node.gpus[0]
        live.strike_gpu("0", GpuFault(kind="thermal", temperature=95))
        await eventually(lambda: node_events(apiserver, "GpuThermalWatchIsNotHealthy"), "the thermal Event")
        (hot,) = node_events(apiserver)
        assert (hot["type"], hot["source"]["component"]) == ("Warning", DRA_COMPONENT)
        assert hot["involvedObject"]["uid"] == node_uid(apiserver)
        assert hot["message"] == f"GPU 0 ({gpu.uuid}): thermal: temperature 95 C, clocks cut to 55% (thermal slowdown)"
        live.recover_gpu("0", "thermal")
        await eventually(lambda: node_events(apiserver, "GpuThermalWatchIsHealthy"), "the recovery's Event")
        (cool,) = node_events(apiserver, "GpuThermalWatchIsHealthy")
        assert cool["type"] == "Normal" and cool["message"].endswith("thermal recovered: the cause cleared")
        # Armed to strike after a call (after_calls): recorded when it strikes, not when it is armed.
        live.strike_gpu("1", GpuFault(kind="ecc-uncorrectable", after_calls=1))
        # A barrier: a fault struck after the arming is recorded after anything the arming would have recorded.
        live.strike_gpu("0", GpuFault(kind="power"))
        await eventually(lambda: node_events(apiserver, "GpuPowerWatchIsNotHealthy"), "the later fault's Event")
        assert not node_events(apiserver, "GpuMemWatchIsNotHealthy")
        live.note_call()
        await eventually(lambda: node_events(apiserver, "GpuMemWatchIsNotHealthy"), "the armed fault's Event")
        (ecc,) = node_events(apiserver, "GpuMemWatchIsNotHealthy")
        assert "ecc-uncorrectable, XIDs 94, 63: 1 uncorrectable ECC error(s), a row remap pending" in ecc["message"]
    finally:
        await driver.stop()


async def test_a_failing_api_server_neither_blocks_nor_stops_the_driver_and_is_logged_once(apiserver, root, caplog):
    driver = await start_driver(apiserver, root)
    live = driver.live
    driver.fault_events.retry_interval = 0.05
    caplog.set_level(logging.WARNING, logger="fakegpu.kube.node_events")
    apiserver.fail_next("create", "events", 500, times=4)
    try:
        live.strike_gpu("0", GpuFault(kind="power"))
        live.strike_gpu("1", GpuFault(kind="fabric"))
        await eventually(lambda: len(node_events(apiserver)) == 2, "both Events written once the server takes them")
        assert sorted(e["reason"] for e in node_events(apiserver)) == [
            "GpuFabricWatchIsNotHealthy",
            "GpuPowerWatchIsNotHealthy",
        ]
        failures = [r for r in caplog.records if "recording GPU fault Event" in r.getMessage()]
        assert len(failures) == 1, [r.getMessage() for r in failures]
        assert driver.fault_events.failures >= 4
    finally:
        await driver.stop()


async def test_a_server_without_events_is_skipped_after_one_log(root, caplog):
    """A server that does not serve Events (404), or RBAC that refuses them (403): each notice is given up,
    the daemon serves on."""
    caplog.set_level(logging.WARNING, logger="fakegpu.kube.node_events")
    with serving(NODE) as plain:
        driver = await start_driver(plain, root)
        try:
            for gpu in ("0", "1"):
                driver.live.strike_gpu(gpu, GpuFault(kind="nvlink"))
            await eventually(lambda: driver.fault_events.failures == 2, "both notices tried")
            await eventually(lambda: driver.fault_events.pending == 0, "and given up")
            assert len([r for r in caplog.records if "recording GPU fault Event" in r.getMessage()]) == 1
            assert driver.published
        finally:
            await driver.stop()
