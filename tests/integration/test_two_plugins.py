"""Two device plugins on one kubelet directory must not fight over their sockets (issue 15, section 4).

A DaemonSet update with surge, or a demo started beside the DaemonSet, runs two plugins on one
``device-plugins/`` directory. Before, the second removed the first's socket, the first saw its socket
removed and took it back, and so on: 531 re-serves and registrations in 30 s, the kubelet flipping between
them. Now the second finds a live process on the path, waits with a logged, capped backoff, and takes over
only once the first is gone. The plugins run in this process (one event loop, each with its own inventory)
and as two real ``fakegpu plugin`` processes, next to the kubelet emulator, whose Register requests are counted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fakegpu.dra.kubelet_plugin import DraKubeletPlugin
from fakegpu.fakeplugin.plugin_manager import PluginManager
from fakegpu.fakeplugin.socket_contention import PeerWaits
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.runtime.unix_socket import SocketInUse, listening_pid
from fakegpu.sharing.health import XidPolicy
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.testing.fake_node import FakeNode
from tests.eventually import eventually

GPU = "nvidia.com/gpu"
INPUTS = InventoryInputs(node_name="two-plugins", gpus=("2xh100-80gb",))
LOOKS = 10
"""Watch steps both plugins take side by side (0.5 s at their 50 ms poll): the fight made a registration
every few steps."""


@pytest.fixture
async def first(root: Path) -> AsyncIterator[FakeNode]:
    node = FakeNode(root, INPUTS)
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


def second_plugin(node: FakeNode) -> PluginManager:
    """Another plugin on the first one's kubelet directory, looking at the busy path every 0.05-0.2 s."""
    live = LiveInventory(load_inventory(INPUTS), XidPolicy())
    return PluginManager(live, node.kubelet.paths, peer_waits=PeerWaits(first=0.05, cap=0.2))


def registrations_of(kubelet: KubeletEmulator) -> int:
    return sum(1 for r in kubelet.registration.requests if r.resource_name == GPU)


def registrations(node: FakeNode) -> int:
    return registrations_of(node.kubelet)


async def side_by_side(*managers: PluginManager) -> None:
    """Wait until each plugin has taken ``LOOKS`` more watch steps (each looks at its socket): a fight
    over the socket path would have shown by then."""
    steps = [m.stats.watch_steps for m in managers]
    await eventually(
        lambda: all(m.stats.watch_steps >= s + LOOKS for m, s in zip(managers, steps, strict=True)),
        f"{LOOKS} more watch steps of each plugin",
    )


async def test_the_second_plugin_waits_for_the_first_instead_of_taking_its_socket(
    first: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fakegpu.fakeplugin")
    path = first.plugins.servers[GPU].socket_path
    assert registrations(first) == 1
    second = second_plugin(first)
    await second.start()
    try:
        await side_by_side(first.plugins, second)
        await eventually(lambda: second.stats.peer_waits >= 3, "the waiting plugin to look three times")
        # One serves, the other waits: no socket was taken over, the kubelet saw one registration.
        assert registrations(first) == 1, "the kubelet saw the plugins flip-flop"
        assert first.plugins.stats.reserves == 0
        assert first.plugins.servers[GPU].socket_intact()
        assert GPU not in second.servers
        assert second.stats.peer_waits >= 3, "the waiting plugin stopped looking"
        waiting = f"another plugin serves {path} (pid {os.getpid()}); waiting for it to stop (attempt 1, "
        first_line = [r for r in caplog.records if r.getMessage().startswith(waiting)]
        assert [r.levelno for r in first_line] == [logging.WARNING]
        assert f"not registered with the kubelet: {GPU} (another plugin serves {path}" in (second.not_ready() or "")
        assert first.synced()

        # The first goes away (its pod deleted): the second takes over within its capped pause and registers.
        await first.plugins.stop()
        await eventually(lambda: second.registered.get(GPU), "the second plugin to serve and register", 3.0)
        assert registrations(first) == 2
        assert second.not_ready() is None
        await first.wait_synced()
        assert any("is free again after" in r.getMessage() for r in caplog.records)
    finally:
        await second.stop()


async def test_after_a_kubelet_restart_one_plugin_serves_and_registers(first: FakeNode) -> None:
    second = second_plugin(first)
    await second.start()
    try:
        await eventually(lambda: second.stats.peer_waits >= 2, "the second plugin to look again")
        before = registrations(first)
        await first.kubelet.restart()
        await first.wait_synced()
        await side_by_side(first.plugins, second)
        serving = [m for m in (first.plugins, second) if GPU in m.servers]
        assert len(serving) == 1, "both plugins serve the one socket path"
        assert serving[0].registered.get(GPU)
        # Each registration the kubelet saw is followed by none that replaced it: one per restart.
        assert registrations(first) == before + 1, "the kubelet saw the plugins flip-flop"
        assert first.plugins.stats.reserves + second.stats.reserves <= 1
        assert first.synced()
    finally:
        await second.stop()


async def test_a_socket_removed_again_and_again_is_served_again_at_a_falling_rate(
    first: FakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever keeps removing the socket (an older plugin that takes paths over), no kubelet restart explains
    it: served again at once the first time, then after 0.5, 1, 2 s ... instead of every 50 ms poll."""
    caplog.set_level(logging.INFO, logger="fakegpu.fakeplugin")
    path = first.plugins.servers[GPU].socket_path
    loop = asyncio.get_running_loop()
    end = loop.time() + 2.0
    removals = 0
    while loop.time() < end:
        if path.exists():
            path.unlink()
            removals += 1
        await asyncio.sleep(0.02)  # time passing: whatever removes the socket does so every 20 ms, for 2 s
    # 0 s, +0.5, +1, then the next pause (2 s) runs past the end: at most 4 re-serves in 2 s.
    assert 2 <= first.plugins.stats.reserves <= 4, first.plugins.stats
    assert removals - 1 <= first.plugins.stats.reserves <= removals  # the last removal may still be paced
    assert any("was removed again soon after it was served; serving again in" in r.getMessage() for r in caplog.records)

    def served_again() -> bool:
        server = first.plugins.servers.get(GPU)  # absent while a paced re-serve is between stop and start
        return server is not None and server.socket_intact()  # a re-serve makes a new server object

    await eventually(served_again, "the socket to be served again", 5.0)
    await first.wait_synced()


async def test_a_dra_driver_never_takes_its_socket_back_from_a_live_peer(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The DRA driver's sockets follow the same rule: a second driver refuses to start on a live socket (one
    line naming the path and pid), and a running one whose socket a live peer took waits instead of fighting."""
    caplog.set_level(logging.INFO, logger="fakegpu.dra")
    paths = KubeletPaths(root)
    first = DraKubeletPlugin("gpu.nvidia.com", paths, lambda server: None, poll_interval=0.02)
    await first.start()
    try:
        second = DraKubeletPlugin("gpu.nvidia.com", paths, lambda server: None)
        with pytest.raises(SocketInUse, match=rf"is in use by another running process \(pid {os.getpid()}\)"):
            await second.start()
        await second.stop()
        assert first.restarts == 0

        # A peer takes the DRA socket path over while the first serves: the first waits, saying so once.
        first.dra_socket.unlink()
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        peer.bind(str(first.dra_socket))
        peer.listen(1)
        try:
            waiting = f"another process serves {first.dra_socket} (pid {os.getpid()}); waiting for it to stop"
            await eventually(lambda: any(r.getMessage() == waiting for r in caplog.records), "the wait logged")
            steps = first.watch_steps
            await eventually(lambda: first.watch_steps >= steps + 10, "ten more looks at the sockets")
            assert [r.getMessage() for r in caplog.records].count(waiting) == 1
            assert first._task is not None and not first._task.done(), "the socket watch died"
            assert first.restarts == 0
        finally:
            peer.close()  # the peer is gone; its socket file stays behind, stale
        await eventually(lambda: first.restarts == 1, "the first driver to serve its socket again")
        assert listening_pid(first.dra_socket) == os.getpid()
    finally:
        await first.stop()


async def test_two_plugin_processes_on_one_directory(root: Path) -> None:
    """Real ``fakegpu plugin`` processes, as a DaemonSet update with surge runs them: the second logs whom it waits
    for, the kubelet sees one registration, and the second serves once the first is gone."""
    kubelet = KubeletEmulator(root)
    await kubelet.start()
    procs: list[asyncio.subprocess.Process] = []
    logs = [root / "first.log", root / "second.log"]

    async def plugin(log: Path) -> asyncio.subprocess.Process:
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "fakegpu",
                "plugin",
                "--kubelet-dir",
                str(root),
                "--gpus",
                "2xh100-80gb",
                "--node-name",
                "two-processes",
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        procs.append(proc)
        return proc

    try:
        first = await plugin(logs[0])
        await eventually(lambda: kubelet.allocatable() == {GPU: 2}, "the first plugin's devices", 20.0)
        await plugin(logs[1])
        waiting = f"another plugin serves {root / 'device-plugins' / 'nvidia-gpu.sock'} (pid {first.pid})"
        await eventually(lambda: waiting in logs[1].read_text(), "the second plugin to say whom it waits for", 20.0)
        # Its second look (a second after the first) still finds the first serving: no fight meanwhile.
        second_look = "(attempt 2, next look"
        await eventually(lambda: second_look in logs[1].read_text(), "the second plugin's second look", 20.0)
        assert registrations_of(kubelet) == 1, "the kubelet saw the plugins flip-flop"
        first.terminate()
        assert await asyncio.wait_for(first.wait(), 10.0) == 0
        await eventually(lambda: registrations_of(kubelet) == 2, "the second plugin to register", 20.0)
        await eventually(lambda: kubelet.allocatable() == {GPU: 2}, "the second plugin's devices", 10.0)
        assert "is free again after" in logs[1].read_text()
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.terminate()
                await asyncio.wait_for(proc.wait(), 10.0)
        await kubelet.stop()
