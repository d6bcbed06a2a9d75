"""The pytest plugin's fixture brings up a node the kubelet emulator fully sees."""

from __future__ import annotations


async def test_node_comes_up_with_full_capacity(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    assert node.capacity() == {"nvidia.com/gpu": 2}
    assert node.allocatable() == {"nvidia.com/gpu": 2}
    assert node.calls.methods("nvidia.com/gpu")[:2] == ["GetDevicePluginOptions", "ListAndWatch"]
