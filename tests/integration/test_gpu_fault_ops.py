"""Every GPU fault kind through the admin socket (``gpu-fault``, ``recover``) of real daemons, seen where the
kubelet sees it: the device plugin's ListAndWatch (the kubelet emulator's device health and allocatable), the
DRA driver's ResourceSlice taints (the in-process API server) and its health stream (the kubelet's
``NodeWatchResources`` call over the driver's socket).

The expectations are NVIDIA's, read from NVIDIA/k8s-device-plugin ``internal/rm/health.go`` @ 02597b9 (only
XID critical-error events count; application XIDs and ``DP_DISABLE_HEALTHCHECKS`` ignored; an error waiting for
events marks every device; nothing marks a device healthy again) and kubernetes-sigs/dra-driver-nvidia-gpu
``cmd/gpu-kubelet-plugin/device_health.go`` @ 15a116f (``healthEventToTaint``: ``gpu.nvidia.com/xid=<XID>``
NoSchedule, None for the skipped XIDs; ``gpu.nvidia.com/gpu-lost`` NoSchedule on every device; only XID events
are processed, ECC event types are skipped, so ECC and NVLink faults act through their XIDs).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from fakegpu.control.client import admin_call
from fakegpu.control.protocol import AdminError
from fakegpu.kubeletapi.drahealth.v1alpha1 import api_pb2 as health_pb2
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.claim_builders import allocated_claim
from tests.dra_kubelet_client import health_stream, prepare, unprepare
from tests.eventually import eventually
from tests.integration.conftest import ADMIN_NODE as NODE

GPU = "nvidia.com/gpu"
DRIVER = "gpu.nvidia.com"
TIME_SLICED = {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": GPU, "replicas": 2}]}}}


def taints(server: FakeApiServer) -> dict[str, list[str]]:
    """Each published device's taints as ``key=value:effect``."""
    out = {}
    for s in server.objects("resourceslices"):
        for d in s["spec"].get("devices", []):
            out[d["name"]] = [
                f"{t['key']}{'=' + t['value'] if t.get('value') else ''}:{t['effect']}" for t in d.get("taints", [])
            ]
    return out


HealthReport = dict[str, tuple[int, str]]


async def stream_until(
    stream: Any, wanted: Callable[[HealthReport], bool], what: str, timeout: float = 3.0
) -> HealthReport:
    """Read the health stream until a report satisfies ``wanted``; the report, or a failure with the last one."""
    last: HealthReport = {}

    async def read() -> HealthReport:
        nonlocal last
        while True:
            response = await stream.read()
            assert isinstance(response, health_pb2.NodeWatchResourcesResponse)
            last = {d.device.device_name: (d.health, d.message) for d in response.devices}
            if wanted(last):
                return last

    try:
        return await asyncio.wait_for(read(), timeout)
    except TimeoutError:
        pytest.fail(f"the health stream never showed {what}; last report: {last}")


# --- the device plugin: ListAndWatch health per kind ---------------------------------------------------

FATAL_ON_THE_GPU = [
    ({"kind": "xid", "xid": 79}, [79]),
    ({"kind": "off-bus"}, [79]),
    ({"kind": "ecc-uncorrectable"}, [94, 63]),
    ({"kind": "ecc-uncorrectable", "contained": False}, [95, 63]),
    ({"kind": "ecc-correctable", "count": 5000}, [92]),
    ({"kind": "nvlink", "link": 3}, [74]),
]


@pytest.mark.parametrize(("fault", "xids"), FATAL_ON_THE_GPU, ids=str)
async def test_a_fatal_kind_makes_every_replica_of_the_gpu_unhealthy_and_a_reset_does_not_heal(
    plugin_admin, fault, xids
):
    """NVIDIA/k8s-device-plugin ``internal/rm/health.go`` @ 02597b9: the kind's XIDs are critical-error events
    not in the ignored list, so the GPU's devices go Unhealthy in ListAndWatch; a GPU reset ends the fault on
    the GPU but the plugin never sends Healthy again. Every time-sliced replica goes as with the fix of #1929
    (PR #1930, merged after v0.20.1); v0.20.x keeps one device per GPU (``parentToDeviceMap``) and marks one,
    which ``--bug-compat health-one-device-per-gpu`` reproduces (tests/integration/test_bug_modes.py)."""
    node, sock = await plugin_admin("2xh100-80gb", config=TIME_SLICED)
    gpu1 = node.inventory.node.gpus[1].uuid
    answer = await admin_call(sock, "gpu-fault", gpu="1", **fault)
    assert [x["xid"] for x in answer["xids"]] == xids
    assert {x["class"] for x in answer["xids"]} == {"fatal"}
    assert sorted(answer["changed"]) == [f"{gpu1}::0", f"{gpu1}::1"]
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 2}, what="GPU 1's replicas to go")
    unhealthy = sorted(i for i, h in node.kubelet.devices(GPU).items() if h == "Unhealthy")
    assert unhealthy == [f"{gpu1}::0", f"{gpu1}::1"]
    if fault["kind"] == "off-bus":
        with pytest.raises(AdminError, match="GPU 1 cannot be reset: none without a reboot"):
            await admin_call(sock, "recover", gpu="1", what="reset")
        return
    recovered = await admin_call(sock, "recover", gpu="1", what="reset")
    assert recovered["ended"] == [fault["kind"]] and recovered["healthy"] is False
    await node.wait_plugins_looked()
    await node.wait_kubelet_current(what="the reset")
    assert node.allocatable() == {GPU: 2}, "NVIDIA's plugin never marks an XID-unhealthy device healthy again"
    assert node.live.condition(gpu1).kinds == ()


async def test_uncorrectable_ecc_before_ampere_is_xid_48_and_63(plugin_admin):
    """Boards before Ampere retire pages: a double-bit ECC error is XID 48 (NVIDIA's XID catalogue), critical
    for NVIDIA's health checker (``internal/rm/health.go`` @ 02597b9)."""
    node, sock = await plugin_admin("2xt4")
    answer = await admin_call(sock, "gpu-fault", gpu="0", kind="ecc-uncorrectable")
    assert answer["xids"] == [{"xid": 48, "class": "fatal"}, {"xid": 63, "class": "fatal"}]
    assert "retired pages 0 single-bit, 1 double-bit (retirement pending)" in answer["condition"]
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 1}, what="GPU 0 to go")


@pytest.mark.parametrize("fault", [{"kind": "thermal"}, {"kind": "power", "watts": 690.0}, {"kind": "fabric"}])
async def test_thermal_power_and_fabric_leave_device_plugin_health_alone_and_clear(plugin_admin, fault):
    """NVIDIA's device plugin reads only XID events (``internal/rm/health.go`` @ 02597b9): a hot GPU, a power
    excursion or a fabric registration error change no device's health. Their cause clears (``recover``)."""
    node, sock = await plugin_admin("2xh100-80gb")
    answer = await admin_call(sock, "gpu-fault", gpu="0", **fault)
    assert (answer["xids"], answer["changed"]) == ([], [])
    gpu0 = node.inventory.node.gpus[0].uuid
    assert node.live.condition(gpu0).kinds == (fault["kind"],)
    await node.wait_kubelet_current(what="the fault")
    assert node.allocatable() == {GPU: 2}
    assert set(node.kubelet.devices(GPU).values()) == {"Healthy"}
    back = await admin_call(sock, "recover", gpu="0", what=fault["kind"])
    assert (back["ended"], back["remaining"], back["healthy"]) == ([fault["kind"]], [], True)
    assert node.live.conditions() == {}


async def test_gpu_lost_on_one_gpu_makes_every_device_of_the_node_unhealthy(plugin_admin):
    """``internal/rm/health.go`` @ 02597b9: an error waiting for events (``ERROR_GPU_IS_LOST``) marks every
    device unhealthy, not only the lost GPU's; nothing recovers it."""
    node, sock = await plugin_admin("2xh100-80gb")
    answer = await admin_call(sock, "gpu-fault", gpu="1", kind="gpu-lost")
    assert sorted(answer["changed"]) == sorted(g.uuid for g in node.inventory.node.gpus)
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 0}, what="every device to go")
    with pytest.raises(AdminError, match="GPU 1 cannot be reset: none without a reboot"):
        await admin_call(sock, "recover", gpu="1", what="reset")


async def test_application_xids_and_dp_disable_healthchecks_keep_devices_healthy_and_say_the_class(plugin_admin):
    """The XID's class under NVIDIA's lists: 13 is an application error (ignored by default), 79 with
    ``DP_DISABLE_HEALTHCHECKS=79`` is ignored by config; neither changes health."""
    node, sock = await plugin_admin("2xh100-80gb", env={"DP_DISABLE_HEALTHCHECKS": "79"})
    app = await admin_call(sock, "gpu-fault", gpu="0", kind="xid", xid=13)
    config = await admin_call(sock, "gpu-fault", gpu="1", kind="off-bus")
    assert (app["xids"], app["changed"]) == ([{"xid": 13, "class": "application"}], [])
    assert (config["xids"], config["changed"]) == ([{"xid": 79, "class": "ignored by config"}], [])
    await node.wait_kubelet_current(what="the ignored XIDs")
    assert node.allocatable() == {GPU: 2}


async def test_after_calls_strikes_with_the_nth_allocate_that_uses_the_gpu(plugin_admin):
    """ "Fail after N calls" as NVIDIA's mock NVML counts them (NVIDIA/k8s-test-infra
    ``pkg/gpu/mocknvml/engine/failure_injector.go`` @ 08a563f: per device, trips when the device has seen
    ``after_calls`` calls): here each Allocate that uses the GPU is a call; the second one strikes."""
    node, sock = await plugin_admin("1xh100-80gb", config=TIME_SLICED)
    gpu0 = node.inventory.node.gpus[0].uuid
    armed = await admin_call(sock, "gpu-fault", gpu="0", kind="ecc-uncorrectable", after_calls=2)
    assert (armed["armed"], armed["calls_left"]) == (True, 2)
    assert (await node.run_pod("first", {"main": {GPU: 1}})).admitted
    status = await admin_call(sock, "status")
    assert status["gpu_faults"]["armed"] == [
        {"index": 0, "uuid": gpu0, "fault": "ecc-uncorrectable after_calls=2", "calls_left": 1}
    ]
    assert node.live.unhealthy() == {}
    assert (await node.run_pod("second", {"main": {GPU: 1}})).admitted, "the striking call is still served"
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 0}, what="the armed fault to strike")
    status = await admin_call(sock, "status")
    assert status["gpu_faults"]["armed"] == []
    assert [c["kinds"] for c in status["gpu_faults"]["conditions"]] == [["ecc-uncorrectable"]]


# --- the DRA driver: taints and the health stream per kind ---------------------------------------------

TAINTED = [
    ({"kind": "xid", "xid": 79}, ["gpu.nvidia.com/xid=79:NoSchedule"], "critical XID 79 reported by NVML"),
    ({"kind": "off-bus"}, ["gpu.nvidia.com/xid=79:NoSchedule"], "critical XID 79 reported by NVML"),
    ({"kind": "ecc-uncorrectable"}, ["gpu.nvidia.com/xid=94:NoSchedule"], "critical XID 94 reported by NVML"),
    ({"kind": "ecc-correctable"}, ["gpu.nvidia.com/xid=92:NoSchedule"], "critical XID 92 reported by NVML"),
    ({"kind": "nvlink"}, ["gpu.nvidia.com/xid=74:NoSchedule"], "critical XID 74 reported by NVML"),
]


@pytest.mark.parametrize(("fault", "taint", "message"), TAINTED, ids=str)
async def test_dra_taints_the_gpu_streams_it_unhealthy_and_keeps_both_after_a_reset(dra_admin, fault, taint, message):
    """kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/device_health.go`` @ 15a116f: the kind's
    first XID taints the device ``gpu.nvidia.com/xid`` NoSchedule and a later XID of the same key does not
    replace it (``AddOrUpdateTaint``); the health stream says Unhealthy with NVIDIA's message. A reset removes
    neither (the taint stays until the driver restarts)."""
    apiserver, driver, sock = dra_admin
    async with grpc.aio.insecure_channel(f"unix://{driver.plugin.dra_socket}") as channel:
        stream = health_stream(channel)
        await stream_until(stream, lambda r: len(r) == 2, "both GPUs")
        answer = await admin_call(sock, "gpu-fault", gpu="1", **fault)
        assert answer["changed"] == ["gpu-1"]
        assert answer["note"] == f"taints {taint[0]}"
        await eventually(lambda: taints(apiserver)["gpu-1"] == taint, f"gpu-1 tainted {taint}", 3.0)
        assert taints(apiserver)["gpu-0"] == []
        report = await stream_until(stream, lambda r: r["gpu-1"][0] == health_pb2.UNHEALTHY, "gpu-1 Unhealthy")
        assert report == {"gpu-0": (health_pb2.HEALTHY, ""), "gpu-1": (health_pb2.UNHEALTHY, message)}
        if fault["kind"] != "off-bus":
            await admin_call(sock, "recover", gpu="1", what="reset")
            generation = driver.publisher.generation
            await driver.publisher.publish()
            assert driver.publisher.generation == generation, "a reset republishes nothing"
            assert taints(apiserver)["gpu-1"] == taint
        stream.cancel()


async def test_dra_application_xid_taints_none_and_streams_healthy_with_a_message(dra_admin):
    """``device_health.go`` @ 15a116f ``IsEventNonFatal``: a skipped XID taints with effect None; the stream
    keeps the device Healthy and says the XID was non-fatal."""
    apiserver, driver, sock = dra_admin
    async with grpc.aio.insecure_channel(f"unix://{driver.plugin.dra_socket}") as channel:
        stream = health_stream(channel)
        answer = await admin_call(sock, "gpu-fault", gpu="0", kind="xid", xid=13)
        assert (answer["xids"], answer["changed"]) == ([{"xid": 13, "class": "application"}], [])
        await eventually(lambda: taints(apiserver)["gpu-0"] == ["gpu.nvidia.com/xid=13:None"], "xid 13 taint", 3.0)
        report = await stream_until(stream, lambda r: bool(r.get("gpu-0", (0, ""))[1]), "gpu-0's message")
        assert report["gpu-0"] == (health_pb2.HEALTHY, "non-fatal XID 13 reported by NVML")
        stream.cancel()


async def test_dra_gpu_lost_taints_every_device(dra_admin):
    """``device_health.go`` @ 15a116f: ``ERROR_GPU_IS_LOST`` from the event wait taints every device
    ``gpu.nvidia.com/gpu-lost`` NoSchedule, and the stream reports them Unhealthy."""
    apiserver, driver, sock = dra_admin
    async with grpc.aio.insecure_channel(f"unix://{driver.plugin.dra_socket}") as channel:
        stream = health_stream(channel)
        answer = await admin_call(sock, "gpu-fault", gpu="0", kind="gpu-lost")
        assert answer["changed"] == ["gpu-0", "gpu-1"]
        lost = ["gpu.nvidia.com/gpu-lost:NoSchedule"]
        await eventually(lambda: taints(apiserver) == {"gpu-0": lost, "gpu-1": lost}, "every device lost", 3.0)
        report = await stream_until(stream, lambda r: r.get("gpu-1", (0,))[0] == health_pb2.UNHEALTHY, "lost")
        lost_report = (health_pb2.UNHEALTHY, "GPU is lost")
        assert report == {"gpu-0": lost_report, "gpu-1": lost_report}
        stream.cancel()


async def test_both_faces_answer_only_the_devices_a_fault_changed(plugin_admin, dra_admin):
    """An answer lists what this fault changed, on both faces alike: a second off-bus of the same GPU changes
    no device, and a GPU lost after it changes only the devices still healthy (NVIDIA/k8s-device-plugin
    ``internal/rm/health.go`` @ 02597b9 sends a device already unhealthy again but the kubelet's health does
    not move; the DRA driver's stream, kubernetes-sigs/dra-driver-nvidia-gpu ``device_health.go`` @ 15a116f,
    reports a device whose health changed)."""
    node, sock = await plugin_admin("4xh100-80gb", config=TIME_SLICED)
    uuids = [g.uuid for g in node.inventory.node.gpus]
    first = await admin_call(sock, "gpu-fault", gpu="3", kind="off-bus")
    assert sorted(first["changed"]) == [f"{uuids[3]}::0", f"{uuids[3]}::1"]
    again = await admin_call(sock, "gpu-fault", gpu="3", kind="off-bus")
    assert again["changed"] == []
    lost = await admin_call(sock, "gpu-fault", gpu="0", kind="gpu-lost")
    assert sorted(lost["changed"]) == sorted(f"{u}::{r}" for u in uuids[:3] for r in (0, 1))
    _apiserver, _driver, dra_sock = dra_admin
    assert (await admin_call(dra_sock, "gpu-fault", gpu="1", kind="off-bus"))["changed"] == ["gpu-1"]
    assert (await admin_call(dra_sock, "gpu-fault", gpu="1", kind="off-bus"))["changed"] == []
    assert (await admin_call(dra_sock, "gpu-fault", gpu="0", kind="gpu-lost"))["changed"] == ["gpu-0"]


@pytest.mark.parametrize("kind", ["thermal", "power", "fabric"])
async def test_dra_thermal_power_and_fabric_taint_nothing(dra_admin, kind):
    """NVIDIA's DRA driver reads only XID critical-error events (``device_health.go`` @ 15a116f): these kinds
    publish no taint and stream no change (the fabric error reaches the ComputeDomain's IMEX daemons instead)."""
    apiserver, driver, sock = dra_admin
    generation = driver.publisher.generation
    async with grpc.aio.insecure_channel(f"unix://{driver.plugin.dra_socket}") as channel:
        stream = health_stream(channel)
        await stream_until(stream, lambda r: len(r) == 2, "both GPUs")
        answer = await admin_call(sock, "gpu-fault", gpu="1", kind=kind)
        assert (answer["changed"], answer["note"]) == ([], "no taints")
        await driver.publisher.publish()
        assert driver.publisher.generation == generation
        assert taints(apiserver) == {"gpu-0": [], "gpu-1": []}
        # A later change the stream does report: the report it sends is complete, so gpu-1 as it shows there
        # is gpu-1 after the fault.
        await admin_call(sock, "gpu-fault", gpu="0", kind="xid", xid=13)
        report = await stream_until(stream, lambda r: bool(r["gpu-0"][1]), "gpu-0's non-fatal XID")
        assert report["gpu-1"] == (health_pb2.HEALTHY, "")
        stream.cancel()


async def test_dra_after_calls_counts_claims_prepared_on_the_gpu(dra_admin):
    """``after_calls`` on the DRA face: each claim prepared on the GPU is a call (NVIDIA's mock NVML counts a
    device's own calls, ``failure_injector.go`` @ 08a563f); a claim on the other GPU does not count."""
    apiserver, driver, sock = dra_admin
    await admin_call(sock, "gpu-fault", gpu="1", kind="xid", xid=48, after_calls=2)
    refs = []
    for name, device in (("a", "gpu-1"), ("b", "gpu-0"), ("c", "gpu-1")):
        uid = apiserver.create_direct(allocated_claim(name, NODE, [device]))["metadata"]["uid"]
        refs.append(("default", name, uid))
    for ref in refs[:2]:
        assert (await prepare(driver.plugin.dra_socket, [ref])).claims[ref[2]].error == ""
    assert [a.calls_left for a in driver.live.armed()] == [1], "the claim on gpu-0 did not count"
    assert taints(apiserver)["gpu-1"] == []
    await unprepare(driver.plugin.dra_socket, [refs[0]])  # gpu-1 is free for the next claim
    assert (await prepare(driver.plugin.dra_socket, [refs[2]])).claims[refs[2][2]].error == ""
    await eventually(lambda: taints(apiserver)["gpu-1"] == ["gpu.nvidia.com/xid=48:NoSchedule"], "the strike", 3.0)


@pytest.mark.parametrize("dra_admin", [False], indirect=True)
async def test_dra_without_the_health_gate_a_fault_still_reaches_the_gpu_and_says_so(dra_admin):
    """Without NVMLDeviceHealthCheck NVIDIA's driver watches no health, but the GPU still has the fault
    (nvidia-smi and DCGM read it): the op is done, not refused, and says no taint follows."""
    _apiserver, driver, sock = dra_admin
    answer = await admin_call(sock, "gpu-fault", gpu="0", kind="ecc-uncorrectable")
    assert answer["changed"] == []
    assert answer["note"] == "no taints or health stream: feature gate NVMLDeviceHealthCheck is off"
    assert driver.live.condition(driver.live.inventory.node.gpus[0].uuid).remapped_rows_pending


# --- refusals ------------------------------------------------------------------------------------------


async def test_bad_gpu_faults_and_recoveries_are_one_line_refusals(plugin_admin):
    _node, sock = await plugin_admin("8xh100-80gb")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"op": "gpu-fault", "gpu": "9", "kind": "thermal"}, "no GPU with index or UUID '9': this node has GPUs 0-7"),
        ({"op": "gpu-fault", "gpu": "0", "kind": "thermal", "xid": 3}, "xid does not apply to a thermal fault"),
        ({"op": "gpu-fault", "gpu": "0", "kind": "xid"}, "an xid fault needs the XID"),
        ({"op": "recover", "gpu": "0", "what": "thermal"}, "GPU 0 has no thermal fault (its faults: none)"),
        ({"op": "recover", "gpu": "0", "what": "ecc-uncorrectable"}, "ends with a GPU reset: recover 'reset'"),
        ({"op": "recover", "gpu": "0", "what": "gpu-lost"}, "a gpu-lost fault does not recover: none without a reboot"),
    ]
    for request, refusal in cases:
        op = request.pop("op")
        with pytest.raises(AdminError, match=refusal.replace("(", r"\(").replace(")", r"\)")) as err:
            await admin_call(sock, op, **request)
        assert "\n" not in str(err.value)


# --- fakegpu ctl ---------------------------------------------------------------------------------------


async def ctl(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "fakegpu",
        "ctl",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60.0)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_ctl_gpu_fault_recover_and_status(plugin_admin):
    node, sock = await plugin_admin("8xh100-80gb")
    gpu3 = node.inventory.node.gpus[3].uuid
    code, out, err = await ctl("--socket", str(sock), "gpu-fault", "ecc-uncorrectable", "--gpu", "3", "--count", "2")
    assert (code, err) == (0, "")
    assert out == f"GPU 3: uncorrectable ECC (XID 94, 63: fatal): device(s) {gpu3} unhealthy\n"
    code, out, _ = await ctl("--socket", str(sock), "gpu-fault", "thermal", "--gpu", "0", "--temperature", "97")
    assert (code, out) == (0, "GPU 0: thermal slowdown: no device changed health\n")
    await ctl("--socket", str(sock), "gpu-fault", "power", "--gpu", "5", "--after-calls", "4")
    code, out, _ = await ctl("--socket", str(sock), "status")
    assert code == 0
    assert (
        "GPU 0: faults thermal; 97 C; clocks at 55 % (hw_slowdown, hw_thermal_slowdown, sw_thermal_slowdown)\n"
    ) in out
    assert (
        "GPU 3: faults ecc-uncorrectable; ECC uncorrectable 2 volatile / 2 aggregate, correctable 0 / 0; "
        "remapped rows 0 correctable, 2 uncorrectable (remap pending); last XID 63; XIDs 94 fatal, 63 fatal\n"
    ) in out
    assert "GPU 1:" not in out
    assert "GPU 5 armed: power after_calls=4: strikes when 4 more call(s) use it\n" in out
    code, out, _ = await ctl("--socket", str(sock), "recover", "--gpu", "3", "reset")
    assert (code, out) == (
        0,
        "GPU 3 reset: ended ecc-uncorrectable; its devices stay unhealthy (NVIDIA's plugins never mark an "
        "XID-unhealthy device healthy again)\n",
    )
    code, out, _ = await ctl("--socket", str(sock), "status")
    assert "GPU 3: faults none; ECC uncorrectable 0 volatile / 2 aggregate" in out
    await ctl("--socket", str(sock), "xid", "6", "13")
    code, out, _ = await ctl("--socket", str(sock), "status")
    assert "GPU 6: faults none; readings normal; XIDs 13 application\n" in out


async def test_ctl_status_shows_why_a_gpu_is_gone_before_its_last_xid(plugin_admin):
    """A GPU lost after an uncorrectable ECC error is shown lost, not by the XID 63 it last reported; one off the
    bus is shown so; the other GPUs are out because NVML's event wait failed for all (NVIDIA/k8s-device-plugin
    ``internal/rm/health.go`` @ 02597b9 marks every device when the wait returns an error)."""
    _node, sock = await plugin_admin("4xh100-80gb")
    await ctl("--socket", str(sock), "gpu-fault", "ecc-uncorrectable", "--gpu", "1")
    await ctl("--socket", str(sock), "gpu-fault", "off-bus", "--gpu", "2")
    await ctl("--socket", str(sock), "gpu-fault", "gpu-lost", "--gpu", "1")
    code, out, _ = await ctl("--socket", str(sock), "status")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line[:1].isdigit()}
    assert rows["1"].endswith("Unhealthy (lost, XID 63)")
    assert rows["2"].endswith("Unhealthy (off the bus, XID 79)")
    assert rows["0"].endswith("Unhealthy (a GPU of the node lost)")


@pytest.mark.parametrize(
    ("argv", "code", "error"),
    [
        (["gpu-fault", "melted", "--gpu", "0"], 2, "gpu-fault: unknown fault kind 'melted'; expected one of: xid, "),
        (
            ["gpu-fault", "thermal", "--gpu", "0", "--xid", "79"],
            2,
            "gpu-fault: xid does not apply to a thermal fault (it takes: temperature)",
        ),
        (["gpu-fault", "fabric", "--gpu", "0", "--status", "BROKEN"], 2, "gpu-fault: unknown fabric status 'BROKEN'"),
        (["recover", "--gpu", "0", "off-bus"], 2, "recover: an off-bus fault does not recover: none without a reboot"),
        (["gpu-fault", "xid", "--gpu", "9", "--xid", "79"], 1, "no GPU with index or UUID '9': this node has GPUs 0-7"),
        (["recover", "--gpu", "0", "power"], 1, "GPU 0 has no power fault (its faults: none)"),
        (
            ["gpu-fault", "power", "--gpu", "0", "--watts", "-5"],
            2,
            "gpu-fault: --watts: must be greater than 0, found -5.0",
        ),
        (["gpu-fault", "power", "--gpu", "0", "--watts", "inf"], 2, "gpu-fault: --watts: must be less than or equal"),
        (["gpu-fault", "nvlink", "--gpu", "0", "--link", "99"], 2, "gpu-fault: --link: must be less than or equal"),
        (["gpu-fault", "xid", "--gpu", "0", "--xid", "0"], 2, "gpu-fault: --xid: must be greater than or equal to 1"),
        (["gpu-fault", "ecc-correctable", "--gpu", "0", "--count", "0"], 2, "gpu-fault: --count: must be greater"),
        (["gpu-fault", "thermal", "--gpu", "0", "--after-calls", "-1"], 2, "gpu-fault: --after-calls: must be greater"),
        (["gpu-fault", "thermal", "--gpu", "0", "--temperature", "5000"], 2, "gpu-fault: --temperature: must be less"),
        (["gpu-fault", "xid", "--gpu", "2"], 2, "gpu-fault: an xid fault needs the XID: --xid N"),
        (["gpu-fault", "thermal", "--gpu", "7" * 100_000], 1, "no GPU with index or UUID '7777"),
        (["recover", "--gpu", "0", "thermal"], 1, "GPU 0 has no thermal fault (its faults: none)"),
    ],
    ids=lambda v: str(v)[:60],
)
async def test_ctl_bad_gpu_faults_are_one_line_errors(plugin_admin, argv, code, error):
    """Bad usage (a kind or a field the fault model refuses) exits 2 before anything is sent; what only the
    daemon knows (its GPUs, their faults) is its refusal, exit 1; both one line."""
    _node, sock = await plugin_admin("8xh100-80gb")
    got, out, err = await ctl("--socket", str(sock), *argv)
    assert (got, out) == (code, "")
    assert err.startswith(f"fakegpu: error: {error}") and err.count("\n") == 1, err
    assert len(err) < 300, "a bad value is shortened, not echoed whole"


async def test_an_rpc_fault_with_after_lets_calls_pass_then_fails_the_kubelets_admission(plugin_admin):
    """ "Fail after N calls" for an RPC, as nvml-mock's ``after_calls`` counts calls before it trips
    (NVIDIA/k8s-test-infra ``pkg/gpu/mocknvml/engine/failure_injector.go`` @ 08a563f): the first Allocate
    passes, the second fails with the kubelet's admission error, the third passes again."""
    node, sock = await plugin_admin("4xt4")
    planned = await admin_call(sock, "fault", method="Allocate", after=1, code="INTERNAL", message="late failure")
    assert (planned["after"], planned["times"]) == (1, 1)
    code, out, _ = await ctl("--socket", str(sock), "status")
    assert code == 0 and "  Allocate x1 after 1 more call(s): fail with INTERNAL: late failure\n" in out
    assert (await node.run_pod("a", {"main": {GPU: 1}})).admitted
    status = await admin_call(sock, "status")
    assert [(f["after"], f["remaining"]) for f in status["faults"]["pending"]] == [(0, 1)]
    second = await node.run_pod("b", {"main": {GPU: 1}})
    assert (second.phase, second.reason) == ("Failed", "UnexpectedAdmissionError")
    assert "late failure" in second.message
    assert (await node.run_pod("c", {"main": {GPU: 1}})).admitted
