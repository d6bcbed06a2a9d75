"""``scenario run --socket``: the inject steps against a live daemon's admin socket (issue 6)."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from fakegpu.cli.main import main
from fakegpu.control.client import EXIT_NO_DAEMON
from fakegpu.control.server import AdminServer
from fakegpu.fakeplugin.admin_ops import device_plugin_ops
from fakegpu.kubelet.admin_ops import kubelet_ops
from fakegpu.testing.fake_node import FakeNode
from fakegpu.testing.scenario import EXIT_BAD_FILE, EXIT_FAIL, EXIT_PASS, live, run_files
from tests.eventually import eventually

HEADER = "name: live\nissue: example/repo#6\ndescription: a live-daemon scenario\n"
GPU = "nvidia.com/gpu"


@pytest.fixture
async def daemon(fakegpu_node: Callable[..., Awaitable[FakeNode]], root: Path) -> AsyncIterator[tuple[FakeNode, Path]]:
    node = await fakegpu_node("2xh100-80gb")
    path = root / "admin.sock"
    async with AdminServer(path, device_plugin_ops(node.live, node.plugins)):
        yield node, path


def scenario(root: Path, steps: str, name: str = "s.yaml") -> Path:
    path = root / name
    path.write_text(HEADER + "node: {gpus: 8xa100-40gb}\nsteps:\n" + steps)
    return path


async def run(path: Path, socket: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = await run_files([path], out, err, socket=socket)
    return status, out.getvalue(), err.getvalue()


async def test_inject_steps_reach_the_live_daemon(daemon, root):
    node, socket = daemon
    assert node.allocatable()[GPU] == 2
    path = scenario(
        root,
        "  - xid: {gpu: 0, xid: 94}\n"
        "  - wait: 0.05\n"
        "  - fault: {rpc: Allocate, times: 2, code: INTERNAL, message: injected live}\n"
        "  - health: {gpu: 1, healthy: false}\n",
    )
    status, out, err = await run(path, socket)
    assert status == EXIT_PASS, out + err
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == f"scenario live (example/repo#6): {path}"
    assert "connect" in lines[1] and "device-plugin on node fake-node" in lines[1] and lines[1].endswith("PASS")
    assert lines[2].split()[:2] == ["0", "xid"] and "1 device(s) unhealthy" in lines[2]
    assert lines[4].split()[:2] == ["2", "fault"] and lines[4].endswith("PASS")
    assert lines[5].split()[:2] == ["3", "health"] and "1 device(s)" in lines[5]
    assert lines[6].startswith(f"PASS live: 4 step(s) against {socket} in ")

    gpus = node.live.inventory.node.gpus
    unhealthy = node.live.unhealthy()
    assert unhealthy.get(gpus[0].uuid) == 94  # the xid step, with its XID
    assert gpus[1].uuid in unhealthy  # the health step
    await eventually(lambda: node.allocatable().get(GPU) == 0, "0 allocatable GPU(s)", 3.0, detail=node.allocatable)
    assert node.capacity()[GPU] == 2  # the node section was ignored: still the daemon's 2 GPUs
    [fault] = node.live.faults.faults
    assert (fault.method, fault.remaining, fault.spec.code, fault.spec.message) == (
        "Allocate",
        2,
        "INTERNAL",
        "injected live",
    )


async def test_end_streams_and_plugin_restart_reach_the_live_daemon(daemon, root):
    node, socket = daemon
    server = node.plugins.servers[GPU]
    await eventually(lambda: server.service.streams == 1, "one ListAndWatch stream", 3.0)
    status, out, err = await run(scenario(root, f"  - end_streams: {GPU}\n"), socket)
    assert status == EXIT_PASS, out + err
    assert "1 stream(s) ended" in out.splitlines()[2]
    # The kubelet saw EOF: the resource is not allocatable until the plugin registers again.
    await eventually(lambda: node.allocatable().get(GPU) == 0, "0 allocatable GPU(s)", 3.0, detail=node.allocatable)

    restarts = node.plugins.stats.restarts
    status, out, err = await run(scenario(root, "  - restart: plugins\n", "r.yaml"), socket)
    assert status == EXIT_PASS, out + err
    assert f"serving {GPU}" in out.splitlines()[2]
    assert node.plugins.stats.restarts == restarts + 1
    assert node.plugins.servers[GPU] is not server  # stopped and served again
    await eventually(lambda: node.allocatable().get(GPU) == 2, "2 allocatable GPU(s)", 3.0, detail=node.allocatable)


async def test_plugins_looked_waits_for_two_watch_steps_of_the_live_daemon(daemon, root):
    node, socket = daemon
    before = node.plugins.stats.watch_steps
    status, out, err = await run(scenario(root, "  - plugins_looked: true\n"), socket)
    assert status == EXIT_PASS, out + err
    line = out.splitlines()[2]
    assert line.split()[:2] == ["0", "plugins_looked"] and "watch step(s)" in line and line.endswith("PASS")
    assert node.plugins.stats.watch_steps >= before + 2


async def test_plugins_looked_fails_when_the_watch_loop_does_not_step(daemon, root, monkeypatch):
    """The barrier can fail: with the plugins stopped their watch loop takes no step, and the step says
    what it waited for instead of passing."""
    node, socket = daemon
    await node.plugins.stop()
    monkeypatch.setattr(live, "LOOK_TIMEOUT", 0.3)
    status, out, err = await run(scenario(root, "  - plugins_looked: true\n  - xid: {gpu: 0, xid: 94}\n"), socket)
    assert status == EXIT_FAIL, out + err
    lines = out.splitlines()
    assert lines[2].split()[:2] == ["0", "plugins_looked"] and lines[2].endswith("FAIL")
    assert "timed out after 0.3s waiting for the plugins' watch loop to look again" in lines[3]
    assert node.live.unhealthy() == {}  # the scenario stopped at the failing step


async def test_plugins_looked_needs_a_daemon_that_counts_watch_steps(fakegpu_node, root):
    """A daemon whose status has no plugins' watch loop (here the kubelet's) fails the step, saying why."""
    node = await fakegpu_node("1xt4")
    async with AdminServer(root / "kubelet.sock", kubelet_ops(node.kubelet)) as server:
        status, out, err = await run(scenario(root, "  - plugins_looked: true\n"), server.path)
    assert status == EXIT_FAIL, out + err
    assert "the daemon's status reports no plugins' watch_steps (a device plugin daemon does)" in out


async def test_a_refused_op_fails_with_the_daemons_error(daemon, root):
    node, socket = daemon
    path = scenario(
        root,
        "  - fault: {rpc: Allocate, code: INTERNAL, resource: nvidia.com/nope}\n  - xid: {gpu: 0, xid: 94}\n",
    )
    status, out, err = await run(path, socket)
    assert status == EXIT_FAIL, out + err
    lines = out.splitlines()
    assert lines[2].split()[:2] == ["0", "fault"] and lines[2].endswith("FAIL")
    assert "the daemon answered: unknown resource 'nvidia.com/nope'" in lines[3]
    assert lines[-1].startswith("FAIL live after ")
    assert node.live.faults.faults == []
    assert node.live.unhealthy() == {}  # the scenario stopped at the failing step


async def test_a_fault_the_daemons_face_does_not_serve_is_refused_before_anything_is_sent(daemon, root):
    node, socket = daemon
    path = scenario(root, "  - xid: {gpu: 0, xid: 94}\n  - fault: {rpc: NodeUnprepareResources, delay: 1}\n")
    status, out, err = await run(path, socket)
    assert status == EXIT_BAD_FILE
    assert " PASS" not in out
    assert err.splitlines() == [
        f"fakegpu: error: {path}: steps[1].fault.rpc: 'NodeUnprepareResources' is an RPC of the DRA driver, not of "
        "the device plugin this scenario drives; expected one of: GetDevicePluginOptions, ListAndWatch, "
        "GetPreferredAllocation, Allocate, PreStartContainer"
    ]
    assert node.live.unhealthy() == {} and node.live.faults.faults == []


@pytest.mark.parametrize(
    ("steps", "named"),
    [
        (
            "  - wait: 0.01\n  - xid: {gpu: 0, xid: 94}\n  - allocate: {pod: p1, resources: {nvidia.com/gpu: 1}}\n",
            "step 2 (allocate)",
        ),
        ("  - expect: {allocatable: {nvidia.com/gpu: 2}}\n", "step 0 (expect)"),
        ("  - restart: kubelet\n", "step 0 (restart: kubelet)"),
        ("  - advance_clock: 5\n", "step 0 (advance_clock)"),
    ],
)
async def test_a_step_needing_the_emulator_is_refused_up_front(daemon, root, steps, named):
    node, socket = daemon
    status, out, err = await run(scenario(root, steps), socket)
    assert status == EXIT_BAD_FILE
    assert out == ""
    assert err.splitlines() == [
        f"fakegpu: error: {root / 's.yaml'}: {named} needs the embedded kubelet emulator; run without --socket"
    ]
    assert node.live.unhealthy() == {}  # nothing was sent, not even the steps before it


async def test_expect_start_error_is_refused_in_socket_mode(root):
    path = root / "s.yaml"
    path.write_text(HEADER + "expect_start_error: boom\n")
    status, out, err = await run(path, root / "none.sock")
    assert status == EXIT_BAD_FILE
    assert out == ""
    assert err.splitlines() == [
        f"fakegpu: error: {path}: expect_start_error needs the embedded kubelet emulator; run without --socket"
    ]


async def test_an_unreachable_socket_exits_no_daemon_with_one_line(root):
    """Exit 3 (EXIT_NO_DAEMON), the status ``fakegpu ctl`` gives when nothing listens, and how to start one."""
    socket = root / "nobody.sock"
    status, out, err = await run(scenario(root, "  - xid: {gpu: 0, xid: 94}\n"), socket)
    assert status == EXIT_NO_DAEMON == 3
    assert len(err.splitlines()) == 1
    assert err.startswith("fakegpu: error: ") and f"no fakegpu daemon is listening on {socket}" in err
    assert f"fakegpu plugin --admin-socket {socket}" in err
    assert "Traceback" not in out + err and " PASS" not in out


def test_the_cli_takes_socket(root, capsys):
    socket = root / "nobody.sock"
    path = scenario(root, "  - allocate: {pod: p1, resources: {nvidia.com/gpu: 1}}\n")
    assert main(["scenario", "run", str(path), "--socket", str(socket)]) == EXIT_BAD_FILE
    assert "step 0 (allocate) needs the embedded kubelet emulator" in capsys.readouterr().err
    path = scenario(root, "  - wait: 0\n")
    assert main(["scenario", "run", str(path), "--socket", str(socket)]) == EXIT_NO_DAEMON
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no fakegpu daemon is listening on {socket}" in err
