"""The DRA driver against an in-process API server and the kubelet's DRA calls over real sockets."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from lightkube import AsyncClient

from fakegpu.dra import gpu_prepare
from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.dra.feature_gates import FeatureGates, parse_feature_gates
from fakegpu.dra.mps_control_files import control_daemon_id
from fakegpu.dra.prepared_claims import PreparedClaims
from fakegpu.kubeletapi.drahealth.v1alpha1 import api_pb2 as health_pb2
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.faults import FaultSpec
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from tests.apiserver import serving
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.cdi_runtime import claim_spec_path, read_spec_file, resolve
from tests.claim_builders import allocated_claim, gpu_config, opaque_config
from tests.dra_kubelet_client import get_info, health_stream, prepare, prepare_v1beta1, unprepare
from tests.eventually import eventually
from tests.integration.started_dra_drivers import StartedDrivers
from tests.slice_taints import as_sent

NODE = "node-a"
DRIVER = "gpu.nvidia.com"


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE) as server:
        yield server


DriverFactory = Callable[..., Any]


@pytest.fixture
async def make_driver(root: Path) -> AsyncIterator[DriverFactory]:
    drivers = StartedDrivers(root)

    async def make(
        server: FakeApiServer,
        gpus: str = "2xh100-80gb",
        *,
        layout: str | None = None,
        mig_mode: str = "static",
        minor: int | None = None,
        resync: float = 30.0,
        gates: FeatureGates | None = None,
    ) -> DraDriver:
        inputs = InventoryInputs(node_name=NODE, gpus=(gpus,), mig_layout=layout)
        live = LiveInventory(load_inventory(inputs))
        settings = DraSettings(
            cdi_root=root / "cdi",
            mig_mode=mig_mode,  # type: ignore[arg-type]
            server_minor=minor,
            resync_interval=resync,
            feature_gates=gates or FeatureGates(),
        )
        return await drivers.start(live, settings, server)

    make.stop_all = drivers.stop_all  # type: ignore[attr-defined]
    yield make
    await drivers.stop_all()


def slices(server: FakeApiServer) -> list[dict[str, Any]]:
    return [s for s in server.objects("resourceslices") if s["spec"]["driver"] == DRIVER]


def devices(server: FakeApiServer) -> list[str]:
    return sorted(d["name"] for s in slices(server) for d in s["spec"].get("devices", []))


# --- publishing --------------------------------------------------------------------------------------


async def test_publishes_valid_slices_owned_by_the_node(apiserver, make_driver):
    await make_driver(apiserver, "8xh100-80gb")
    (only,) = slices(apiserver)
    assert only["apiVersion"] == "resource.k8s.io/v1"
    assert only["metadata"]["name"].startswith(f"00000-{DRIVER}-{NODE}-")
    owner = only["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Node", NODE, True)
    assert owner["uid"] == apiserver.get_object("nodes", NODE)["metadata"]["uid"]
    assert only["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert devices(apiserver) == [f"gpu-{i}" for i in range(8)]


async def test_attribute_gates_reach_the_published_slices(apiserver, make_driver):
    """`fakegpu dra --feature-gates` reaches the slices as NVIDIA's gates reach its publisher
    (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/numa.go @ 0545e9e, after PR #1261, and
    deviceinfo.go @ 88b3014, after PR #1273): the NUMA node as a list, Fabric Manager partitions on full GPUs."""
    gates = parse_feature_gates("FabricManagerPartitioning=true,DRAListTypeAttributes=true")
    await make_driver(apiserver, "8xh100-80gb", gates=gates)
    published = [d for s in slices(apiserver) for d in s["spec"]["devices"]]
    assert len(published) == 8
    for device in published:
        attributes = device["attributes"]
        assert attributes["resource.kubernetes.io/numaNode"] == {"ints": [0]}
        assert attributes["gpuModuleID"] == {"int": int(device["name"].removeprefix("gpu-")) + 1}


@pytest.mark.parametrize(("minor", "expected_slices"), [(34, 8), (35, 9), (36, 9)])
async def test_dynamic_mig_layout_per_server_version(root, make_driver, minor, expected_slices):
    server = FakeApiServer(f"1.{minor}", feature_gates={"DRAPartitionableDevices": True}).start()
    try:
        server.add_node(NODE)
        driver = await make_driver(server, "8xh100-80gb", mig_mode="dynamic", minor=minor)
        assert driver.publisher.stats.errors == []
        got = slices(server)
        assert len(got) == expected_slices
        assert len(devices(server)) == 8 * 26
        assert {s["spec"]["pool"]["resourceSliceCount"] for s in got} == {expected_slices}
        assert server.rejections == []
    finally:
        await make_driver.stop_all()
        server.stop()


async def test_dropped_fields_are_reported_once_not_republished_forever(root, make_driver):
    """Kubernetes 1.35 without DRAPartitionableDevices drops the counters: say so, and settle."""
    server = FakeApiServer("1.35").start()
    try:
        server.add_node(NODE)
        driver = await make_driver(server, "2xh100-80gb", mig_mode="dynamic", minor=35)
        assert any("dropped fields" in e for e in driver.publisher.stats.errors)
        writes = server.count("create") + server.count("update")
        unchanged = driver.publisher.stats.unchanged
        driver.publisher.request_publish()
        await eventually(lambda: driver.publisher.stats.unchanged > unchanged, "the requested publish to look")
        assert server.count("create") + server.count("update") == writes
        assert driver.publisher.stats.unchanged >= 1
    finally:
        await make_driver.stop_all()
        server.stop()


def node_info(version: str) -> dict[str, str]:
    return {
        "architecture": "amd64",
        "bootID": "b",
        "containerRuntimeVersion": "containerd://2.1.0",
        "kernelVersion": "6.1.0",
        "kubeProxyVersion": version,
        "kubeletVersion": version,
        "machineID": "m",
        "operatingSystem": "linux",
        "osImage": "Debian GNU/Linux 12",
        "systemUUID": "s",
    }


def add_node_with_kubelet(server: FakeApiServer, version: str) -> None:
    server.create_direct(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE},
            "status": {"nodeInfo": node_info(version)},
        },
        validate=False,
    )


async def test_api_version_by_discovery(root, make_driver):
    """A 1.33 cluster: no v1; the kubelet version and discovery pick v1beta2 with no flags."""
    server = FakeApiServer("1.33").start()
    try:
        add_node_with_kubelet(server, "v1.33.4")
        driver = await make_driver(server, "1xl4")
        assert driver.publisher.options.api_version == "resource.k8s.io/v1beta2"
        assert {s["apiVersion"] for s in slices(server)} == {"resource.k8s.io/v1beta2"}
    finally:
        await make_driver.stop_all()
        server.stop()


async def test_v1beta1_only_cluster(root, make_driver):
    server = FakeApiServer("1.32", resource_api_versions=["v1beta1"]).start()
    try:
        add_node_with_kubelet(server, "v1.32.9")
        driver = await make_driver(server, "2xl4")
        assert driver.publisher.options.api_version == "resource.k8s.io/v1beta1"
        assert {s["apiVersion"] for s in slices(server)} == {"resource.k8s.io/v1beta1"}
        assert len(slices(server)[0]["spec"]["devices"]) == 2
    finally:
        await make_driver.stop_all()
        server.stop()


async def test_api_server_newer_than_its_kubelet_gets_split_slices(root, make_driver):
    """Skew: a 1.35 API server refuses the combined layout the 1.34 kubelet suggests; switch once."""
    server = FakeApiServer("1.35", feature_gates={"DRAPartitionableDevices": True}).start()
    try:
        add_node_with_kubelet(server, "v1.34.2")
        driver = await make_driver(server, "2xh100-80gb", mig_mode="dynamic")
        assert driver.publisher.options.server_minor == 35
        assert len(slices(server)) == 3  # one counters slice + one devices slice per GPU
        assert [r for r in server.rejections if "sharedCounters" not in r.message] == []
        server.rejections.clear()
    finally:
        await make_driver.stop_all()
        server.stop()


async def test_slices_wiped_by_the_kubelet_come_back(apiserver, make_driver):
    driver = await make_driver(apiserver, "2xh100-80gb")
    before = devices(apiserver)
    apiserver.delete_direct("resourceslices", field_selector=f"spec.nodeName={NODE},spec.driver={DRIVER}")
    assert slices(apiserver) == []
    await eventually(
        lambda: devices(apiserver) == before and driver.publisher.stats.publishes >= 2, "the slices republished", 3.0
    )
    assert slices(apiserver)[0]["spec"]["pool"]["generation"] == 2


async def test_stale_slices_of_this_driver_and_node_are_removed(apiserver, make_driver):
    driver = await make_driver(apiserver, "1xl4")
    stale = json.loads(json.dumps(slices(apiserver)[0]))
    stale["metadata"] = {"name": "zzzzz-stale", "ownerReferences": stale["metadata"]["ownerReferences"]}
    apiserver.create_direct(stale)
    other = json.loads(json.dumps(stale))
    other["metadata"]["name"] = "other-driver"
    other["spec"]["driver"] = "other.example.com"
    apiserver.create_direct(other)
    driver.publisher.request_publish()
    await eventually(lambda: len(slices(apiserver)) == 1, "the stale slice removed", 3.0)
    assert apiserver.get_object("resourceslices", "other-driver") is not None


HEALTH_GATE = parse_feature_gates("NVMLDeviceHealthCheck=true")


async def test_health_change_taints_the_device_and_bumps_the_generation(apiserver, make_driver):
    """NVIDIA's NVMLDeviceHealthCheck (kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/driver.go``
    ``deviceHealthEvents`` at commit 1191eaa): an XID republishes the pool with the device tainted."""
    driver = await make_driver(apiserver, "2xh100-80gb", gates=HEALTH_GATE)
    gpu1 = driver.live.inventory.node.gpus[1].uuid
    driver.live.inject_xid(gpu1, 79)

    def tainted() -> bool:
        found = {d["name"]: d.get("taints") for s in slices(apiserver) for d in s["spec"]["devices"]}
        return bool(found["gpu-1"]) and not found["gpu-0"]

    await eventually(tainted, "gpu-1 tainted", 3.0)
    (s,) = slices(apiserver)
    taint = next(d for d in s["spec"]["devices"] if d["name"] == "gpu-1")["taints"][0]
    assert (taint["key"], taint["value"], taint["effect"]) == ("gpu.nvidia.com/xid", "79", "NoSchedule")
    assert s["spec"]["pool"]["generation"] == 2
    driver.live.set_health(gpu1, True)
    await eventually(
        lambda: not any(d.get("taints") for s in slices(apiserver) for d in s["spec"]["devices"]), "no taint", 3.0
    )


async def test_non_fatal_xids_and_a_lost_gpu_taint_as_nvidia_does(apiserver, make_driver):
    """kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/device_health.go`` at commit bc3c4d8: an
    application XID taints with effect None, ERROR_GPU_IS_LOST taints every device of the node."""
    driver = await make_driver(apiserver, "2xh100-80gb", gates=HEALTH_GATE)
    driver.live.inject_xid("0", 43)

    def taints() -> dict[str, Any]:
        return {d["name"]: as_sent(d.get("taints")) for s in slices(apiserver) for d in s["spec"]["devices"]}

    await eventually(lambda: taints()["gpu-0"], "gpu-0 tainted", 3.0)
    assert taints() == {"gpu-0": [{"key": "gpu.nvidia.com/xid", "value": "43", "effect": "None"}], "gpu-1": None}
    driver.live.gpu_lost()
    lost = {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}
    await eventually(lambda: taints()["gpu-1"], "gpu-1 tainted", 3.0)
    assert taints() == {
        "gpu-0": [{"key": "gpu.nvidia.com/xid", "value": "43", "effect": "None"}, lost],
        "gpu-1": [lost],
    }


async def test_without_the_health_gate_nothing_is_tainted_and_no_health_service_is_offered(apiserver, make_driver):
    """NVIDIA's driver starts no health monitor and does not advertise DRAResourceHealth without
    NVMLDeviceHealthCheck (``cmd/gpu-kubelet-plugin/driver.go`` ``kubeletplugin.HealthService`` on main)."""
    driver = await make_driver(apiserver, "2xh100-80gb")
    driver.live.inject_xid("1", 79)
    generation = slices(apiserver)[0]["spec"]["pool"]["generation"]
    await driver.publisher.publish()  # what a change would have published
    (s,) = slices(apiserver)
    assert not any(d.get("taints") for d in s["spec"]["devices"])
    assert s["spec"]["pool"]["generation"] == generation
    info = await get_info(Path(driver.plugin.registration_socket))
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    async with grpc.aio.insecure_channel(f"unix://{driver.plugin.dra_socket}") as channel:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await health_stream(channel).read()
    assert failed.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_unreachable_api_server_does_not_block_the_kubelet_plugin(root):
    """Publishing retries in the background; the kubelet plugin serves at once."""
    server = FakeApiServer("1.36").start()
    url_config = server.lightkube_config()
    server.stop()
    live = LiveInventory(load_inventory(InventoryInputs(node_name=NODE, gpus=("1xt4",))))
    driver = DraDriver(
        live,
        KubeletPaths(root / "k"),
        DraSettings(cdi_root=root / "cdi"),
        lambda: AsyncClient(config=url_config, trust_env=False),
    )
    await driver.start()
    try:
        info = await get_info(Path(driver.plugin.registration_socket))
        assert info.type == "DRAPlugin"
        response = await prepare(driver.plugin.dra_socket, [("default", "c1", "u1"), ("default", "c2", "u2")])
        assert set(response.claims) == {"u1", "u2"}
        assert all("failed" in r.error for r in response.claims.values())
    finally:
        await driver.stop()


# --- kubelet plugin ----------------------------------------------------------------------------------


async def test_registration_info(apiserver, make_driver, root):
    driver = await make_driver(apiserver, gates=HEALTH_GATE)
    assert driver.plugin.registration_socket == str(root / "kubelet/plugins_registry/gpu.nvidia.com-reg.sock")
    info = await get_info(Path(driver.plugin.registration_socket))
    assert (info.type, info.name) == ("DRAPlugin", DRIVER)
    assert info.endpoint == str(root / "kubelet/plugins/gpu.nvidia.com/dra.sock")
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"]
    assert driver.plugin.registration_service.registered is True


async def test_prepare_and_unprepare_over_the_socket(apiserver, make_driver, root):
    driver = await make_driver(apiserver, "2xh100-80gb")
    claim = apiserver.create_direct(allocated_claim("c1", NODE, ["gpu-1"]))
    uid = claim["metadata"]["uid"]
    ref = ("default", "c1", uid)
    response = await prepare(driver.plugin.dra_socket, [ref])
    result = response.claims[uid]
    assert result.error == ""
    (device,) = result.devices
    assert (device.pool_name, device.device_name, list(device.request_names)) == (NODE, "gpu-1", ["gpu"])
    assert list(device.cdi_device_ids) == [f"k8s.gpu.nvidia.com/claim={uid}-gpu-1"]
    # NVIDIA's claim spec (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/cdi.go): YAML,
    # common NVIDIA_VISIBLE_DEVICES=void, per-device edits; resolved here as a CDI runtime would.
    spec_file = claim_spec_path(root / "cdi", uid)
    spec = read_spec_file(spec_file)
    assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
    gpu1 = driver.live.inventory.node.gpus[1].uuid
    assert spec["devices"] == [{"name": f"{uid}-gpu-1", "containerEdits": {"env": [f"FAKEGPU_VISIBLE_DEVICES={gpu1}"]}}]
    assert resolve(root / "cdi", list(device.cdi_device_ids)).env == {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "FAKEGPU_VISIBLE_DEVICES": gpu1,
    }
    again = await prepare(driver.plugin.dra_socket, [ref])
    assert again.claims[uid] == result, "prepare is idempotent"
    assert driver.preparer.prepares == 1
    done = await unprepare(driver.plugin.dra_socket, [ref])
    assert done.claims[uid].error == ""
    assert not spec_file.exists()
    assert PreparedClaims.in_dir(root / "kubelet/plugins/gpu.nvidia.com").load() == {}
    assert (await unprepare(driver.plugin.dra_socket, [ref])).claims[uid].error == ""


async def test_unprepare_is_logged_at_info_like_prepare(apiserver, make_driver, caplog):
    """NVIDIA's kubelet plugin logs both directions per claim (NVIDIA/k8s-dra-driver-gpu
    ``cmd/gpu-kubelet-plugin/driver.go``: ``UnprepareResourceClaims``); a reading on a real cluster showed
    fakegpu logging prepares only."""
    driver = await make_driver(apiserver, "2xh100-80gb")
    uid = apiserver.create_direct(allocated_claim("c1", NODE, ["gpu-1"]))["metadata"]["uid"]
    ref = ("default", "c1", uid)
    caplog.set_level(logging.INFO, logger="fakegpu.dra.gpu_prepare")
    await prepare(driver.plugin.dra_socket, [ref])
    await unprepare(driver.plugin.dra_socket, [ref])
    await unprepare(driver.plugin.dra_socket, [ref])
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "fakegpu.dra.gpu_prepare"]
    assert lines == [
        ("INFO", f"prepared claim default/c1 ({uid}): gpu-1"),
        ("INFO", f"unprepared claim default/c1 ({uid}): gpu-1"),
        ("INFO", f"unprepared claim default/c1 ({uid}): not prepared here"),
    ]


async def test_every_claim_gets_an_answer(apiserver, make_driver):
    driver = await make_driver(apiserver, "2xh100-80gb")
    good = apiserver.create_direct(allocated_claim("good", NODE, ["gpu-0"]))["metadata"]["uid"]
    foreign = apiserver.create_direct(allocated_claim("foreign", NODE, ["gpu-9"]))["metadata"]["uid"]
    response = await prepare(
        driver.plugin.dra_socket,
        [
            ("default", "good", good),
            ("default", "missing", "1234"),
            ("default", "foreign", foreign),
            ("default", "good", "wrong-uid"),
        ],
    )
    assert set(response.claims) == {good, "1234", foreign, "wrong-uid"}
    assert response.claims[good].error == ""
    assert response.claims["1234"].error == "claim default/missing not found"
    assert "gpu-9" in response.claims[foreign].error
    assert "got replaced" in response.claims["wrong-uid"].error


async def test_static_mig_claim_and_v1beta1(apiserver, make_driver):
    driver = await make_driver(apiserver, "1xh100-80gb", layout="all-3g.40gb")
    names = devices(apiserver)
    assert names == ["gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4"]
    uid = apiserver.create_direct(allocated_claim("m", NODE, [names[1]]))["metadata"]["uid"]
    response = await prepare_v1beta1(driver.plugin.dra_socket, [("default", "m", uid)])
    assert response.claims[uid].error == ""
    assert [d.device_name for d in response.claims[uid].devices] == [names[1]]


async def test_restart_between_prepare_started_and_completed(apiserver, make_driver, root, monkeypatch):
    """A crash after PrepareStarted: the next start rolls the claim back; preparing again works and the
    CDI files and the checkpoint agree."""
    driver = await make_driver(apiserver, "2xh100-80gb")
    uid = apiserver.create_direct(allocated_claim("c", NODE, ["gpu-0"]))["metadata"]["uid"]

    def crash(*args: Any, **kwargs: Any) -> None:
        raise OSError("simulated crash while writing the CDI spec")

    monkeypatch.setattr(gpu_prepare, "write_spec", crash)
    response = await prepare(driver.plugin.dra_socket, [("default", "c", uid)])
    assert "simulated crash" in response.claims[uid].error
    checkpoint = PreparedClaims.in_dir(root / "kubelet/plugins/gpu.nvidia.com")
    assert [c.uid for c in checkpoint.load().values() if not c.completed] == [uid]
    await driver.stop()
    monkeypatch.undo()

    restarted = await make_driver(apiserver, "2xh100-80gb")
    assert checkpoint.load() == {}
    response = await prepare(restarted.plugin.dra_socket, [("default", "c", uid)])
    assert response.claims[uid].error == ""
    stored = checkpoint.load()
    assert [c.uid for c in stored.values() if c.completed] == [uid]
    assert sorted(p for p in (root / "cdi").iterdir()) == [claim_spec_path(root / "cdi", uid)]


async def test_health_stream_pushes_changes(apiserver, make_driver):
    """With NVMLDeviceHealthCheck, as NVIDIA streams it on main (kubernetes-sigs/dra-driver-nvidia-gpu
    ``cmd/gpu-kubelet-plugin/device_health_status.go`` at commit 46c7cc2): NVIDIA's messages, Unknown for an
    unmonitored GPU."""
    driver = await make_driver(apiserver, "2xh100-80gb", gates=HEALTH_GATE)
    async with grpc.aio.insecure_channel(f"unix://{driver.plugin.dra_socket}") as channel:
        stream = health_stream(channel)
        first = await stream.read()
        assert isinstance(first, health_pb2.NodeWatchResourcesResponse)
        assert [(d.device.device_name, d.health) for d in first.devices] == [
            ("gpu-0", health_pb2.HEALTHY),
            ("gpu-1", health_pb2.HEALTHY),
        ]
        driver.live.inject_xid("1", 79)
        second = await asyncio.wait_for(stream.read(), 2.0)
        assert isinstance(second, health_pb2.NodeWatchResourcesResponse)
        assert [(d.device.device_name, d.health, d.message) for d in second.devices] == [
            ("gpu-0", health_pb2.HEALTHY, ""),
            ("gpu-1", health_pb2.UNHEALTHY, "critical XID 79 reported by NVML"),
        ]
        driver.live.unmonitored(driver.live.inventory.node.gpus[0].uuid)
        third = await asyncio.wait_for(stream.read(), 2.0)
        assert isinstance(third, health_pb2.NodeWatchResourcesResponse)
        assert (third.devices[0].health, third.devices[0].message) == (
            health_pb2.UNKNOWN,
            "device health is not monitored",
        )
        stream.cancel()


async def test_health_stream_resends_on_a_heartbeat_without_changes(apiserver, make_driver):
    """The kubelet takes health older than its check timeout as Unknown, so NVIDIA's driver re-sends the report
    on its monitor's heartbeat with fresh timestamps (kubernetes-sigs/dra-driver-nvidia-gpu
    ``cmd/gpu-kubelet-plugin/device_health.go`` ``monitorHeartbeatInterval`` at commit bc3c4d8)."""
    driver = await make_driver(apiserver, "2xh100-80gb", gates=HEALTH_GATE)
    driver.health.heartbeat = 0.2
    async with grpc.aio.insecure_channel(f"unix://{driver.plugin.dra_socket}") as channel:
        stream = health_stream(channel)
        first = await stream.read()
        again = await asyncio.wait_for(stream.read(), 2.0)
        assert isinstance(first, health_pb2.NodeWatchResourcesResponse)
        assert isinstance(again, health_pb2.NodeWatchResourcesResponse)
        assert [(d.device.device_name, d.health) for d in again.devices] == [
            (d.device.device_name, d.health) for d in first.devices
        ]
        assert again.devices[0].last_updated_time >= first.devices[0].last_updated_time
        stream.cancel()


async def test_deleted_sockets_are_served_again(apiserver, make_driver):
    driver = await make_driver(apiserver)
    Path(driver.plugin.registration_socket).unlink()
    driver.plugin.dra_socket.unlink()
    await eventually(
        lambda: Path(driver.plugin.registration_socket).exists() and driver.plugin.dra_socket.exists(),
        "both sockets served again",
    )
    info = await get_info(Path(driver.plugin.registration_socket))
    assert info.name == DRIVER


async def test_mps_claims_need_the_mps_support_gate(apiserver, make_driver):
    """kubernetes-sigs/dra-driver-nvidia-gpu api/nvidia.com/resource/v1beta1/sharing.go: MPSSupport is off by
    default, and the pod's NodePrepareResources error names the gate."""
    driver = await make_driver(apiserver, "1xh100-80gb")
    config = [opaque_config(gpu_config({"strategy": "MPS"}))]
    uid = apiserver.create_direct(allocated_claim("mps", NODE, ["gpu-0"], config=config))["metadata"]["uid"]
    response = await prepare(driver.plugin.dra_socket, [("default", "mps", uid)])
    assert 'but the "MPSSupport" feature gate is not enabled' in response.claims[uid].error


async def test_opaque_mps_config_reaches_the_cdi_spec(apiserver, make_driver, root):
    driver = await make_driver(apiserver, "1xh100-80gb", gates=parse_feature_gates("MPSSupport=true"))
    mps = {"defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "10Gi"}
    config = [opaque_config(gpu_config({"strategy": "MPS", "mpsConfig": mps}))]
    uid = apiserver.create_direct(allocated_claim("mps", NODE, ["gpu-0"], config=config))["metadata"]["uid"]
    response = await prepare(driver.plugin.dra_socket, [("default", "mps", uid)])
    assert response.claims[uid].error == ""
    # NVIDIA's MPS edits (cmd/gpu-kubelet-plugin/sharing.go GetCDIContainerEdits): the pipe directory
    # variable and the shm and pipe mounts of the claim's control daemon directories, which exist.
    (device,) = response.claims[uid].devices
    edits = resolve(root / "cdi", list(device.cdi_device_ids))
    gpu0 = driver.live.inventory.node.gpus[0].uuid
    assert edits.env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert edits.env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
    assert edits.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert edits.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"{gpu0}=10240M"
    daemon_dir = root / "kubelet/plugins/gpu.nvidia.com/mps" / control_daemon_id(uid, [gpu0])
    assert [(m["containerPath"], m["hostPath"], m["options"]) for m in edits.mounts] == [
        ("/dev/shm", str(daemon_dir / "shm"), ["rw", "nosuid", "nodev", "bind"]),
        ("/tmp/nvidia-mps", str(daemon_dir / "pipe"), ["rw", "nosuid", "nodev", "bind"]),
    ]
    assert all(Path(m["hostPath"]).is_dir() for m in edits.mounts)
    assert (await unprepare(driver.plugin.dra_socket, [("default", "mps", uid)])).claims[uid].error == ""
    assert not daemon_dir.exists()
    response = await prepare(driver.plugin.dra_socket, [("default", "mps", uid)])
    assert response.claims[uid].error == ""
    bad = [opaque_config(gpu_config({"strategy": "Magic"}), requests=())]
    bad_uid = apiserver.create_direct(allocated_claim("bad", NODE, ["gpu-0"], config=bad))["metadata"]["uid"]
    response = await prepare(driver.plugin.dra_socket, [("default", "bad", bad_uid)])
    assert "Magic" in response.claims[bad_uid].error


async def test_registry_and_plugin_dirs_are_configurable(apiserver, root):
    live = LiveInventory(load_inventory(InventoryInputs(node_name=NODE, gpus=("1xt4",))))
    paths = KubeletPaths(root / "k", registry_dir=root / "reg", plugins_dir=root / "plg")
    driver = DraDriver(
        live,
        paths,
        DraSettings(cdi_root=root / "cdi"),
        apiserver.client,
    )
    await driver.start()
    try:
        assert (root / "reg" / "gpu.nvidia.com-reg.sock").exists()
        assert (root / "plg" / "gpu.nvidia.com" / "dra.sock").exists()
        info = await get_info(root / "reg" / "gpu.nvidia.com-reg.sock")
        assert info.endpoint == str(root / "plg" / "gpu.nvidia.com" / "dra.sock")
    finally:
        await driver.stop()


async def test_injected_prepare_failure_is_a_grpc_error(apiserver, make_driver):
    driver = await make_driver(apiserver, "1xt4")
    uid = apiserver.create_direct(allocated_claim("c", NODE, ["gpu-0"]))["metadata"]["uid"]
    driver.live.faults.inject("NodePrepareResources", FaultSpec(code="UNAVAILABLE", message="injected outage"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await prepare(driver.plugin.dra_socket, [("default", "c", uid)])
    assert (err.value.code(), err.value.details()) == (grpc.StatusCode.UNAVAILABLE, "injected outage")
    assert (await prepare(driver.plugin.dra_socket, [("default", "c", uid)])).claims[uid].error == ""


async def test_corrupted_checkpoint_does_not_stop_the_driver(apiserver, make_driver, root):
    plugin_dir = root / "kubelet/plugins/gpu.nvidia.com"
    plugin_dir.mkdir(parents=True)
    (plugin_dir / "checkpoint.json").write_text('{"checksum": "sha256:00", "data": {"truncated')
    driver = await make_driver(apiserver, "1xt4")
    uid = apiserver.create_direct(allocated_claim("c", NODE, ["gpu-0"]))["metadata"]["uid"]
    response = await prepare(driver.plugin.dra_socket, [("default", "c", uid)])
    assert "checkpoint" in response.claims[uid].error


async def test_missing_cdi_spec_of_a_prepared_claim_is_written_again(apiserver, make_driver, root):
    """/var/run/cdi is a tmpfs: after a reboot the checkpoint remains and the spec must come back."""
    driver = await make_driver(apiserver, "1xt4")
    uid = apiserver.create_direct(allocated_claim("c", NODE, ["gpu-0"]))["metadata"]["uid"]
    first = await prepare(driver.plugin.dra_socket, [("default", "c", uid)])
    spec = claim_spec_path(root / "cdi", uid)
    content = spec.read_text()
    spec.unlink()
    again = await prepare(driver.plugin.dra_socket, [("default", "c", uid)])
    assert again.claims[uid] == first.claims[uid]
    assert spec.read_text() == content


async def test_fakegpu_dra_command_publishes_serves_and_cleans_up(root, apiserver):
    kubeconfig = apiserver.kubeconfig(root / "kubeconfig")
    kubelet = root / "k"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fakegpu",
            "dra",
            "--node-name",
            NODE,
            "--gpus",
            "2xh100-80gb",
            "--mig-layout",
            "all-3g.40gb",
            "--kubeconfig",
            str(kubeconfig),
            "--kubelet-dir",
            str(kubelet),
            "--cdi-root",
            str(root / "cdi"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await eventually(
            lambda: proc.poll() is not None or len(devices(apiserver)) >= 4,
            "fakegpu dra to publish",
            20.0,
            interval=0.1,
        )
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert (kubelet / "plugins_registry" / "gpu.nvidia.com-reg.sock").exists()
        assert (kubelet / "plugins" / "gpu.nvidia.com" / "dra.sock").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    assert not (kubelet / "plugins_registry" / "gpu.nvidia.com-reg.sock").exists()
    assert not (kubelet / "plugins" / "gpu.nvidia.com" / "dra.sock").exists()
