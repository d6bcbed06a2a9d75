"""Integration tests run the real servers over real Unix sockets in a short temporary directory.

The admin-socket fixtures live here because tests/integration/test_admin_socket.py (the socket's protocol)
and tests/integration/test_gpu_fault_ops.py (GPU faults through it) drive the same daemons the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from fakegpu.control.server import AdminServer
from fakegpu.dra.admin_ops import dra_ops
from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.dra.feature_gates import parse_feature_gates
from fakegpu.fakeplugin.admin_ops import device_plugin_ops
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.testing.fake_node import FakeNode
from tests.apiserver.fake_apiserver import FakeApiServer

ADMIN_NODE = "node-a"


@pytest.fixture
async def serve(root: Path) -> AsyncIterator[Callable[..., Awaitable[Path]]]:
    """``path = await serve(ops)``: an AdminServer on a fresh socket, stopped when the test ends."""
    servers: list[AdminServer] = []

    async def start(ops: Mapping[str, Any], **kwargs: Any) -> Path:
        server = AdminServer(root / f"admin{len(servers)}.sock", ops, **kwargs)
        servers.append(server)
        await server.start()
        return server.path

    yield start
    for server in servers:
        await server.stop()


@pytest.fixture
async def plugin_admin(fakegpu_node, serve) -> Callable[..., Awaitable[tuple[FakeNode, Path]]]:
    """``node, path = await plugin_admin(...)``: a fake node (``fakegpu_node``'s arguments) and its plugins'
    admin socket."""

    async def make(*args: Any, **kwargs: Any) -> tuple[FakeNode, Path]:
        node: FakeNode = await fakegpu_node(*args, **kwargs)
        return node, await serve(device_plugin_ops(node.live, node.plugins, node.calls))

    return make


@pytest.fixture
async def dra_admin(root, serve, request) -> AsyncIterator[tuple[FakeApiServer, DraDriver, Path]]:
    """A DRA driver on 2 H100s of node ``ADMIN_NODE`` with NVIDIA's NVMLDeviceHealthCheck gate on (``indirect``
    False: off) and its admin socket."""
    apiserver = FakeApiServer("1.36").start()
    apiserver.add_node(ADMIN_NODE)
    live = LiveInventory(load_inventory(InventoryInputs(node_name=ADMIN_NODE, gpus=("2xh100-80gb",))))
    gate = getattr(request, "param", True)
    driver = DraDriver(
        live,
        KubeletPaths(root / "kubelet"),
        DraSettings(cdi_root=root / "cdi", feature_gates=parse_feature_gates(f"NVMLDeviceHealthCheck={gate}")),
        apiserver.client,
    )
    await driver.start()
    try:
        await driver.wait_published()
        yield apiserver, driver, await serve(dra_ops(driver))
    finally:
        await driver.stop()
        apiserver.stop()
