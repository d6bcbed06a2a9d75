"""``fakegpu plugin`` with a CDI deviceListStrategy: the spec is there before any Allocate, stays in step with
reloads and ``fakegpu ctl reconfigure``, and outlives the daemon.

Follows NVIDIA/k8s-device-plugin v0.20.0: ``cmd/nvidia-device-plugin/plugin-manager.go`` (``NewPluginManager``
calls ``CreateCDISpecFile`` before any plugin starts, on every (re)start of the plugins: SIGHUP, a new
config), ``cmd/nvidia-device-plugin/main.go`` (``stopPlugins`` on shutdown removes no spec) and
``internal/cdi/cdi.go`` (``CreateSpecFile`` writes ``k8s.device-plugin.nvidia.com-gpu.json`` in /var/run/cdi).
Names are resolved as a CDI runtime does (``tests/cdi_runtime.py``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from fakegpu.cli.inventory_options import inventory_inputs
from fakegpu.cli.main import full_parser
from fakegpu.control.client import admin_call
from fakegpu.fakeplugin.daemon import run_plugin_daemon
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.kubelet_paths import KubeletPaths
from tests.cdi_runtime import load_specs, resolve
from tests.daemon_tasks import stop_and_wait
from tests.eventually import eventually

GPU = "nvidia.com/gpu"
SPEC = "k8s.device-plugin.nvidia.com-gpu.json"
KIND = "k8s.device-plugin.nvidia.com/gpu"


def config(id_strategy: str) -> str:
    return yaml.safe_dump(
        {"version": "v1", "flags": {"plugin": {"deviceListStrategy": "cdi-cri", "deviceIDStrategy": id_strategy}}}
    )


def spec_names(cdi: Path) -> list[str]:
    return sorted(load_specs(cdi)) if (cdi / SPEC).exists() else []


async def allocate_and_resolve(kubelet: KubeletEmulator, cdi: Path, pod: str) -> Any:
    """Run a one-GPU pod and resolve its CDI devices through the spec files; returns the container's edits."""
    started = await kubelet.run_pod(pod, {"c": {GPU: 1}})
    assert started.admitted, started
    names = [c.name for c in started.responses["c"][GPU].cdi_devices]
    assert len(names) == 1
    return names[0], resolve(cdi, names)


async def test_the_spec_follows_start_reload_and_reconfigure_and_outlives_the_daemon(root: Path) -> None:
    cdi = root / "cdi"
    config_file = root / "config.yaml"
    config_file.write_text(config("uuid"))
    admin = root / "admin.sock"
    args = full_parser().parse_args(
        [
            "plugin",
            "--node-name",
            "n1",
            "--gpus",
            "2xa100-40gb",
            "--config-file",
            str(config_file),
            "--cdi-root",
            str(cdi),
        ]
    )
    assert args.cdi_root == cdi
    assert full_parser().parse_args(["plugin"]).cdi_root == Path("/var/run/cdi")
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_plugin_daemon(
            inventory_inputs(args, {}), KubeletPaths(root / "kubelet"), stop=stop, admin_socket=admin, cdi_root=cdi
        )
    )
    try:
        await kubelet.wait_for(lambda: kubelet.allocatable().get(GPU) == 2 or task.done(), 10.0, "devices")
        assert not task.done()
        uuids = spec_names(cdi)
        assert len(uuids) == 2, "written before the plugin registered"
        name, edits = await allocate_and_resolve(kubelet, cdi, "p1")
        assert name in uuids and edits.env == {"NVIDIA_VISIBLE_DEVICES": "void"}

        # A new config (NVIDIA restarts its plugins and writes the spec again): index IDs from now on.
        config_file.write_text(config("index"))
        index_names = [f"{KIND}=0", f"{KIND}=1"]
        await eventually(
            lambda: spec_names(cdi) == index_names, "the spec with index device names", detail=lambda: spec_names(cdi)
        )
        name, _ = await allocate_and_resolve(kubelet, cdi, "p2")
        assert name in (f"{KIND}=0", f"{KIND}=1")

        # fakegpu ctl reconfigure: two more GPUs, whose names must resolve too.
        await admin_call(admin, "reconfigure", gpus="4xa100-40gb")
        await eventually(lambda: len(spec_names(cdi)) == 4, "the spec of four GPUs", detail=lambda: spec_names(cdi))
        await kubelet.wait_for(lambda: kubelet.allocatable().get(GPU) == 4, 10.0, "four GPUs")
        for pod in ("p3", "p4"):
            name, _ = await allocate_and_resolve(kubelet, cdi, pod)
            assert name in spec_names(cdi)
    finally:
        try:
            assert await stop_and_wait(stop, task) == [0]
        finally:
            await kubelet.stop()
    # NVIDIA's stopPlugins leaves the spec: a container restarting while the plugin is down still starts.
    assert sorted(p.name for p in cdi.iterdir()) == [SPEC]
    assert len(spec_names(cdi)) == 4


async def test_without_a_cdi_strategy_nothing_is_written(root: Path) -> None:
    """``cdi.New`` returns the null handler unless a CDI strategy is configured (``internal/cdi/cdi.go``)."""
    args = full_parser().parse_args(["plugin", "--node-name", "n1", "--gpus", "1xt4", "--cdi-root", str(root / "cdi")])
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_plugin_daemon(inventory_inputs(args, {}), KubeletPaths(root / "kubelet"), stop=stop, cdi_root=args.cdi_root)
    )
    try:
        await kubelet.wait_for(lambda: kubelet.allocatable().get(GPU) == 1 or task.done(), 10.0, "devices")
        assert not task.done()
    finally:
        try:
            await stop_and_wait(stop, task)
        finally:
            await kubelet.stop()
    assert not (root / "cdi").exists()
