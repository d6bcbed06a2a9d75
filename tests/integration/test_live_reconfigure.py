"""Live changes through the admin socket: GPUs added and removed, MIG re-partitioned, fresh device IDs."""

from __future__ import annotations

from pathlib import Path

from fakegpu.control.client import admin_call
from fakegpu.control.protocol import AdminError
from fakegpu.control.server import AdminServer
from fakegpu.fakeplugin.admin_ops import device_plugin_ops
from fakegpu.sharing.inputs import CurrentInputs
from fakegpu.testing.fake_node import FakeNode

GPU = "nvidia.com/gpu"


async def serve_admin(node: FakeNode, root: Path) -> AdminServer:
    current = CurrentInputs(node.inputs)
    node.plugins.reload_inventory = current.load
    server = AdminServer(root / "admin.sock", device_plugin_ops(node.live, node.plugins, None, current))
    await server.start()
    return server


async def test_add_gpus_repartition_and_new_ids(fakegpu_node, fakegpu_dir):
    node = await fakegpu_node("2xh100-80gb")
    server = await serve_admin(node, fakegpu_dir)
    sock = fakegpu_dir / "admin.sock"
    try:
        result = await admin_call(sock, "reconfigure", gpus="4xh100-80gb")
        assert result["gpus"] == 4
        await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 4})

        await admin_call(sock, "reconfigure", mig_layout="all-3g.40gb", mig_strategy="mixed")
        await node.kubelet.wait_for(lambda: node.allocatable().get("nvidia.com/mig-3g.40gb") == 8)
        assert node.allocatable()[GPU] == 0, "the old resource is stale until the kubelet's grace period"

        before = set(node.kubelet.devices("nvidia.com/mig-3g.40gb"))
        await admin_call(sock, "reconfigure", new_ids=True)
        await node.kubelet.wait_for(
            lambda: (
                set(node.kubelet.devices("nvidia.com/mig-3g.40gb")).isdisjoint(before)
                and node.allocatable().get("nvidia.com/mig-3g.40gb") == 8
            ),
            3.0,
        )
    finally:
        await server.stop()


async def test_a_bad_change_is_refused_and_nothing_changes(fakegpu_node, fakegpu_dir):
    node = await fakegpu_node("2xh100-80gb")
    server = await serve_admin(node, fakegpu_dir)
    try:
        ids = node.kubelet.devices(GPU)
        for bad in ({"gpus": "2xnope"}, {"mig_layout": "all-9g.99gb"}):
            try:
                await admin_call(fakegpu_dir / "admin.sock", "reconfigure", **bad)
            except AdminError as exc:
                assert "reconfigure rejected, still serving the previous inventory" in str(exc)
            else:
                raise AssertionError(f"{bad} was accepted")
        assert node.kubelet.devices(GPU) == ids and node.allocatable() == {GPU: 2}
    finally:
        await server.stop()
