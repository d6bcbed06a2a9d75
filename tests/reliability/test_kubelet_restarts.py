"""Kubelet restarts, over and over: the soak of ``tests/reliability/kubelet_soak.py`` (whose docstring says
what each restart must keep) at the profile's length, and one restart under a pending registration."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from fakegpu.fakeplugin.plugin_manager import RegistrationMode
from fakegpu.testing.fake_node import FakeNode
from tests.reliability.kubelet_soak import NODE_INPUTS, REREGISTER_LIMIT, PluginPlacement, soak_kubelet_restarts
from tests.reliability.profile import Profile
from tests.timing import Timing


@pytest.mark.parametrize(
    ("plugins", "registration"),
    [("in-process", "kubelet"), ("in-process", "plugins-registry"), ("daemon", "kubelet")],
)
async def test_kubelet_restarts_lose_nothing_and_leak_nothing(
    profile: Profile, plugins: PluginPlacement, registration: RegistrationMode, root: Path, timing: Timing
) -> None:
    figures = await soak_kubelet_restarts(
        profile.kubelet_restarts,
        plugins=plugins,
        registration=registration,
        root=root,
        reregister_limit=REREGISTER_LIMIT if timing.enforced else None,
    )
    assert figures.restarts == profile.kubelet_restarts
    assert figures.problems == [], f"{len(figures.problems)} problems, first ones: {figures.problems[:5]}"
    assert figures.pods_admitted > 0 and figures.max_allocations > 0, "the soak never had an allocation to restore"
    assert figures.leaks() == [], (
        f"{figures.leaks()}; before: {figures.before and figures.before.describe()}, "
        f"after: {figures.after and figures.after.describe()}"
    )


async def test_kubelet_restart_under_a_pending_registration_costs_no_timeout(root: Path, timing: Timing) -> None:
    """A kubelet that dies right after creating kubelet.sock, then starts for real (a crash loop): the
    plugins' Register is still waiting to connect when the real kubelet wipes their sockets, so once it
    connects the kubelet dials a socket that is gone and the call could only time out (5 s of a node
    without GPUs). The plugin manager must drop that call as soon as kubelet.sock changes under it."""
    node = FakeNode(root / "kubelet", NODE_INPUTS)
    await node.start()
    try:
        await node.kubelet.stop()
        restarts = node.plugins.stats.restarts
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(str(node.kubelet.paths.kubelet_socket))  # a socket file nobody accepts on
        dead.close()
        await node.kubelet.wait_for(lambda: node.plugins.stats.restarts > restarts, what="the plugins to restart")
        # Time passing: the dead kubelet stays a while, so Register is backing off before its next dial.
        await asyncio.sleep(0.2)
        await node.kubelet.start()
        took = await node.wait_synced(5.0)
        timing.within(took, REREGISTER_LIMIT, "re-registration after the crash loop")
        assert all(node.plugins.registered.values())
    finally:
        await node.stop()
