"""The admin socket and ``fakegpu ctl`` against real daemons' state, over real Unix sockets.

Device plugin side: the ``fakegpu_node`` fixture (kubelet emulator + plugins); DRA side: a DraDriver
against the in-process API server. Every change is made through the admin socket only, and its effect
is checked where the kubelet (or the API server) sees it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest
from pydantic import BaseModel, ConfigDict, field_validator

from fakegpu.cli.ctl_command import EXIT_REFUSED, add_ctl_parser
from fakegpu.control.client import EXIT_NO_DAEMON, admin_call
from fakegpu.control.operations import BY_NAME, OPERATIONS, options_of
from fakegpu.control.protocol import AdminError, op_fields, takes_model
from fakegpu.control.server import AdminServer
from fakegpu.dra.admin_ops import HEALTH_GATE_OFF, dra_ops
from fakegpu.fakeplugin.admin_ops import device_plugin_ops
from fakegpu.kubelet.admin_ops import kubelet_ops
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.unix_socket import SocketPathError
from fakegpu.sharing.faults import FaultSpec
from tests.claim_builders import allocated_claim
from tests.dra_kubelet_client import prepare
from tests.eventually import eventually
from tests.integration.conftest import ADMIN_NODE as NODE
from tests.slice_taints import as_sent

GPU = "nvidia.com/gpu"
ROOT = Path(__file__).resolve().parents[2]


async def raw(path: Path, payload: bytes) -> dict[str, Any]:
    """Send raw bytes as one request; the decoded answer line."""
    reader, writer = await asyncio.open_unix_connection(path)
    try:
        writer.write(payload)
        with contextlib.suppress(ConnectionError):  # a refused connection is closed at once
            await writer.drain()
        line = await asyncio.wait_for(reader.readline(), 5.0)
    finally:
        writer.close()
    answer: dict[str, Any] = json.loads(line)
    return answer


async def ctl(*args: str, env: Mapping[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "fakegpu",
        "ctl",
        *args,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60.0)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


# --- device plugin -----------------------------------------------------------------------------------


async def test_health_changes_reach_the_kubelet_and_recover(plugin_admin):
    node, sock = await plugin_admin("2xh100-80gb")
    gpu1 = node.inventory.node.gpus[1].uuid
    assert await admin_call(sock, "health", target="1", healthy=False, xid=79) == [gpu1]
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 1}, what="allocatable to drop")
    assert node.kubelet.devices(GPU)[gpu1] == "Unhealthy"
    assert node.capacity() == {GPU: 2}
    assert node.live.unhealthy() == {gpu1: 79}
    assert await admin_call(sock, "health", target=gpu1, healthy=True) == [gpu1]
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 2}, what="allocatable to recover")
    assert node.kubelet.devices(GPU)[gpu1] == "Healthy"


async def test_xid_events_honour_ignored_xids(plugin_admin):
    node, sock = await plugin_admin("2xh100-80gb")
    assert await admin_call(sock, "xid", target="0", xid=13) == []
    await node.wait_kubelet_current(what="the ignored XID")  # a wrong health change would show by now
    assert node.allocatable() == {GPU: 2}
    gpu0 = node.inventory.node.gpus[0].uuid
    assert await admin_call(sock, "xid", target="0", xid=48) == [gpu0]
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 1}, what="allocatable to drop")
    assert node.live.unhealthy() == {gpu0: 48}


async def test_xid_events_honour_dp_disable_healthchecks(plugin_admin):
    node, sock = await plugin_admin("2xh100-80gb", env={"DP_DISABLE_HEALTHCHECKS": "all"})
    assert await admin_call(sock, "xid", target="1", xid=79) == []
    assert await admin_call(sock, "off-bus", gpu="1") == []
    await node.wait_kubelet_current(what="the ignored events")  # a wrong health change would show by now
    assert node.allocatable() == {GPU: 2}
    assert node.live.unhealthy() == {}
    # Setting health directly is not an XID event: it still works with health checks disabled.
    assert len(await admin_call(sock, "health", target="1", healthy=False)) == 1
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 1}, what="allocatable to drop")


async def test_off_bus_makes_every_replica_of_a_time_sliced_gpu_unhealthy(plugin_admin):
    config = {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": GPU, "replicas": 4}]}}}
    node, sock = await plugin_admin("2xh100-80gb", config=config)
    assert node.allocatable() == {GPU: 8}
    gpu1 = node.inventory.node.gpus[1].uuid
    changed = await admin_call(sock, "off-bus", gpu="1")
    assert sorted(changed) == [f"{gpu1}::{i}" for i in range(4)]
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 4}, what="the GPU's replicas to go")
    unhealthy = {i for i, h in node.kubelet.devices(GPU).items() if h == "Unhealthy"}
    assert unhealthy == set(changed)
    status = await admin_call(sock, "status")
    assert [(g["index"], g["healthy"], g["xid"]) for g in status["gpus"]] == [(0, True, None), (1, False, 79)]
    with pytest.raises(AdminError, match=r"no GPU with index or UUID '7': this node has GPUs 0-1"):
        await admin_call(sock, "off-bus", gpu="7")


async def test_off_bus_takes_every_mig_device_of_the_gpu(plugin_admin):
    node, sock = await plugin_admin("2xh100-80gb", mig_layout="all-3g.40gb", mig_strategy="mixed")
    mig = "nvidia.com/mig-3g.40gb"
    assert node.allocatable() == {mig: 4}
    gpu0 = node.inventory.node.gpus[0]
    assert sorted(await admin_call(sock, "off-bus", gpu=gpu0.uuid)) == sorted(m.uuid for m in gpu0.mig_devices)
    await node.kubelet.wait_for(lambda: node.allocatable() == {mig: 2}, what="the GPU's MIG devices to go")


async def test_injected_allocate_faults_give_the_kubelets_admission_error(plugin_admin):
    node, sock = await plugin_admin("2xt4")
    planned = await admin_call(sock, "fault", method="Allocate", times=2, code="INVALID_ARGUMENT", message="boom")
    assert planned == {
        "method": "Allocate",
        "times": 2,
        "code": "INVALID_ARGUMENT",
        "message": "boom",
        "delay": 0.0,
        "resource": None,
        "after": 0,
    }
    for uid in ("a", "b"):
        pod = await node.run_pod(uid, {"c": {GPU: 1}})
        assert (pod.phase, pod.reason) == ("Failed", "UnexpectedAdmissionError")
        assert pod.message == (
            "Pod was rejected: Allocate failed due to rpc error: code = InvalidArgument desc = boom, which is "
            "unexpected"
        )
    assert (await node.run_pod("c", {"c": {GPU: 1}})).admitted
    faults = (await admin_call(sock, "status"))["faults"]
    assert faults["pending"] == []
    assert faults["fired"] == [{"method": "Allocate", "what": "failed with INVALID_ARGUMENT"}] * 2


async def test_fault_scoping_and_clearing(plugin_admin):
    node, sock = await plugin_admin("2xt4")
    with pytest.raises(AdminError, match=r"unknown resource 'gpu'; this daemon serves: nvidia.com/gpu"):
        await admin_call(sock, "fault", method="Allocate", code="INTERNAL", resource="gpu")
    with pytest.raises(AdminError, match=r"does not serve 'NodePrepareResources'"):
        await admin_call(sock, "fault", method="NodePrepareResources", code="INTERNAL")
    with pytest.raises(AdminError, match=r"unknown gRPC status code 'NOPE'"):
        await admin_call(sock, "fault", method="Allocate", code="NOPE")
    await admin_call(sock, "fault", method="Allocate", code="INTERNAL", times=3, resource=GPU)
    await admin_call(sock, "fault", method="PreStartContainer", delay=0.5)
    assert [f["method"] for f in (await admin_call(sock, "status"))["faults"]["pending"]] == [
        "Allocate",
        "PreStartContainer",
    ]
    assert await admin_call(sock, "clear-faults", method="Allocate") == 1
    assert (await node.run_pod("p", {"c": {GPU: 1}})).admitted
    assert await admin_call(sock, "clear-faults") == 1


async def test_end_streams_makes_allocatable_zero(plugin_admin):
    node, sock = await plugin_admin("2xt4")
    assert await admin_call(sock, "end-streams") == 1
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 0}, what="allocatable to go to 0")
    assert node.capacity() == {GPU: 2}
    with pytest.raises(AdminError, match=r"unknown resource 'nvidia.com/mig-1g.10gb'"):
        await admin_call(sock, "end-streams", resource="nvidia.com/mig-1g.10gb")


async def test_plugins_restart_reregisters(plugin_admin):
    node, sock = await plugin_admin("2xt4")
    before = node.plugins.stats.registrations
    assert await admin_call(sock, "plugins", action="restart") == {"action": "restart", "serving": [GPU]}
    assert node.plugins.stats.registrations == before + 1
    assert len(node.kubelet.registration.requests) == 2
    await node.wait_synced()
    assert (await node.run_pod("p", {"c": {GPU: 2}})).admitted

    assert await admin_call(sock, "plugins", action="stop") == {"action": "stop", "serving": []}
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 0}, what="allocatable to go to 0")
    with pytest.raises(AdminError, match="already stopped"):
        await admin_call(sock, "plugins", action="stop")
    assert (await admin_call(sock, "status"))["resources"][0]["serving"] is False
    await admin_call(sock, "plugins", action="start")
    assert node.plugins.stats.registrations == before + 2
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 2}, what="allocatable to come back")


async def test_reload_of_a_bad_config_is_refused_and_serving_goes_on(plugin_admin):
    node, sock = await plugin_admin("2xt4", config={"version": "v1"})
    config_file = Path(node.inputs.config_file or "")
    config_file.write_text("version: v9\n")
    with pytest.raises(AdminError, match=r"^reload rejected, still serving the previous inventory: .*v9"):
        await admin_call(sock, "reload")
    assert node.allocatable() == {GPU: 2}


async def test_status_shows_resources_devices_registration_and_allocations(plugin_admin):
    node, sock = await plugin_admin("2xt4", node_name="node-x")
    assert (await node.run_pod("p", {"c": {GPU: 1}})).admitted
    status = await admin_call(sock, "status")
    assert (status["kind"], status["node"], status["running"]) == ("device-plugin", "node-x", True)
    (resource,) = status["resources"]
    ids = [g.uuid for g in node.inventory.node.gpus]
    assert {k: resource[k] for k in ("name", "capacity", "healthy", "registered", "serving", "streams")} == {
        "name": GPU,
        "capacity": 2,
        "healthy": 2,
        "registered": True,
        "serving": True,
        "streams": 1,
    }
    assert resource["devices"] == [{"id": i, "health": "Healthy"} for i in ids]
    (allocation,) = status["allocations"]
    assert allocation["resource"] == GPU and len(allocation["ids"]) == 1 and allocation["ids"][0] in ids


# --- the socket itself ---------------------------------------------------------------------------------


async def _noop() -> str:
    return "ok"


async def test_socket_is_owner_only_and_removed_on_stop(root):
    path = root / "sub" / "admin.sock"
    server = AdminServer(path, {"ping": _noop})
    await server.start()
    try:
        assert stat.S_ISSOCK(path.lstat().st_mode)
        assert stat.S_IMODE(path.lstat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert await admin_call(path, "ping") == "ok"
    finally:
        await server.stop()
    assert not path.exists()
    with pytest.raises(AdminError, match=f"^no fakegpu daemon is listening on {path}$"):
        await admin_call(path, "ping")


async def test_refuses_to_replace_a_file_that_is_not_a_socket(root):
    path = root / "admin.sock"
    path.write_text("keep me")
    with pytest.raises(OSError, match="not a socket"):
        await AdminServer(path, {"ping": _noop}).start()
    assert path.read_text() == "keep me"


async def test_connections_from_other_uids_are_refused(serve):
    """The peer's UID is checked on every connection (here our own UID stands for a stranger's)."""
    stranger = os.geteuid() + 4242
    path = await serve({"ping": _noop}, allowed_uids={stranger})
    answer = await raw(path, b'{"op": "ping"}\n')
    assert answer == {
        "ok": False,
        "error": f"permission denied: uid {os.geteuid()} may not use the admin socket {path}",
    }
    with pytest.raises(AdminError, match=f"^permission denied: uid {os.geteuid()} may not use"):
        await admin_call(path, "ping")


def world_python() -> str | None:
    """A Python interpreter user nobody can run (the test's own may live under an unreadable home)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        real = Path(candidate).resolve()
        dirs_ok = all(p.stat().st_mode & 0o001 for p in real.parents)
        if real.is_file() and real.stat().st_mode & 0o001 and dirs_ok:
            return str(real)
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
@pytest.mark.skipif(world_python() is None, reason="no Python interpreter that user nobody may run")
async def test_another_user_is_refused_even_when_the_file_mode_would_let_it_in(serve, root):
    python = world_python()
    assert python is not None
    path = await serve({"ping": _noop})
    root.chmod(0o755)
    path.chmod(0o666)
    script = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX)\n"
        f"s.connect({str(path)!r})\n"
        "try:\n"
        '    s.sendall(b\'{"op": "ping"}\\n\')\n'
        "except BrokenPipeError:\n"
        "    pass\n"
        "sys.stdout.write(s.makefile().readline())\n"
    )
    proc = await asyncio.create_subprocess_exec(
        python, "-I", "-S", "-c", script, user=65534, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 20.0)
    assert proc.returncode == 0, err.decode()
    assert json.loads(out) == {
        "ok": False,
        "error": f"permission denied: uid 65534 may not use the admin socket {path}",
    }


async def test_bad_requests_get_clear_answers_and_the_server_survives(plugin_admin):
    _node, sock = await plugin_admin("2xt4")
    cases = {
        b"not json\n": "request is not valid JSON",
        b"[1, 2]\n": 'request must be a JSON object like {"op": "status"}, found [1, 2]',
        b'{"target": "1"}\n': 'request has no "op" field',
        b'{"op": 7}\n': 'request field "op" must be a string, found 7',
        b'{"op": "explode"}\n': "unknown op 'explode'; known ops: clear-faults, end-streams, fault, gpu-fault, "
        "gpu-lost, health, off-bus, plugins, reconfigure, recover, reload, status, unmonitored, xid",
        b'{"op": "health", "healthy": false}\n': "op 'health': missing field 'target' (a string)",
        b'{"op": "health", "target": "1", "healthy": "no"}\n': "op 'health': field 'healthy' must be true or false, "
        'found "no"',
        b'{"op": "xid", "target": "1", "xid": true}\n': "op 'xid': field 'xid' must be an integer, found true",
        b'{"op": "status", "verbose": true}\n': "op 'status': unexpected field 'verbose'; 'status' takes: no fields",
        b'{"op": "health", "target": "1", "healthy": true, "colour": 1}\n': "op 'health': unexpected field 'colour'; "
        "'health' takes: target, healthy, xid",
        b'{"op": "plugins", "action": "reboot"}\n': "op 'plugins': field 'action' must be one of \"stop\", "
        '"start", "restart", found "reboot"',
        b'{"op": "fault", "method": "Allocate", "delay": NaN}\n': "request is not valid JSON: NaN is not valid JSON",
        b'{"op": "fault", "code": "INTERNAL"}\n': "op 'fault': missing field 'method' (a string)",
        b'{"op": "fault", "method": "Allocate", "colour": 1}\n': "op 'fault': unexpected field 'colour'; 'fault' "
        "takes: method, times, code, message, delay, resource",
        b'{"op": "fault", "method": "Allocate", "delay": "1"}\n': "op 'fault': field 'delay' must be a number, "
        'found "1"',
        b'{"op": "fault", "method": "Allocate", "times": 0, "code": "INTERNAL"}\n': "times must be at least 1, found 0",
        b'{"op": "fault", "method": "Allocate", "delay": 9999}\n': "delay must be between 0 and 3600 seconds, "
        "found 9999.0",
        b'{"op": "fault", "method": "Allocate"}\n': "a fault needs a 'code' to fail with or a 'delay' in seconds",
        b'{"op": "health", "target": "GPU-nope", "healthy": false}\n': "no device, GPU UUID or GPU index "
        "'GPU-nope' in the inventory",
        b'{"op": "health", "target": "1", "healthy": true, "xid": 79}\n': "an XID only applies when marking a "
        "device unhealthy",
    }
    for payload, error in cases.items():
        answer = await raw(sock, payload)
        assert answer["ok"] is False, payload
        assert answer["error"].startswith(error), (payload, answer["error"])
    oversized = await raw(sock, b'{"op": "status", "x": "' + b"a" * (1024 * 1024 + 10) + b'"}\n')
    assert oversized == {"ok": False, "error": "request is larger than 1048576 bytes; refused"}
    # Several requests on one connection, and still serving after all of the above.
    reader, writer = await asyncio.open_unix_connection(sock)
    writer.write(b'{"op": "clear-faults"}\n\n{"op": "end-streams", "resource": "nvidia.com/gpu"}\n')
    answers = [json.loads(await reader.readline()) for _ in range(2)]
    writer.close()
    assert answers == [{"ok": True, "result": 0}, {"ok": True, "result": 1}]


async def test_an_op_that_raises_is_reported_and_does_not_stop_the_server(serve):
    async def broken() -> None:
        raise RuntimeError("wires crossed")

    async def unserialisable() -> object:
        return object()

    path = await serve({"broken": broken, "odd": unserialisable, "ping": _noop})
    with pytest.raises(AdminError, match=r"^op 'broken' failed: RuntimeError: wires crossed$"):
        await admin_call(path, "broken")
    with pytest.raises(AdminError, match=r"^op 'odd' returned a result that is not JSON$"):
        await admin_call(path, "odd")
    assert await admin_call(path, "ping") == "ok"


async def test_stop_ends_open_connections_quietly(root, caplog, timing):
    running = asyncio.Event()

    async def slow() -> str:
        running.set()
        await asyncio.sleep(30)  # time passing: an op that takes longer than the stop may wait
        return "late"

    server = AdminServer(root / "a.sock", {"ping": _noop, "slow": slow})
    await server.start()
    idle_reader, idle_writer = await asyncio.open_unix_connection(server.path)
    busy_reader, busy_writer = await asyncio.open_unix_connection(server.path)
    busy_writer.write(b'{"op": "slow"}\n')
    await busy_writer.drain()
    await asyncio.wait_for(running.wait(), 5.0)
    with timing.at_most(3.0, "stopping with open connections"):
        await asyncio.wait_for(server.stop(), 25.0)  # not held for the 30 s of the slow op
    assert await asyncio.wait_for(idle_reader.read(), 2.0) == b""
    assert await asyncio.wait_for(busy_reader.read(), 2.0) == b""
    idle_writer.close()
    busy_writer.close()
    await asyncio.wait_for(asyncio.gather(idle_writer.wait_closed(), busy_writer.wait_closed()), 5.0)
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


class _Probe(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    depth: int
    loud: bool = False
    note: str | None = None

    @field_validator("depth")
    @classmethod
    def _shallow(cls, value: int) -> int:
        if value > 3:
            raise ValueError(f"depth must be at most 3, found {value}")
        return value


async def test_an_op_takes_a_models_fields_checked_by_the_protocol_then_by_the_model(serve):
    @takes_model(_Probe, "probe")
    async def probe(name: str, probe: _Probe) -> list[Any]:
        return [name, probe.depth, probe.loud, probe.note]

    assert [(f.name, f.required) for f in op_fields("probe", probe)] == [
        ("name", True),
        ("depth", True),
        ("loud", False),
        ("note", False),
    ]
    path = await serve({"probe": probe})
    assert await admin_call(path, "probe", name="a", depth=2) == ["a", 2, False, None]
    assert await admin_call(path, "probe", name="a", depth=1, loud=True, note="n") == ["a", 1, True, "n"]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": "a"}, "op 'probe': missing field 'depth' (an integer)"),
        ({"name": "a", "depth": "2"}, "op 'probe': field 'depth' must be an integer, found \"2\""),
        ({"name": "a", "depth": 1, "probe": 1}, "op 'probe': unexpected field 'probe'; 'probe' takes: name, depth,"),
        ({"name": "a", "depth": 9}, "depth must be at most 3, found 9"),
    ]
    for fields, error in cases:
        with pytest.raises(AdminError) as refused:
            await admin_call(path, "probe", **fields)
        assert str(refused.value).startswith(error), fields


def test_ctl_options_come_from_a_models_fields():
    options = {a.field: a for a in options_of(_Probe)}
    assert (options["depth"].flag, options["depth"].type, options["depth"].default) == ("--depth", int, None)
    assert options["loud"].switch and options["loud"].flag == "--loud"
    assert options["note"].type is None, "text stays text"
    fault = {a.field: a for a in options_of(FaultSpec)}
    assert list(fault) == list(FaultSpec.model_fields)
    assert fault["code"].type is str.upper and fault["times"].help == "how many calls (default %(default)s)"

    class Listed(BaseModel):
        ids: list[str]

    with pytest.raises(TypeError, match=r"Listed\.ids: no command-line option"):
        options_of(Listed)


def test_ops_with_unsupported_field_types_are_refused_at_construction(root):
    async def takes_a_list_of_numbers(ids: list[int]) -> None:
        return None

    async def takes_a_dict(ids: dict[str, str]) -> None:
        return None

    for op in (takes_a_list_of_numbers, takes_a_dict):
        with pytest.raises(TypeError, match="cannot be of type"):
            AdminServer(root / "a.sock", {"bad": op})


async def test_a_list_of_strings_field_is_checked_item_by_item(serve):
    async def takes_names(names: list[str]) -> list[str]:
        return names[::-1]

    sock = await serve({"names": takes_names})
    assert await admin_call(sock, "names", names=["a", "b"]) == ["b", "a"]
    with pytest.raises(AdminError, match=r"^op 'names': field 'names' must be a list of strings, found \[1\]$"):
        await admin_call(sock, "names", names=[1])
    with pytest.raises(AdminError, match=r'must be a list of strings, found "a"$'):
        await admin_call(sock, "names", names="a")


# --- fakegpu ctl ---------------------------------------------------------------------------------------


def _table_fits(ops: Mapping[str, Any]) -> dict[str, list[str]]:
    """What is wrong between the ctl table and a daemon's ops: unknown fields, required ones ctl cannot send."""
    wrong: dict[str, list[str]] = {}
    table = {op.name: op for op in OPERATIONS}
    for name, op in ops.items():
        if name not in table:
            wrong.setdefault(name, []).append("not in the ctl table")
            continue
        fields = {f.name: f for f in op_fields(name, op)}
        sent = set(table[name].fields)
        wrong[name] = [f"ctl sends {f!r}, which the op does not take" for f in sorted(sent - set(fields))]
        wrong[name] += [
            f"ctl cannot send the required {f!r}" for f, d in fields.items() if d.required and f not in sent
        ]
    return {k: v for k, v in wrong.items() if v}


async def test_the_ctl_table_has_every_op_of_the_three_daemons_with_their_fields(plugin_admin, dra_admin, root):
    node, _ = await plugin_admin("2xt4")
    _apiserver, driver, _ = dra_admin
    plugin_ops = device_plugin_ops(node.live, node.plugins, node.calls)
    kubelet = kubelet_ops(KubeletEmulator(root / "standalone"))
    assert _table_fits(plugin_ops) == {}
    assert _table_fits(dra_ops(driver)) == {}
    assert _table_fits(kubelet) == {}
    assert {op.name for op in OPERATIONS} == set(plugin_ops) | set(dra_ops(driver)) | set(kubelet)
    # ctl sends an op only the kubelet serves to the kubelet's socket: the flag must match who serves it.
    only_kubelet = set(kubelet) - set(plugin_ops) - set(dra_ops(driver))
    assert {op.name for op in OPERATIONS if op.kubelet} == only_kubelet


@pytest.mark.parametrize(
    ("argv", "request_", "result", "line"),
    [
        (["off-bus", "2"], {"gpu": "2"}, ["a", "b"], "GPU 2 fell off the bus (XID 79): 2 device(s) unhealthy: a, b"),
        (
            ["off-bus", "2"],
            {"gpu": "2"},
            [],
            "no device made unhealthy: XID 79 is ignored (non-fatal) by the daemon's health policy "
            "(or the GPU was already unhealthy)",
        ),
        (
            ["health", "3", "--healthy"],
            {"target": "3", "healthy": True},
            [],
            "no device changed: 3 was already healthy",
        ),
        (
            ["health", "3", "--unhealthy"],
            {"target": "3", "healthy": False},
            [f"d{i}" for i in range(10)],
            "marked 10 device(s) unhealthy: d0, d1, d2, d3, d4, d5, d6, d7 and 2 more",
        ),
        (
            ["fault", "ListAndWatch", "--delay", "0.5", "--code", "internal", "--resource", GPU],
            {
                "method": "ListAndWatch",
                "times": 1,
                "code": "INTERNAL",
                "message": "",
                "delay": 0.5,
                "resource": GPU,
                "after": 0,
            },
            {"method": "ListAndWatch", "times": 1, "code": "INTERNAL", "message": "m", "delay": 0.5, "resource": GPU},
            f"planned: the next 1 ListAndWatch call(s) for {GPU} take 0.5s then fail with INTERNAL: m",
        ),
        (
            ["fault", "Allocate", "--after", "3", "--code", "unavailable"],
            {"method": "Allocate", "times": 1, "code": "UNAVAILABLE", "message": "", "delay": 0.0, "after": 3},
            {
                "method": "Allocate",
                "times": 1,
                "code": "UNAVAILABLE",
                "message": "m",
                "delay": 0.0,
                "resource": None,
                "after": 3,
            },
            "planned: 1 Allocate call(s) after the next 3 fail with UNAVAILABLE: m",
        ),
        (
            ["gpu-fault", "ecc-uncorrectable", "--gpu", "3", "--uncontained"],
            {"kind": "ecc-uncorrectable", "gpu": "3", "after_calls": 0, "contained": False},
            {
                "gpu": 3,
                "kind": "ecc-uncorrectable",
                "armed": False,
                "xids": [{"xid": 95, "class": "fatal"}, {"xid": 63, "class": "fatal"}],
                "changed": ["GPU-a::0", "GPU-a::1"],
                "note": "",
            },
            "GPU 3: uncorrectable ECC (XID 95, 63: fatal): device(s) GPU-a::0, GPU-a::1 unhealthy",
        ),
        (
            ["gpu-fault", "xid", "--gpu", "0", "--xid", "13"],
            {"kind": "xid", "gpu": "0", "xid": 13, "after_calls": 0},
            {
                "gpu": 0,
                "kind": "xid",
                "armed": False,
                "xids": [{"xid": 13, "class": "application"}],
                "changed": [],
                "note": "taints gpu.nvidia.com/xid=13:None",
            },
            "GPU 0: XID event (XID 13: application): no device changed health; taints gpu.nvidia.com/xid=13:None",
        ),
        (
            ["gpu-fault", "thermal", "--gpu", "1", "--temperature", "95", "--after-calls", "2"],
            {"kind": "thermal", "gpu": "1", "temperature": 95, "after_calls": 2},
            {"gpu": 1, "kind": "thermal", "armed": True, "calls_left": 2, "fault": "thermal temperature=95"},
            "GPU 1: thermal slowdown armed (thermal temperature=95): strikes when 2 more call(s) use the GPU "
            "(Allocate, NodePrepareResources)",
        ),
        (
            ["recover", "--gpu", "3", "reset"],
            {"what": "reset", "gpu": "3"},
            {"gpu": 3, "what": "reset", "ended": ["ecc-uncorrectable"], "remaining": [], "healthy": False, "note": ""},
            "GPU 3 reset: ended ecc-uncorrectable; its devices stay unhealthy (NVIDIA's plugins never mark an "
            "XID-unhealthy device healthy again)",
        ),
        (
            ["recover", "--gpu", "0", "thermal"],
            {"what": "thermal", "gpu": "0"},
            {"gpu": 0, "what": "thermal", "ended": ["thermal"], "remaining": ["power"], "healthy": True, "note": ""},
            "GPU 0: thermal fault cleared; still power",
        ),
        (
            ["recover", "--gpu", "2", "reset"],
            {"what": "reset", "gpu": "2"},
            {"gpu": 2, "what": "reset", "ended": [], "remaining": [], "healthy": True, "note": ""},
            "GPU 2 reset: no fault to end",
        ),
        (["clear-faults", "Allocate"], {"method": "Allocate"}, 1, "cleared 1 planned fault(s)"),
        (["end-streams"], {}, 2, "ended 2 ListAndWatch stream(s)"),
        (["plugins", "stop"], {"action": "stop"}, {"serving": []}, "plugins stopped"),
        (["plugins", "restart"], {"action": "restart"}, {"serving": [GPU]}, f"plugins restarted; serving {GPU}"),
        (["plugins", "start"], {"action": "start"}, {"serving": []}, "plugins started; serving nothing"),
        (["reload"], {}, {"serving": [GPU]}, f"reloaded; serving {GPU}"),
        (
            ["reconfigure", "--gpus", "4xt4", "--mig-strategy", "mixed", "--new-ids"],
            {"gpus": "4xt4", "mig_strategy": "mixed", "new_ids": True},
            {"gpus": 4, "serving": [GPU]},
            f"reconfigured: 4 GPU(s); serving {GPU}",
        ),
        (
            ["reconfigure", "--mig-layout", "all-1g.10gb"],
            {"mig_layout": "all-1g.10gb"},
            {"gpus": 2, "serving": []},
            "reconfigured: 2 GPU(s); serving nothing",
        ),
    ],
)
def test_ctl_builds_each_request_and_its_summary_line(argv, request_, result, line):
    parser = argparse.ArgumentParser()
    add_ctl_parser(parser.add_subparsers())
    args = parser.parse_args(["ctl", *argv])
    operation = BY_NAME[args.op]
    assert operation.request(args) == {"op": args.op, **request_}
    assert operation.summary(request_, result) == line


async def test_ctl_status_prints_a_table_and_json(plugin_admin):
    node, sock = await plugin_admin("2xt4", node_name="node-ctl")
    await admin_call(sock, "health", target="1", healthy=False, xid=48)
    code, out, err = await ctl("--socket", str(sock), "status")
    assert (code, err) == (0, "")
    gpus = node.inventory.node.gpus
    assert out.startswith("Node node-ctl: device plugin daemon, plugin servers running\n")
    assert any(line.split()[:4] == [GPU, "2", "1", "yes"] for line in out.splitlines())
    assert f"  {gpus[1].uuid}" in out and "Unhealthy (XID 48)" in out
    assert "Faults: none planned" in out
    code, out, err = await ctl("--socket", str(sock), "status", "-o", "json")
    assert code == 0
    assert json.loads(out)["resources"][0]["healthy"] == 1


async def test_ctl_changes_health_and_plans_faults(plugin_admin):
    node, sock = await plugin_admin("2xt4")
    gpu0 = node.inventory.node.gpus[0].uuid
    code, out, err = await ctl("--socket", str(sock), "health", "0", "--unhealthy", "--xid", "79")
    assert (code, out, err) == (0, f"marked 1 device(s) unhealthy (XID 79): {gpu0}\n", "")
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 1}, what="allocatable to drop")
    code, out, _ = await ctl("--socket", str(sock), "xid", "1", "13")
    assert code == 0 and out.startswith("no device made unhealthy: XID 13 is ignored")
    code, out, _ = await ctl(
        "--socket", str(sock), "fault", "Allocate", "--times", "2", "--code", "invalid_argument", "--message", "no"
    )
    assert (code, out) == (0, "planned: the next 2 Allocate call(s) fail with INVALID_ARGUMENT: no\n")
    assert [f.remaining for f in node.live.faults.faults] == [2]
    code, out, _ = await ctl("--socket", str(sock), "status")
    assert code == 0 and "Faults planned:\n  Allocate x2: fail with INVALID_ARGUMENT: no\n" in out
    code, out, _ = await ctl("--socket", str(sock), "clear-faults")
    assert (code, out) == (0, "cleared 1 planned fault(s)\n")


async def test_ctl_unknown_device_is_one_clear_error_line(plugin_admin):
    _node, sock = await plugin_admin("2xt4")
    code, out, err = await ctl("--socket", str(sock), "health", "GPU-nope", "--unhealthy")
    assert (code, out) == (1, "")
    assert err == "fakegpu: error: no device, GPU UUID or GPU index 'GPU-nope' in the inventory\n"


async def test_ctl_without_a_daemon_and_with_bad_usage(root):
    missing = root / "none.sock"
    code, out, err = await ctl("status", env={"FAKEGPU_ADMIN_SOCKET": str(missing)})
    assert (code, out) == (EXIT_NO_DAEMON, "")
    assert err == (
        f"fakegpu: error: no fakegpu daemon is listening on {missing}; "
        f"start one with an admin socket: fakegpu plugin --admin-socket {missing}\n"
    )
    code, _, err = await ctl("--dra", "--socket", str(missing), "status")
    assert code == EXIT_NO_DAEMON and err.endswith(f": fakegpu dra --admin-socket {missing}\n")
    code, _, err = await ctl("--kubelet-dir", str(root), "pods")
    assert code == EXIT_NO_DAEMON and err.endswith(f": fakegpu kubelet --kubelet-dir {root}\n")
    assert err.count("\n") == 1
    code, _, err = await ctl("--socket", str(missing), "health", "3")
    assert code == 2
    assert "one of the arguments --healthy --unhealthy is required" in err and "Traceback" not in err


# --- DRA -----------------------------------------------------------------------------------------------

DRIVER = "gpu.nvidia.com"


async def test_dra_fault_makes_node_prepare_resources_fail(dra_admin):
    apiserver, driver, sock = dra_admin
    uid = apiserver.create_direct(allocated_claim("c", NODE))["metadata"]["uid"]
    await admin_call(sock, "fault", method="NodePrepareResources", code="UNAVAILABLE", message="injected outage")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await prepare(driver.plugin.dra_socket, [("default", "c", uid)])
    assert (err.value.code(), err.value.details()) == (grpc.StatusCode.UNAVAILABLE, "injected outage")
    assert (await prepare(driver.plugin.dra_socket, [("default", "c", uid)])).claims[uid].error == ""
    status = await admin_call(sock, "status")
    assert status["faults"]["fired"] == [{"method": "NodePrepareResources", "what": "failed with UNAVAILABLE"}]
    assert [(c["name"], c["uid"], c["devices"]) for c in status["prepared"]] == [("c", uid, ["gpu-0"])]
    with pytest.raises(AdminError, match=r"does not serve 'Allocate'"):
        await admin_call(sock, "fault", method="Allocate", code="INTERNAL")
    with pytest.raises(AdminError, match=r"unknown resource 'nvidia.com/gpu'; this daemon serves: gpu.nvidia.com"):
        await admin_call(sock, "fault", method="NodeUnprepareResources", code="INTERNAL", resource="nvidia.com/gpu")


async def test_dra_health_by_device_name_taints_the_published_device(dra_admin):
    apiserver, driver, sock = dra_admin
    assert await admin_call(sock, "health", target="gpu-1", healthy=False, xid=79) == ["gpu-1"]

    def taints() -> dict[str, Any]:
        return {
            d["name"]: as_sent(d.get("taints"))
            for s in apiserver.objects("resourceslices")
            for d in s["spec"].get("devices", [])
        }

    await eventually(lambda: bool(taints()["gpu-1"]), "gpu-1 tainted", 3.0)
    assert not taints()["gpu-0"]
    status = await admin_call(sock, "status")
    assert (status["kind"], status["node"], status["slices"]["count"]) == ("dra", NODE, 1)
    assert status["slices"]["generation"] >= 2
    assert [(d["name"], d["health"], d["message"]) for d in status["devices"]] == [
        ("gpu-0", "Healthy", ""),
        ("gpu-1", "Unhealthy", "critical XID 79 reported by NVML"),
    ]
    # A non-fatal XID leaves the device healthy (with NVIDIA's message and a taint with effect None).
    assert await admin_call(sock, "xid", target="gpu-0", xid=13) == []
    await eventually(lambda: bool(taints()["gpu-0"]), "gpu-0 tainted", 3.0)
    assert taints()["gpu-0"] == [{"key": "gpu.nvidia.com/xid", "value": "13", "effect": "None"}]
    assert await admin_call(sock, "off-bus", gpu="0") == ["gpu-0"]
    assert await admin_call(sock, "health", target=str(driver.live.inventory.node.gpus[1].uuid), healthy=True) == [
        "gpu-1"
    ]


async def test_dra_gpu_lost_and_unmonitored_ops(dra_admin):
    """``fakegpu ctl gpu-lost`` / ``unmonitored``: NVIDIA's ``gpu.nvidia.com/gpu-lost`` on every device and
    ``gpu.nvidia.com/unmonitored`` on one GPU's (kubernetes-sigs/dra-driver-nvidia-gpu
    ``cmd/gpu-kubelet-plugin/device_health.go`` at commit bc3c4d8)."""
    apiserver, _driver, sock = dra_admin
    code, out, _err = await ctl("--socket", str(sock), "unmonitored", "1")
    assert (code, out) == (0, "GPU 1 unmonitored (NVML cannot watch its events): 1 device(s): gpu-1\n")
    assert await admin_call(sock, "gpu-lost") == ["gpu-0", "gpu-1"]

    def keys() -> dict[str, list[str]]:
        return {
            d["name"]: [t["key"] for t in d.get("taints", [])]
            for s in apiserver.objects("resourceslices")
            for d in s["spec"].get("devices", [])
        }

    await eventually(lambda: keys()["gpu-0"], "gpu-0 tainted", 3.0)
    assert keys() == {
        "gpu-0": ["gpu.nvidia.com/gpu-lost"],
        "gpu-1": ["gpu.nvidia.com/unmonitored", "gpu.nvidia.com/gpu-lost"],
    }


@pytest.mark.parametrize("dra_admin", [False], indirect=True)
async def test_dra_health_ops_say_when_the_health_gate_is_off(dra_admin):
    """Without NVMLDeviceHealthCheck NVIDIA's driver watches no device health: the op says so in one line."""
    apiserver, driver, sock = dra_admin
    code, out, err = await ctl("--socket", str(sock), "xid", "1", "79")
    assert (code, out) == (EXIT_REFUSED, "")
    assert err.strip().splitlines() == [f"fakegpu: error: {HEALTH_GATE_OFF}"]
    assert driver.live.unhealthy()  # the fake GPU did have the XID
    code, out, _err = await ctl("--socket", str(sock), "status")
    assert code == 0
    assert "Device health: NVMLDeviceHealthCheck is off, so no taints and no health stream are published" in out
    await driver.publisher.publish()
    assert not any(d.get("taints") for s in apiserver.objects("resourceslices") for d in s["spec"]["devices"])


async def test_ctl_status_of_the_dra_daemon(dra_admin):
    _apiserver, _driver, sock = dra_admin
    code, out, err = await ctl("--socket", str(sock), "status")
    assert (code, err) == (0, "")
    assert out.startswith(f"Node {NODE}: DRA driver {DRIVER} (static MIG)\nResourceSlices: 1 published")
    assert "Prepared claims: none" in out


async def test_a_second_daemon_does_not_take_over_a_live_admin_socket(fakegpu_dir):
    async def status() -> str:
        return "first"

    path = fakegpu_dir / "adm.sock"
    first = AdminServer(path, {"status": status})
    await first.start()
    try:
        second = AdminServer(path, {"status": status})
        with pytest.raises(SocketPathError, match="is in use by another running process"):
            await second.start()
        assert await admin_call(path, "status") == "first"
    finally:
        await first.stop()
