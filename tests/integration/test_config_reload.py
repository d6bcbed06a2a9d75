"""Config reloads: a valid config takes effect, an invalid one is reported and the node keeps serving."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

GPU = "nvidia.com/gpu"


def write_config(path: Path, data: dict[str, object]) -> None:
    path.write_text(yaml.safe_dump(data))
    # Make the change visible even on filesystems with coarse mtimes.
    stamp = time.time() + 1
    os.utime(path, (stamp, stamp))


async def test_changed_config_file_reloads(fakegpu_node):
    node = await fakegpu_node("2xa100-40gb", config={"version": "v1"})
    assert node.capacity() == {GPU: 2}
    config = Path(node.inputs.config_file)
    write_config(
        config,
        {
            "version": "v1",
            "sharing": {"timeSlicing": {"renameByDefault": True, "resources": [{"name": GPU, "replicas": 3}]}},
        },
    )
    await node.kubelet.wait_for(lambda: node.allocatable().get("nvidia.com/gpu.shared") == 6)
    assert node.plugins.servers.keys() == {"nvidia.com/gpu.shared"}
    # The vanished resource's plugin stopped: its stream ended, so the kubelet marks it unhealthy.
    await node.kubelet.wait_for(lambda: node.allocatable().get(GPU) == 0)
    assert not (node.kubelet.paths.device_plugins / "nvidia-gpu.sock").exists()


async def test_invalid_config_keeps_the_running_inventory(fakegpu_node):
    node = await fakegpu_node("2xa100-40gb", config={"version": "v1"})
    config = Path(node.inputs.config_file)
    write_config(config, {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": GPU, "replicas": 1}]}}})
    await node.kubelet.wait_for(lambda: node.plugins.stats.reload_errors != [])
    assert "number of replicas must be >= 2" in node.plugins.stats.reload_errors[0]
    assert str(config) in node.plugins.stats.reload_errors[0]
    await node.wait_kubelet_current(what="the rejected config")  # a wrong inventory change would show by now
    assert node.allocatable() == {GPU: 2}
    assert (await node.run_pod("p", {"c": {GPU: 1}})).admitted
    config.write_bytes(b"\x00\xff garbage")
    assert await node.reload() is False
    assert node.allocatable() == {GPU: 2}


async def test_reload_with_mig_repartition(fakegpu_node):
    node = await fakegpu_node("1xh100-80gb", mig_layout="all-1g.10gb", mig_strategy="mixed")
    assert node.capacity() == {"nvidia.com/mig-1g.10gb": 7}
    node.inputs = type(node.inputs)(**{**node.inputs.__dict__, "mig_layout": "all-3g.40gb"})
    assert await node.reload() is True
    await node.kubelet.wait_for(lambda: node.allocatable().get("nvidia.com/mig-3g.40gb") == 2)
    # Stale MIG resource lingers with capacity until the kubelet's grace period (NVIDIA #240).
    assert node.capacity()["nvidia.com/mig-1g.10gb"] == 7
    assert node.allocatable()["nvidia.com/mig-1g.10gb"] == 0


async def _wait_line(proc: asyncio.subprocess.Process, needle: str, timeout: float = 20.0) -> str:
    """The first line of ``proc``'s stdout that holds ``needle``. Every read is under the deadline, so a
    process that stops writing fails the test after ``timeout`` seconds instead of hanging it."""
    assert proc.stdout is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(timeout):
            while line := (await proc.stdout.readline()).decode():
                if needle in line:
                    return line
                seen.append(line.rstrip("\n"))
    except TimeoutError:
        raise AssertionError(f"never saw {needle!r} within {timeout} s; last lines: {seen[-5:]}") from None
    raise AssertionError(f"never saw {needle!r}: the output ended; last lines: {seen[-5:]}")


async def _stopped(proc: asyncio.subprocess.Process, timeout: float = 10.0) -> int:
    """``proc``'s exit status, failing the test if it has not exited within ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        return await proc.wait()


async def test_waiting_for_a_line_is_bounded_when_the_process_writes_nothing():
    """A daemon that stops writing fails the wait at its deadline: a blocking read would hang the test."""
    silent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys; print('ready', flush=True); sys.stdin.read()",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        with pytest.raises(AssertionError, match=r"never saw 'listening' within 0.3 s; last lines: \['ready'\]"):
            await _wait_line(silent, "listening", timeout=0.3)
    finally:
        silent.kill()
        await _stopped(silent)


async def test_daemons_sighup_reload_and_sigterm(fakegpu_dir):
    """The real CLI processes: kubelet emulator + plugin daemon; SIGHUP reloads, SIGTERM cleans up."""
    config = fakegpu_dir / "config.yaml"
    config.write_text("version: v1\n")
    root = fakegpu_dir / "k"
    kubelet = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "fakegpu",
        "kubelet",
        "--dir",
        str(root),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    plugin = None
    try:
        await _wait_line(kubelet, "listening")
        plugin = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "fakegpu",
            "plugin",
            "--kubelet-dir",
            str(root),
            "--gpus",
            "2xt4",
            "--config-file",
            str(config),
            "--node-name",
            "n1",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        await _wait_line(kubelet, "nvidia.com/gpu capacity=2 allocatable=2")
        config.write_text(
            yaml.safe_dump({"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": GPU, "replicas": 2}]}}})
        )
        plugin.send_signal(signal.SIGHUP)
        await _wait_line(kubelet, "nvidia.com/gpu capacity=4 allocatable=4")
        plugin.send_signal(signal.SIGTERM)
        assert await _stopped(plugin) == 0
        await _wait_line(kubelet, "nvidia.com/gpu capacity=4 allocatable=0")
        assert not (root / "device-plugins" / "nvidia-gpu.sock").exists()
    finally:
        for proc in (plugin, kubelet):
            if proc is not None and proc.returncode is None:
                proc.terminate()
                await _stopped(proc)
    assert kubelet.returncode == 0


def test_plugin_daemon_refuses_a_bad_first_config(fakegpu_dir):
    config = fakegpu_dir / "bad.yaml"
    config.write_text("version: v1\nflags:\n  migStrategy: sideways\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fakegpu",
            "plugin",
            "--kubelet-dir",
            str(fakegpu_dir),
            "--config-file",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith(f"{config}: flags.migStrategy: unknown MIG strategy: sideways")
    assert "Traceback" not in proc.stderr


async def test_reload_keeps_capacity_of_every_vanished_resource(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb", mig_layout="all-balanced", mig_strategy="mixed")
    before = node.capacity()
    assert before == {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-3g.40gb": 2}
    node.inputs = type(node.inputs)(**{**node.inputs.__dict__, "mig_layout": "all-7g.80gb"})
    assert await node.reload() is True
    await node.kubelet.wait_for(lambda: node.allocatable().get("nvidia.com/mig-7g.80gb") == 2)
    await node.kubelet.wait_for(lambda: all(node.allocatable()[k] == 0 for k in before))
    assert {k: node.capacity()[k] for k in before} == before
