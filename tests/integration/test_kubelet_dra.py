"""The kubelet emulator's DRA face against fakegpu's own DRA driver, over real sockets.

What a real kubelet does (kubernetes ``pkg/kubelet/cm/dra/manager.go`` and
``pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go``, v1.36, and the calls a real
kubelet v1.36.2 made to a DRA test driver): GetInfo and NotifyRegistrationStatus on the plugin's
registration socket, nothing else until a pod needs a claim; one NodePrepareResources per pod and driver
carrying only claim identities; one NodeUnprepareResources once no pod uses the claim; the claim info
cache in ``dra_manager_state`` keeps prepared claims across a kubelet restart.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import grpc
import pytest
import yaml
from lightkube import AsyncClient

from fakegpu.cli.main import main
from fakegpu.control.server import AdminServer
from fakegpu.dra.daemon import DraDriver
from fakegpu.dra.prepared_claims import PreparedClaims
from fakegpu.kubelet.admin_ops import kubelet_ops
from fakegpu.kubelet.dra_manager import Backoff
from fakegpu.kubelet.dra_plugins import DraPluginRegistry, choose_service
from fakegpu.kubelet.dra_state import DRA_STATE_NAME
from fakegpu.kubelet.emulator import CONTAINER_CREATING, KubeletEmulator
from fakegpu.kubelet.pod_claims import PodClaim, parse_claim
from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2 as reg_pb2
from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from fakegpu.sharing.faults import FaultSpec
from tests.apiserver import serving
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.claim_builders import DRIVER, allocated_claim
from tests.eventually import eventually
from tests.reliability.raw_calls import start_dra_driver

NODE = "node-a"
FAST = Backoff(initial=0.05, cap=0.2)


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE) as server:
        yield server


@pytest.fixture
async def driver(apiserver: FakeApiServer, root: Path) -> AsyncIterator[DraDriver]:
    """``fakegpu dra`` in this process, serving under ``root/kubelet`` where the emulator watches."""
    dra = await start_dra_driver(apiserver, root, node=NODE, gpus="2xh100-80gb")
    yield dra
    await dra.stop()


async def started_kubelet(root: Path, api_client: AsyncClient | None = None) -> KubeletEmulator:
    kubelet = KubeletEmulator(root / "kubelet", prepare_backoff=FAST, api_client=api_client)
    await kubelet.start()
    await eventually(lambda: DRIVER in kubelet.dra_plugins.plugins, "the DRA driver to register with the kubelet")
    return kubelet


@pytest.fixture
async def kubelet(root: Path, driver: DraDriver) -> AsyncIterator[KubeletEmulator]:
    kubelet = await started_kubelet(root)
    yield kubelet
    await kubelet.stop()


def prepared_by_driver(root: Path) -> set[str]:
    """Claim UIDs in the driver's own checkpoint: what it has prepared and not unprepared."""
    return set(PreparedClaims.in_dir(root / "kubelet/plugins" / DRIVER).load())


def claim(apiserver: FakeApiServer, name: str, devices: list[str], pods: Sequence[str] = ()) -> PodClaim:
    obj = apiserver.create_direct(
        allocated_claim(name, NODE, devices, reserved_for=[{"resource": "pods", "name": p, "uid": p} for p in pods])
    )
    return PodClaim("default", name, obj["metadata"]["uid"], (DRIVER,))


# --- registration --------------------------------------------------------------------------------------


async def test_the_driver_registers_over_v1_and_goes_with_its_socket(kubelet, driver):
    (plugin,) = kubelet.dra_plugins.plugins[DRIVER]
    assert plugin.service == "v1.DRAPlugin"  # the driver lists v1.DRAPlugin first
    assert plugin.endpoint == driver.plugin.dra_socket
    assert ("register", "DRAPlugin", DRIVER) in kubelet.watcher.events
    assert kubelet.dra_plugins.calls == []  # nothing is called until a pod needs a claim
    await driver.stop()
    await eventually(lambda: DRIVER not in kubelet.dra_plugins.plugins, "the driver to be deregistered")


def test_service_choice_and_the_kubelets_refusals():
    """``validateSupportedServices``: the first entry the kubelet supports; its texts otherwise."""
    assert choose_service(["v1beta1.DRAPlugin", "v1.DRAPlugin"]) == "v1beta1.DRAPlugin"
    assert choose_service(["v1alpha1.DRAResourceHealth", "v1.DRAPlugin"]) == "v1.DRAPlugin"
    with pytest.raises(ValueError, match=r"^empty list of supported gRPC services \(aka supported versions\)$"):
        choose_service([])
    registry = DraPluginRegistry()
    with pytest.raises(ValueError) as refused:
        registry.register("x.example.com", Path("/p/dra.sock"), ["v1alpha3.NodeService"])
    assert str(refused.value) == (
        "invalid supported gRPC versions of DRA driver plugin x.example.com at endpoint /p/dra.sock: none of "
        'services supported by the plugin (["v1alpha3.NodeService"]) are supported by the kubelet '
        '(["v1.DRAPlugin" "v1beta1.DRAPlugin"])'
    )
    registry.register("x.example.com", Path("/p/dra.sock"), ["v1.DRAPlugin"])
    with pytest.raises(
        ValueError, match=r"endpoint /p/dra\.sock already registered for DRA driver plugin x\.example\.com"
    ):
        registry.register("x.example.com", Path("/p/dra.sock"), ["v1.DRAPlugin"])
    with pytest.raises(LookupError, match=r"^DRA driver y\.example\.com is not registered$"):
        registry.get("y.example.com")


class _OldPlugin(reg_grpc.RegistrationServicer):
    def __init__(self) -> None:
        self.status: list[reg_pb2.RegistrationStatus] = []

    async def GetInfo(self, request, context):
        return reg_pb2.PluginInfo(
            type="DRAPlugin", name="old.example.com", endpoint="/nowhere/dra.sock", supported_versions=["v1alpha3"]
        )

    async def NotifyRegistrationStatus(self, request, context):
        self.status.append(request)
        return reg_pb2.RegistrationStatusResponse()


async def test_a_plugin_without_a_supported_service_is_told_why(root):
    async with KubeletEmulator(root / "kubelet") as kubelet:
        plugin = _OldPlugin()
        server = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(plugin, server)
        server.add_insecure_port(f"unix://{kubelet.paths.plugins_registry / 'old.example.com-reg.sock'}")
        await server.start()
        try:
            await eventually(lambda: plugin.status, "NotifyRegistrationStatus")
        finally:
            await server.stop(0)
        (status,) = plugin.status
        assert not status.plugin_registered
        assert "none of services supported by the plugin" in status.error
        assert kubelet.dra_plugins.plugins == {}


# --- pods with claims ----------------------------------------------------------------------------------


async def test_a_pod_gets_its_claims_cdi_devices_and_deletion_unprepares(apiserver, kubelet, root):
    c1 = claim(apiserver, "c1", ["gpu-1"])
    pod = await kubelet.run_pod("pod-1", {"main": {}}, claims=[c1])
    assert pod.phase == "Running", pod
    assert pod.prepare_error == ""
    assert list(pod.cdi_devices) == [c1.uid]
    assert pod.cdi_devices[c1.uid] and all("=" in i for i in pod.cdi_devices[c1.uid])
    assert prepared_by_driver(root) == {c1.uid}
    assert kubelet.dra_plugins.calls == [(DRIVER, "NodePrepareResources", (c1.uid,))]
    state = json.loads((root / "kubelet" / DRA_STATE_NAME).read_text())
    (entry,) = state["Entries"]
    assert (entry["ClaimUID"], entry["PodUIDs"], entry["Prepared"]) == (c1.uid, ["pod-1"], True)
    assert entry["DriverState"][DRIVER]["Devices"][0]["DeviceName"] == "gpu-1"

    done = await kubelet.remove_pod("pod-1")
    assert [c.uid for c in done] == [c1.uid]
    assert kubelet.dra_plugins.calls[-1] == (DRIVER, "NodeUnprepareResources", (c1.uid,))
    assert prepared_by_driver(root) == set()
    assert json.loads((root / "kubelet" / DRA_STATE_NAME).read_text()) == {"Entries": []}


async def test_two_claims_of_one_pod_go_in_one_call(apiserver, kubelet):
    a, b = claim(apiserver, "a", ["gpu-0"]), claim(apiserver, "b", ["gpu-1"])
    pod = await kubelet.run_pod("pod-1", {"main": {}}, claims=[a, (b.namespace, b.name, b.uid, DRIVER)])
    assert pod.phase == "Running"
    assert set(pod.cdi_devices) == {a.uid, b.uid}
    assert kubelet.dra_plugins.calls == [(DRIVER, "NodePrepareResources", (a.uid, b.uid))]


async def test_a_shared_claim_is_prepared_once_and_unprepared_after_its_last_pod(apiserver, kubelet, root):
    shared = claim(apiserver, "shared", ["gpu-0"])
    first = await kubelet.run_pod("pod-1", {"main": {}}, claims=[shared])
    second = await kubelet.run_pod("pod-2", {"main": {}}, claims=[shared])
    assert first.cdi_devices == second.cdi_devices != {}
    assert [m for _d, m, _u in kubelet.dra_plugins.calls] == ["NodePrepareResources"]

    assert await kubelet.remove_pod("pod-1") == []
    assert prepared_by_driver(root) == {shared.uid}
    assert [m for _d, m, _u in kubelet.dra_plugins.calls] == ["NodePrepareResources"]

    kubelet.delete_pod("pod-2")  # the synchronous delete: unprepared in the background
    await eventually(lambda: prepared_by_driver(root) == set(), "the shared claim to be unprepared")
    assert [m for _d, m, _u in kubelet.dra_plugins.calls] == ["NodePrepareResources", "NodeUnprepareResources"]


async def test_a_failing_unprepare_is_retried_in_the_background_until_it_works(apiserver, kubelet, driver, root):
    c1 = claim(apiserver, "c1", ["gpu-0"])
    assert (await kubelet.run_pod("pod-1", {"main": {}}, claims=[c1])).phase == "Running"
    assert kubelet.background_idle()
    driver.live.faults.inject("NodeUnprepareResources", FaultSpec(times=2, code="UNAVAILABLE", message="busy"))
    assert await kubelet.remove_pod("pod-1") == []  # the first try failed: the claim waits for the retries
    assert not kubelet.background_idle()
    await eventually(kubelet.background_idle, "the kubelet's unprepare retries to end")
    assert [m for _d, m, _u in kubelet.dra_plugins.calls].count("NodeUnprepareResources") == 3
    assert prepared_by_driver(root) == set()
    assert kubelet.dra.claims == {}


async def test_a_failing_prepare_keeps_the_pod_creating_until_the_allocation_is_fixed(apiserver, kubelet):
    obj = apiserver.create_direct(allocated_claim("bad", NODE, ["gpu-9"]))
    bad = PodClaim("default", "bad", obj["metadata"]["uid"], (DRIVER,))
    pod = await kubelet.run_pod("pod-1", {"main": {}}, claims=[bad])
    assert (pod.phase, pod.reason) == ("Pending", CONTAINER_CREATING)
    assert pod.prepare_error.startswith(
        "Failed to prepare dynamic resources: prepare dynamic resources: "
        "NodePrepareResources failed for ResourceClaim bad: "
    ), pod.prepare_error
    assert "gpu-9" in pod.prepare_error
    assert pod.cdi_devices == {}
    await eventually(lambda: pod.prepare_attempts >= 3, "the kubelet to try again")

    fixed = allocated_claim("bad", NODE, ["gpu-1"])
    fixed["metadata"] = obj["metadata"]
    apiserver.update_direct(fixed)
    await eventually(lambda: pod.phase == "Running", "the pod to start once its claim can be prepared")
    assert pod.prepare_error == ""
    assert pod.reason == ""
    assert list(pod.cdi_devices) == [bad.uid]


async def test_deleting_a_pod_that_never_started_stops_the_retries(apiserver, kubelet):
    obj = apiserver.create_direct(allocated_claim("bad", NODE, ["gpu-9"]))
    pod = await kubelet.run_pod("pod-1", {"main": {}}, claims=[("default", "bad", obj["metadata"]["uid"], DRIVER)])
    assert pod.reason == CONTAINER_CREATING
    await eventually(lambda: pod.prepare_attempts >= 2, "a retry")
    assert not kubelet.background_idle(), "the pod's prepare retries run in the background"
    done = await kubelet.remove_pod("pod-1")
    assert [c.name for c in done] == ["bad"]  # the kubelet unprepares what it may have half prepared
    assert kubelet.dra.claims == {}
    calls = list(kubelet.dra_plugins.calls)
    # The barrier: the kubelet's background retries (the pod's prepare retries, cancelled by its deletion,
    # and any unprepare retries) have ended, so none is left running to call again.
    await eventually(kubelet.background_idle, "the kubelet's prepare and unprepare retries to end")
    assert kubelet.dra_plugins.calls == calls
    assert calls[-1][1] == "NodeUnprepareResources"


async def test_an_unregistered_driver_is_named(root):
    async with KubeletEmulator(root / "kubelet", prepare_backoff=FAST) as kubelet:
        pod = await kubelet.run_pod("pod-1", {"main": {}}, claims=[("default", "c", "u1", "none.example.com")])
        assert pod.prepare_error == (
            "Failed to prepare dynamic resources: prepare dynamic resources: "
            "DRA driver none.example.com is not registered"
        )
        assert kubelet.dra.claims == {}  # the validation pass changes nothing
        with pytest.raises(ValueError, match="name the drivers of its allocation"):
            await kubelet.run_pod("pod-2", {"main": {}}, claims=[("default", "c", "u1")])


async def test_prepared_claims_survive_a_kubelet_restart(apiserver, driver, root):
    c1 = claim(apiserver, "c1", ["gpu-0"])
    kubelet = await started_kubelet(root)
    try:
        await kubelet.run_pod("pod-1", {"main": {}}, claims=[c1])
        await kubelet.stop()
        fresh = await started_kubelet(root)  # a new process: pods and claims from its files
        try:
            pod = fresh.pods["pod-1"]
            assert pod.restored and pod.phase == "Running"
            assert pod.claims == (c1,)
            assert list(pod.cdi_devices) == [c1.uid]
            assert fresh.dra_plugins.calls == []  # not prepared again
            await fresh.remove_pod("pod-1")
            assert fresh.dra_plugins.calls == [(DRIVER, "NodeUnprepareResources", (c1.uid,))]
            assert prepared_by_driver(root) == set()
        finally:
            await fresh.stop()
    finally:
        await kubelet.stop()


async def test_claims_read_from_the_api_server(apiserver, driver, root):
    """With an API client the kubelet reads the claim: its drivers and whether the pod may use it."""
    obj = apiserver.create_direct(
        allocated_claim("api", NODE, ["gpu-1"], reserved_for=[{"resource": "pods", "name": "p", "uid": "pod-1"}])
    )
    client = apiserver.client()
    kubelet = await started_kubelet(root, api_client=client)
    try:
        pod = await kubelet.run_pod("pod-1", {"main": {}}, name="p", claims=[("default", "api", "")])
        assert pod.phase == "Running", pod.prepare_error
        assert list(pod.cdi_devices) == [obj["metadata"]["uid"]]
        stranger = await kubelet.run_pod("pod-2", {"main": {}}, name="q", claims=[("default", "api", "")])
        assert stranger.prepare_error == (
            "Failed to prepare dynamic resources: prepare dynamic resources: pod q (pod-2) is not allowed to use "
            f"ResourceClaim api ({obj['metadata']['uid']})"
        )
    finally:
        await kubelet.stop()
        await client.close()


def test_claim_option_syntax():
    assert parse_claim("ns/c/u1=a.com,b.com") == PodClaim("ns", "c", "u1", ("a.com", "b.com"))
    assert parse_claim("ns/c") == PodClaim("ns", "c", "", ())
    with pytest.raises(ValueError, match="expected NAMESPACE/NAME/UID=DRIVER"):
        parse_claim("c=a.com")
    with pytest.raises(ValueError, match="a driver name after '=' is empty"):
        parse_claim("ns/c/u=a.com,")


# --- fakegpu ctl ---------------------------------------------------------------------------------------


async def test_ctl_runs_a_pod_with_a_claim_and_shows_its_cdi_devices_and_errors(apiserver, kubelet, root, capsys):
    server = AdminServer(root / "kubelet" / "fakegpu-kubelet.sock", kubelet_ops(kubelet))
    await server.start()
    try:
        c1 = claim(apiserver, "c1", ["gpu-0"])
        base = ["ctl", "--socket", str(server.path)]
        run = [*base, "run-pod", "infer", "--claim", f"default/c1/{c1.uid}={DRIVER}", "-o", "json"]
        assert await asyncio.to_thread(main, run) == 0
        pod = json.loads(capsys.readouterr().out)
        (shown,) = pod["claims"]
        assert shown["uid"] == c1.uid and shown["prepared"] and shown["drivers"] == [DRIVER]
        assert shown["cdi_devices"] == kubelet.dra.claims[("default", "c1")].cdi_device_ids() != []
        assert pod["phase"] == "Running" and pod["prepare_error"] == ""

        assert await asyncio.to_thread(main, [*base, "pods", "-o", "yaml"]) == 0
        assert yaml.safe_load(capsys.readouterr().out) == [pod]
        assert await asyncio.to_thread(main, [*base, "pods"]) == 0
        table = capsys.readouterr().out
        assert f"claim default/c1 ({c1.uid}): {DRIVER}, prepared" in table
        assert f"cdi      {shown['cdi_devices'][0]}" in table

        bad = apiserver.create_direct(allocated_claim("bad", NODE, ["gpu-9"]))["metadata"]["uid"]
        stuck = [*base, "run-pod", "stuck", "--claim", f"default/bad/{bad}={DRIVER}"]
        assert await asyncio.to_thread(main, stuck) == 0  # admitted: its containers wait
        out = capsys.readouterr().out
        assert "Pending (ContainerCreating" in out
        assert "FailedPrepareDynamicResources (attempt 1): Failed to prepare dynamic resources:" in out
        assert "gpu-9" in out

        assert await asyncio.to_thread(main, [*base, "status"]) == 0
        status = capsys.readouterr().out
        assert f"DRA driver {DRIVER}: v1.DRAPlugin at {kubelet.dra_plugins.get(DRIVER).endpoint}" in status
        assert f"claim default/c1 ({c1.uid}): prepared, 1 pod(s)" in status

        assert await asyncio.to_thread(main, [*base, "delete-pod", "infer"]) == 0
        assert capsys.readouterr().out.strip() == "pod default/infer deleted; unprepared claims default/c1"
        assert prepared_by_driver(root) == set()

        wrong = [*base, "run-pod", "x", "--claim", "c1=gpu.nvidia.com"]
        assert await asyncio.to_thread(main, wrong) == 1
        assert "claims 'c1=gpu.nvidia.com': expected NAMESPACE/NAME/UID=DRIVER" in capsys.readouterr().err
    finally:
        await server.stop()
