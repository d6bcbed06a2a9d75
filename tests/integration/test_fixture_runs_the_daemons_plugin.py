"""The pytest fixture's node runs the plugin the ``fakegpu plugin`` daemon runs (``fakeplugin.plugin_stack``).

The daemon and a ``FakeNode`` get the same inputs, with the config named only by ``CONFIG_FILE`` in the
environment as NVIDIA's DaemonSet names it; each serves its own kubelet emulator over real sockets. Both
kubelets must see the same resources and device IDs, both must reload when the file changes, and both must
write the same CDI specs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fakegpu.control.client import admin_call
from fakegpu.fakeplugin.daemon import run_plugin_daemon
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.bug_modes import BugMode
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.inventory import Inventory
from fakegpu.testing.fake_node import FakeNode
from tests.daemon_tasks import stop_and_wait
from tests.eventually import eventually

GPU = "nvidia.com/gpu"
GPU_SPEC = "k8s.device-plugin.nvidia.com-gpu.json"


def config(id_strategy: str, replicas: int = 1) -> str:
    plugin: dict[str, Any] = {
        "version": "v1",
        "flags": {"plugin": {"deviceListStrategy": "cdi-cri", "deviceIDStrategy": id_strategy}},
    }
    if replicas > 1:
        plugin["sharing"] = {"timeSlicing": {"resources": [{"name": GPU, "replicas": replicas}]}}
    return yaml.safe_dump(plugin)


def device_ids(inventory: Inventory) -> set[str]:
    return {d.id for r in inventory.resources for d in r.devices}


def seen(kubelet: KubeletEmulator) -> dict[str, dict[str, str]]:
    """Every resource the kubelet holds, with its devices' IDs and health."""
    return {name: kubelet.devices(name) for name in sorted(kubelet.capacity())}


def specs(cdi_root: Path) -> dict[str, str]:
    """The spec files' content by file name."""
    return {p.name: p.read_text() for p in sorted(cdi_root.iterdir())} if cdi_root.exists() else {}


def gpu_names(cdi_root: Path) -> list[str]:
    """The device names of the ``gpu`` class spec (none while it is not written)."""
    path = cdi_root / GPU_SPEC
    return sorted(d["name"] for d in json.loads(path.read_text())["devices"]) if path.exists() else []


@dataclass
class SideBySide:
    """The ``fakegpu plugin`` daemon on one kubelet emulator and a ``FakeNode`` on its own, from the same inputs."""

    kubelet: KubeletEmulator
    daemon: asyncio.Task[int]
    node: FakeNode

    def daemon_running(self) -> None:
        if self.daemon.done():
            raise RuntimeError("the daemon exited")  # not "not yet": a wait fails at once


@contextlib.asynccontextmanager
async def side_by_side(
    root: Path, inputs: InventoryInputs, bugs: frozenset[BugMode] = frozenset(), **daemon: Any
) -> AsyncIterator[SideBySide]:
    """Both started; on the way out both stopped, the daemon with exit status 0."""
    kubelet = KubeletEmulator(root / "dk")
    await kubelet.start()
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_plugin_daemon(inputs, KubeletPaths(root / "dk"), bug_modes=bugs, stop=stop, **daemon)
    )
    node = FakeNode(root / "fk", inputs, bugs=tuple(bugs))
    try:
        await node.start()
        yield SideBySide(kubelet, task, node)
    finally:
        try:
            await node.stop()
        finally:
            try:
                assert await stop_and_wait(stop, task) == [0]
            finally:
                await kubelet.stop()


async def test_the_fixture_and_the_daemon_serve_and_reload_the_same_plugin(root: Path) -> None:
    config_file = root / "plugin-config.yaml"
    config_file.write_text(config("uuid"))
    inputs = InventoryInputs(node_name="n1", gpus=("2xa100-40gb",), env={"CONFIG_FILE": str(config_file)})
    daemon_cdi = root / "daemon-cdi"
    async with side_by_side(root, inputs, cdi_root=daemon_cdi) as both:
        kubelet, node = both.kubelet, both.node
        assert node.cdi_root == root / "fk" / "cdi"
        expected = load_inventory(inputs).resource(GPU)
        assert expected is not None and len(expected.devices) == 2
        want = {GPU: {d.id: "Healthy" for d in expected.devices}}

        def both_serve(view: dict[str, dict[str, str]]) -> bool:
            both.daemon_running()
            assert seen(kubelet) == seen(node.kubelet) == view
            return True

        await eventually(lambda: both_serve(want), "both kubelets to see the two GPUs", 10.0)
        assert specs(daemon_cdi) == specs(node.cdi_root) != {}
        assert sorted(specs(daemon_cdi)) == [GPU_SPEC]

        # The config file changes: both plugins reload it (index IDs, two replicas of each GPU).
        config_file.write_text(config("index", replicas=2))
        changed = load_inventory(inputs).resource(GPU)
        assert changed is not None and len(changed.devices) == 4
        want = {GPU: {d.id: "Healthy" for d in changed.devices}}
        await eventually(lambda: both_serve(want), "both kubelets to see the reloaded devices", 10.0)
        await eventually(
            lambda: gpu_names(daemon_cdi) == gpu_names(node.cdi_root) == ["0", "1"],
            "both plugins to write the spec of index device names",
            detail=lambda: (gpu_names(daemon_cdi), gpu_names(node.cdi_root)),
        )
        assert specs(daemon_cdi) == specs(node.cdi_root)


async def test_random_device_ids_are_fresh_at_every_later_start_of_the_daemon_and_the_fixture(root: Path) -> None:
    """The stack owns the bug mode's salting: fresh IDs at the process start, the same at the first serve, fresh
    again when the plugin servers start anew (the daemon's ``fakegpu ctl plugins stop|start``, the fixture's
    ``stop_plugins``/``start_plugins``), as the kubelets see them."""
    inputs = InventoryInputs(node_name="n1", gpus=("2xt4",))
    stable = device_ids(load_inventory(inputs))
    admin = root / "admin.sock"
    async with side_by_side(root, inputs, frozenset({BugMode.RANDOM_DEVICE_IDS}), admin_socket=admin) as both:
        kubelet, node = both.kubelet, both.node

        def ids(k: KubeletEmulator) -> set[str]:
            both.daemon_running()
            return set(k.devices(GPU))

        await eventually(lambda: len(ids(kubelet)) == 2, "the daemon's kubelet to see two GPUs", 10.0)
        first = {"daemon": ids(kubelet), "fixture": ids(node.kubelet)}
        assert len(first["fixture"]) == 2
        for seen_ids in first.values():
            assert seen_ids.isdisjoint(stable), "the process start takes fresh IDs"

        await admin_call(admin, "plugins", action="stop")
        await admin_call(admin, "plugins", action="start")
        await node.stop_plugins()
        await node.start_plugins()

        def fresh_on_the_daemon() -> set[str]:
            got = ids(kubelet)
            assert len(got) == 2 and got.isdisjoint(first["daemon"]), got
            return got

        again = {
            "daemon": await eventually(fresh_on_the_daemon, "the daemon's kubelet to see two fresh IDs", 10.0),
            "fixture": ids(node.kubelet),
        }
        for who, seen_ids in again.items():
            assert len(seen_ids) == 2 and seen_ids.isdisjoint(first[who] | stable), who


async def test_without_the_bug_mode_the_ids_stay_across_plugin_starts(root: Path) -> None:
    inputs = InventoryInputs(node_name="n1", gpus=("2xt4",))
    stable = device_ids(load_inventory(inputs))
    async with FakeNode(root / "fk", inputs) as node:
        assert set(node.kubelet.devices(GPU)) == stable
        await node.stop_plugins()
        await node.start_plugins()
        assert set(node.kubelet.devices(GPU)) == stable
