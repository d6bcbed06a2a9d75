"""The kubelet emulator's admin socket: pods run, listed and deleted through it, a restart (of the emulator
or of its process) that keeps them, the clock moved; and ``fakegpu kubelet``'s flags.

The node is the ``fakegpu_node`` fixture (kubelet emulator + device plugins on real sockets); every change
goes through the admin socket and its effect is checked where the kubelet or the plugin sees it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import yaml

from fakegpu.cli.ctl_command import add_ctl_parser, socket_path
from fakegpu.cli.main import main
from fakegpu.control.client import admin_call
from fakegpu.control.operations import BY_NAME
from fakegpu.control.protocol import AdminError
from fakegpu.control.server import AdminServer
from fakegpu.control.status_text import render_status
from fakegpu.kubelet.admin_ops import kubelet_ops, pod_uid
from fakegpu.kubelet.daemon import run_kubelet
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.kubelet.pod_records import record_path
from fakegpu.kubelet.pod_spec import ContainerSpec, effective_requests, parse_requests
from fakegpu.runtime.unix_socket import SocketPathError
from fakegpu.testing.fake_node import FakeNode
from tests.eventually import eventually

GPU = "nvidia.com/gpu"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def kubelet_admin(fakegpu_node) -> AsyncIterator[Callable[..., Awaitable[tuple[FakeNode, Path]]]]:
    servers: list[AdminServer] = []

    async def make(*args: object, **kwargs: object) -> tuple[FakeNode, Path]:
        node: FakeNode = await fakegpu_node(*args, **kwargs)
        server = AdminServer(node.root / "fakegpu-kubelet.sock", kubelet_ops(node.kubelet))
        await server.start()
        servers.append(server)
        return node, server.path

    yield make
    for server in servers:
        await server.stop()


async def test_run_pod_gives_two_gpus_with_their_envs_and_delete_frees_them(kubelet_admin):
    node, sock = await kubelet_admin("4xt4", node_name="n1")
    pod = await admin_call(sock, "run-pod", name="train", requests=[f"{GPU}=2"])
    assert (pod["namespace"], pod["name"], pod["phase"]) == ("default", "train", "Running")
    assert pod["uid"] == pod_uid("default", "train")
    [main_container] = pod["containers"]
    ids = main_container["devices"][GPU]
    assert len(ids) == 2 and set(ids) <= set(node.kubelet.devices(GPU))
    assert main_container["envs"]["NVIDIA_VISIBLE_DEVICES"] == ",".join(ids)
    assert node.kubelet.manager.in_use(GPU) == set(ids)
    assert [p["name"] for p in await admin_call(sock, "pods")] == ["train"]

    with pytest.raises(AdminError, match=r"^pod default/train already exists"):
        await admin_call(sock, "run-pod", name="train", requests=[f"{GPU}=1"])
    with pytest.raises(AdminError, match=r"OutOfnvidia\.com/gpu: Pod was rejected: Node didn't have enough resource"):
        await admin_call(sock, "run-pod", name="big", requests=[f"{GPU}=3"])
    assert [p["name"] for p in await admin_call(sock, "pods")] == ["train"], "a rejected pod is not listed"

    deleted = await admin_call(sock, "delete-pod", name="train")
    assert deleted["released"] == {GPU: ids}
    assert node.kubelet.manager.in_use(GPU) == set() and await admin_call(sock, "pods") == []
    assert not record_path(node.root, pod["uid"]).exists()
    with pytest.raises(AdminError, match=r"^no pod default/train on this kubelet; its pods: none$"):
        await admin_call(sock, "delete-pod", name="train")


@pytest.mark.parametrize(
    ("requests", "error"),
    [
        (["nvidia.com/gpu"], "requests: expected RESOURCE=COUNT like nvidia.com/gpu=2, found 'nvidia.com/gpu'"),
        (["nvidia.com/gpu=0"], "requests: the count of nvidia.com/gpu must be at least 1, found 0"),
        (["nvidia.com/gpu=1", "nvidia.com/gpu=2"], "requests: nvidia.com/gpu is requested twice"),
    ],
)
async def test_bad_requests_are_refused_naming_the_field(kubelet_admin, requests, error):
    _node, sock = await kubelet_admin("2xt4")
    with pytest.raises(AdminError, match=f"^{re.escape(error)}$"):
        await admin_call(sock, "run-pod", name="p", requests=requests)


async def test_init_container_devices_are_reused_and_a_sidecar_keeps_its_own(kubelet_admin):
    node, sock = await kubelet_admin("3xt4")
    pod = await admin_call(
        sock, "run-pod", name="job", init_requests=[f"{GPU}=2"], sidecar_requests=[f"{GPU}=1"], requests=[f"{GPU}=2"]
    )
    init, sidecar, app = pod["containers"]
    assert [(c["name"], c["kind"]) for c in pod["containers"]] == [
        ("init", "init"),
        ("sidecar", "sidecar"),
        ("main", "app"),
    ]
    # The kubelet hands a finished init container's devices out again; the sidecar keeps running, so the
    # app container cannot get its device.
    assert set(sidecar["devices"][GPU]) < set(init["devices"][GPU])
    assert set(app["devices"][GPU]) & set(sidecar["devices"][GPU]) == set()
    assert len(node.kubelet.manager.in_use(GPU)) == 3
    assert effective_requests(
        [ContainerSpec("i", {GPU: 2}, "init"), ContainerSpec("s", {GPU: 1}, "sidecar"), ContainerSpec("m", {GPU: 2})]
    ) == {GPU: 3}


def test_effective_requests_follow_the_sidecar_rules():
    init, side, app = (
        ContainerSpec("i", {GPU: 4}, "init"),
        ContainerSpec("s", {GPU: 1}, "sidecar"),
        ContainerSpec("a", {GPU: 1}),
    )
    assert effective_requests([init, app]) == {GPU: 4}
    assert effective_requests([side, init, app]) == {GPU: 5}  # the init container runs beside the sidecar
    assert effective_requests([init, side, app]) == {GPU: 4}
    assert effective_requests([side, app]) == {GPU: 2}
    assert parse_requests([" nvidia.com/gpu=2 "], "x") == {GPU: 2}


async def test_restart_kubelet_keeps_the_pods_devices_and_waits_for_the_plugins(kubelet_admin):
    node, sock = await kubelet_admin("2xt4")
    pod = await admin_call(sock, "run-pod", name="train", requests=[f"{GPU}=2"])
    answer = await admin_call(sock, "restart-kubelet")
    assert answer == {"starts": 2, "registered": [GPU], "missing": [], "pods": 1}
    assert node.kubelet.allocatable() == {GPU: 2}, "the answer comes after the plugin's devices"
    [after] = await admin_call(sock, "pods")
    assert after["containers"] == pod["containers"]
    assert BY_NAME["restart-kubelet"].summary({}, answer) == (
        "kubelet restarted (start 2); 1 pod(s) kept; registered again: nvidia.com/gpu"
    )


async def test_a_new_emulator_process_restores_pods_from_the_checkpoint_and_records(kubelet_admin):
    node, sock = await kubelet_admin("2xt4", node_name="n1")
    await admin_call(sock, "run-pod", name="train", namespace="ml", requests=[f"{GPU}=1"])
    [before] = await admin_call(sock, "pods")
    # A second emulator on the same directory stands for the restarted process: nothing in memory.
    await node.kubelet.stop()
    fresh = KubeletEmulator(node.root)
    await fresh.start()
    try:
        assert fresh.pods[before["uid"]].restored
        ops = kubelet_ops(fresh)
        [after] = await ops["pods"]()
        assert (after["namespace"], after["name"], after["restored"]) == ("ml", "train", True)
        assert after["containers"] == before["containers"], "devices and envs from the checkpoint"
        assert [p.name for p in fresh.active_pods()] == ["train"], "the pod resources API lists it again"
        await eventually(lambda: fresh.allocatable() == {GPU: 2}, "the plugin to register with the new kubelet")
        second = await ops["run-pod"](name="next", requests=[f"{GPU}=1"])
        assert set(second["containers"][0]["devices"][GPU]).isdisjoint(before["containers"][0]["devices"][GPU])
    finally:
        await fresh.stop()


async def test_a_broken_pod_record_is_skipped_with_its_path(fakegpu_dir, caplog):
    kubelet = KubeletEmulator(fakegpu_dir)
    bad = record_path(fakegpu_dir, "broken")
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    async with kubelet:
        assert kubelet.pods == {}
    assert f"ignoring the unreadable pod record {bad}" in caplog.text


async def test_advance_clock_drops_a_gone_plugins_resource_after_the_grace_period(kubelet_admin):
    node, sock = await kubelet_admin("2xt4", grace_period=60.0)
    await node.plugins.stop()
    await eventually(lambda: node.kubelet.allocatable() == {GPU: 0}, "the plugin's stream to end")
    status = await admin_call(sock, "status")
    assert status["resources"][0]["registered"] is False
    assert "gone 0s (dropped after 60s)" in render_status(status)
    answer = await admin_call(sock, "advance-clock", seconds=61)
    assert (answer["capacity"], answer["allocatable"]) == ({}, {})
    with pytest.raises(AdminError, match="the clock only moves forward"):
        await admin_call(sock, "advance-clock", seconds=-1)


async def test_kubelet_status_shows_resources_and_pods_not_allocations(kubelet_admin):
    node, sock = await kubelet_admin("2xt4", node_name="n1")
    await admin_call(sock, "run-pod", name="train", requests=[f"{GPU}=1"])
    text = render_status(await admin_call(sock, "status"))
    assert text.startswith(f"Kubelet emulator in {node.root}: running, started 1 time(s)\n")
    assert any(line.split() == [GPU, "2", "2", "1", "registered"] for line in text.splitlines())
    assert "pod default/train  Running" in text and "Allocations" not in text


def test_kubelet_needs_a_kubelet_dir(capsys):
    assert main(["kubelet"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "fakegpu: error: fakegpu kubelet needs --kubelet-dir DIR (the kubelet root dir to serve in); "
        "see 'fakegpu kubelet --help'\n"
    )
    assert main(["kubelet", "--dir", "/tmp/a", "--kubelet-dir", "/tmp/b"]) == 2
    assert "--dir /tmp/a and --kubelet-dir /tmp/b disagree" in capsys.readouterr().err


async def test_kubelet_dir_alias_warns_once_and_the_admin_socket_is_on_by_default(root):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "fakegpu", "kubelet", "--dir", str(root), "--dir", str(root),
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = [(await asyncio.wait_for(proc.stdout.readline(), 30)).decode() for _ in range(2)]
        assert lines[1] == f"admin socket {root}/fakegpu-kubelet.sock (fakegpu ctl --kubelet-dir {root} ...)\n"
        assert await admin_call(root / "fakegpu-kubelet.sock", "pods") == []
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    assert err.decode().count("deprecated") == 1
    assert not (root / "fakegpu-kubelet.sock").exists()


def test_kubelet_help_names_the_flags_and_the_default_socket():
    out = subprocess.run(
        [sys.executable, "-m", "fakegpu", "kubelet", "--help"], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert "--kubelet-dir DIR" in out and "KUBELET_DIR/fakegpu-kubelet.sock" in out and "--dir" not in out


async def test_a_second_kubelet_on_a_served_dir_is_refused_before_it_touches_a_socket(root):
    stop = asyncio.Event()
    first = asyncio.create_task(run_kubelet(root, 300.0, stop=stop, admin_socket=root / "fakegpu-kubelet.sock"))
    try:
        await eventually((root / "device-plugins" / "kubelet.sock").exists, "the first kubelet to serve")
        served = (root / "device-plugins" / "kubelet.sock").stat().st_ino
        with pytest.raises(SocketPathError, match="is in use by another running process"):
            await run_kubelet(root, 300.0, stop=asyncio.Event(), admin_socket=root / "fakegpu-kubelet.sock")
        assert (root / "device-plugins" / "kubelet.sock").stat().st_ino == served, "the first one's socket stays"
        assert await admin_call(root / "fakegpu-kubelet.sock", "pods") == []
    finally:
        stop.set()
        assert await asyncio.wait_for(first, 10) == 0


@pytest.mark.parametrize(
    ("argv", "env", "socket"),
    [
        (["--socket", "/s", "run-pod", "p"], {"FAKEGPU_ADMIN_SOCKET": "/e"}, "/s"),
        (["run-pod", "p"], {"FAKEGPU_ADMIN_SOCKET": "/e"}, "/var/lib/kubelet/fakegpu-kubelet.sock"),
        (["--kubelet-dir", "/k", "status"], {"FAKEGPU_ADMIN_SOCKET": "/e"}, "/k/fakegpu-kubelet.sock"),
        (["--kubelet", "status"], {}, "/var/lib/kubelet/fakegpu-kubelet.sock"),
        (["status"], {"FAKEGPU_ADMIN_SOCKET": "/e"}, "/e"),
        (["status"], {}, "/var/run/fakegpu/plugin.sock"),
        (["--dra", "status"], {}, "/var/run/fakegpu/dra.sock"),
    ],
)
def test_ctl_finds_each_daemons_socket(argv, env, socket):
    parser = argparse.ArgumentParser()
    add_ctl_parser(parser.add_subparsers())
    assert socket_path(parser.parse_args(["ctl", *argv]), env) == Path(socket)


async def test_ctl_lists_pods_as_yaml_and_json(kubelet_admin, capsys):
    node, _sock = await kubelet_admin("2xt4")
    await admin_call(_sock, "run-pod", name="train", requests=[f"{GPU}=1"])
    argv = ["ctl", "--kubelet-dir", str(node.root), "pods"]
    assert await asyncio.to_thread(main, [*argv, "-o", "yaml"]) == 0
    [pod] = yaml.safe_load(capsys.readouterr().out)
    assert await asyncio.to_thread(main, [*argv, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [pod]
    assert pod["name"] == "train" and len(pod["containers"][0]["devices"][GPU]) == 1
