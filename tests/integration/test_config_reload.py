"""Config reloads: a valid config takes effect, an invalid one is reported and the node keeps serving."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

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


def _wait_line(proc: subprocess.Popen[str], needle: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if needle in line:
            return line
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"never saw {needle!r}")


def test_daemons_sighup_reload_and_sigterm(fakegpu_dir):
    """The real CLI processes: kubelet emulator + plugin daemon; SIGHUP reloads, SIGTERM cleans up."""
    config = fakegpu_dir / "config.yaml"
    config.write_text("version: v1\n")
    root = fakegpu_dir / "k"
    kubelet = subprocess.Popen(
        [sys.executable, "-m", "fakegpu", "kubelet", "--dir", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    plugin = None
    try:
        _wait_line(kubelet, "listening")
        plugin = subprocess.Popen(
            [
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
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_line(kubelet, "nvidia.com/gpu capacity=2 allocatable=2")
        config.write_text(
            yaml.safe_dump({"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": GPU, "replicas": 2}]}}})
        )
        plugin.send_signal(signal.SIGHUP)
        _wait_line(kubelet, "nvidia.com/gpu capacity=4 allocatable=4")
        plugin.send_signal(signal.SIGTERM)
        assert plugin.wait(10) == 0
        _wait_line(kubelet, "nvidia.com/gpu capacity=4 allocatable=0")
        assert not (root / "device-plugins" / "nvidia-gpu.sock").exists()
    finally:
        for proc in (plugin, kubelet):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(10)
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
