"""The ``gpu_fault`` and ``recover`` scenario steps: parsed strictly, run by the embedded runner (the kubelet
emulator and the real plugins) and against live daemons of both faces (``scenario run --socket``)."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from fakegpu.control.server import AdminServer
from fakegpu.dra.admin_ops import dra_ops
from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.dra.feature_gates import parse_feature_gates
from fakegpu.fakeplugin.admin_ops import device_plugin_ops
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.testing.fake_node import FakeNode
from fakegpu.testing.scenario import EXIT_BAD_FILE, EXIT_FAIL, EXIT_PASS, run_files
from fakegpu.testing.scenario.model import parse_scenario
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.eventually import eventually
from tests.slice_taints import as_sent

HEADER = "name: gpu-faults\nissue: example/repo#24\ndescription: GPU fault steps\n"
GPU = "nvidia.com/gpu"


def scenario(root: Path, steps: str, node: str = "{gpus: 2xh100-80gb}") -> Path:
    path = root / "s.yaml"
    path.write_text(HEADER + f"node: {node}\nsteps:\n" + steps)
    return path


async def run(path: Path, socket: Path | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = await run_files([path], out, err, socket=socket)
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("step", "error"),
    [
        (
            {"gpu_fault": {"gpu": 0, "kind": "thermal", "xid": 79}},
            "steps[0].gpu_fault: xid does not apply to a thermal",
        ),
        ({"gpu_fault": {"gpu": 0, "kind": "melted"}}, "steps[0].gpu_fault.kind: Input should be 'xid', 'off-bus'"),
        ({"gpu_fault": {"kind": "off-bus"}}, "steps[0].gpu_fault.gpu: Field required"),
        ({"gpu_fault": {"gpu": 0, "kind": "power", "watt": 5}}, "steps[0].gpu_fault.watt: unknown field"),
        ({"gpu_fault": {"gpu": 0, "kind": "xid", "xid": 79, "after_calls": -1}}, "steps[0].gpu_fault.after_calls"),
        ({"recover": {"gpu": 0, "what": "off-bus"}}, "steps[0].recover.what: Input should be 'thermal', 'power'"),
    ],
)
def test_bad_gpu_fault_and_recover_steps_are_one_line_errors_naming_file_step_and_field(step, error):
    data = {"name": "n", "issue": "o/r#1", "description": "d", "steps": [step]}
    with pytest.raises(SpecError) as err:
        parse_scenario(data, "my.yaml")
    assert str(err.value).startswith(f"my.yaml: {error}"), str(err.value)
    assert "\n" not in str(err.value)


async def test_the_embedded_runner_strikes_recovers_and_waits_for_the_kubelet(root):
    """NVIDIA/k8s-device-plugin ``internal/rm/health.go`` @ 02597b9: XID 74 (NVLink) is critical, so the GPU
    goes; a reset leaves it unhealthy; a power excursion changes no health."""
    path = scenario(
        root,
        "  - gpu_fault: {gpu: 1, kind: nvlink, link: 2}\n"
        "  - expect_now: {allocatable: {nvidia.com/gpu: 1}}\n"
        "  - recover: {gpu: 1, what: reset}\n"
        "  - gpu_fault: {gpu: 0, kind: power}\n"
        "  - plugins_looked: true\n"
        "  - expect_now: {allocatable: {nvidia.com/gpu: 1}}\n",
    )
    status, out, err = await run(path)
    assert (status, err) == (EXIT_PASS, ""), out + err
    lines = out.splitlines()
    assert "nvlink link=2 on GPU 1: XID 74 fatal: 1 device(s) unhealthy" in lines[2]
    assert "reset on GPU 1: ended nvlink; the GPU stays unhealthy" in lines[4]
    assert "power on GPU 0: no health change" in lines[5]


async def test_a_step_reports_only_the_devices_it_changed(root):
    """A second XID on a GPU already unhealthy changes no device (NVIDIA/k8s-device-plugin
    ``internal/rm/health.go`` @ 02597b9 resends it Unhealthy; the kubelet's health does not move), and the step
    says so rather than calling a critical XID ignored."""
    path = scenario(root, "  - xid: {gpu: 1, xid: 79}\n  - xid: {gpu: 1, xid: 48}\n  - xid: {gpu: 0, xid: 13}\n")
    status, out, err = await run(path)
    assert (status, err) == (EXIT_PASS, ""), out + err
    lines = out.splitlines()
    assert "1 device(s) unhealthy" in lines[2]
    assert "no device changed (already unhealthy)" in lines[3]
    assert "ignored by the XID policy" in lines[4]


@pytest.mark.parametrize(
    ("steps", "error"),
    [
        (
            "  - gpu_fault: {gpu: 9, kind: off-bus}\n",
            "steps[0].gpu_fault: no GPU with index or UUID '9': this node has GPUs 0-1",
        ),
        ("  - recover: {gpu: 0, what: fabric}\n", "steps[0].recover: GPU 0 has no fabric fault"),
    ],
)
async def test_a_step_naming_what_the_node_lacks_is_a_bad_file(root, steps, error):
    status, _out, err = await run(scenario(root, steps))
    assert status == EXIT_BAD_FILE
    assert err.startswith(f"fakegpu: error: {root / 's.yaml'}: {error}"), err


async def test_an_expectation_that_a_reset_brings_the_gpu_back_fails(root):
    """A test that cannot fail is a defect: expecting NVIDIA's plugin to heal after a reset fails."""
    path = scenario(
        root,
        "  - gpu_fault: {gpu: 0, kind: ecc-uncorrectable}\n"
        "  - recover: {gpu: 0, what: reset}\n"
        "  - expect: {allocatable: {nvidia.com/gpu: 2}, within: 0.2}\n",
    )
    status, out, _ = await run(path)
    assert status == EXIT_FAIL
    assert "allocatable[nvidia.com/gpu]: expected 2, got 1" in out


@pytest.fixture
async def plugin_daemon(
    fakegpu_node: Callable[..., Awaitable[FakeNode]], root: Path
) -> AsyncIterator[tuple[FakeNode, Path]]:
    node = await fakegpu_node("2xh100-80gb")
    path = root / "admin.sock"
    async with AdminServer(path, device_plugin_ops(node.live, node.plugins)):
        yield node, path


async def test_gpu_fault_steps_reach_a_live_device_plugin_daemon(plugin_daemon, root):
    node, socket = plugin_daemon
    path = scenario(
        root,
        "  - gpu_fault: {gpu: 0, kind: ecc-uncorrectable, contained: false}\n"
        "  - gpu_fault: {gpu: 1, kind: thermal, temperature: 99}\n"
        "  - recover: {gpu: 1, what: thermal}\n",
    )
    status, out, err = await run(path, socket)
    assert (status, err) == (EXIT_PASS, ""), out + err
    assert "ecc-uncorrectable contained=false on GPU 0: XID 95 fatal" in out
    await eventually(lambda: node.allocatable() == {GPU: 1}, "GPU 0 to go", 3.0, detail=node.allocatable)
    gpu0 = node.live.inventory.node.gpus[0].uuid
    assert node.live.condition(gpu0).kinds == ("ecc-uncorrectable",)
    assert list(node.live.conditions()) == [gpu0], "the thermal fault was recovered"


@pytest.fixture
async def dra_daemon(root: Path) -> AsyncIterator[tuple[FakeApiServer, DraDriver, Path]]:
    apiserver = FakeApiServer("1.36").start()
    apiserver.add_node("node-a")
    live = LiveInventory(load_inventory(InventoryInputs(node_name="node-a", gpus=("2xh100-80gb",))))
    driver = DraDriver(
        live,
        KubeletPaths(root / "kubelet"),
        DraSettings(cdi_root=root / "cdi", feature_gates=parse_feature_gates("NVMLDeviceHealthCheck=true")),
        apiserver.client,
    )
    await driver.start()
    try:
        await driver.wait_published()
        async with AdminServer(root / "dra-admin.sock", dra_ops(driver)) as server:
            yield apiserver, driver, server.path
    finally:
        await driver.stop()
        apiserver.stop()


async def test_gpu_fault_steps_reach_a_live_dra_daemon(dra_daemon, root):
    """kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/device_health.go`` @ 15a116f: the XID
    of an off-bus GPU taints the published device NoSchedule."""
    apiserver, _driver, socket = dra_daemon
    status, out, err = await run(scenario(root, "  - gpu_fault: {gpu: 1, kind: off-bus}\n"), socket)
    assert (status, err) == (EXIT_PASS, ""), out + err
    assert "off-bus on GPU 1: XID 79 fatal: 1 device(s) unhealthy" in out

    def taints() -> list[object]:
        return [as_sent(d.get("taints")) for s in apiserver.objects("resourceslices") for d in s["spec"]["devices"]]

    await eventually(lambda: taints()[1], "gpu-1 tainted", 3.0)
    assert taints() == [None, [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]]
