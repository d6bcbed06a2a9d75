"""The pytest plugin's fixture brings up a node the kubelet emulator fully sees."""

from __future__ import annotations


async def test_node_comes_up_with_full_capacity(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    assert node.capacity() == {"nvidia.com/gpu": 2}
    assert node.allocatable() == {"nvidia.com/gpu": 2}
    assert node.calls.methods("nvidia.com/gpu")[:2] == ["GetDevicePluginOptions", "ListAndWatch"]


# -- every action returns once the kubelet has seen it: a test may assert right after, with no polling ----
GPU = "nvidia.com/gpu"
TS2 = {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": GPU, "replicas": 2}]}}}


async def test_set_health_returns_once_the_kubelet_shows_it(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    gpu1 = node.inventory.node.gpus[1].uuid
    assert await node.set_health("1", False) == [gpu1]
    assert node.allocatable() == {GPU: 1}
    assert node.kubelet.devices(GPU)[gpu1] == "Unhealthy"
    await node.set_health(gpu1, True)
    assert node.allocatable() == {GPU: 2}


async def test_an_xid_is_seen_right_after_it_and_an_ignored_one_changes_nothing(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    assert await node.inject_xid("0", 13) == []
    assert node.allocatable() == {GPU: 2}
    assert len(await node.inject_xid("0", 79)) == 1
    assert node.allocatable() == {GPU: 1}


async def test_a_fault_hits_the_next_call(fakegpu_node):
    from fakegpu.sharing.faults import FaultSpec  # noqa: PLC0415 - as a user's test would import it

    node = await fakegpu_node("2xh100-80gb")
    node.fault("Allocate", FaultSpec(times=1, code="UNAVAILABLE", message="driver busy"))
    pod = await node.run_pod("p", {"c": {GPU: 1}})
    assert not pod.admitted and "driver busy" in pod.message
    assert (await node.run_pod("q", {"c": {GPU: 1}})).admitted


async def test_a_reload_is_seen_right_after_it(fakegpu_node):
    import yaml  # noqa: PLC0415

    node = await fakegpu_node("2xh100-80gb", config={"version": "v1"})
    assert node.inputs.config_file is not None
    with open(node.inputs.config_file, "w") as f:
        yaml.safe_dump(TS2, f)
    assert await node.reload() is True
    assert node.capacity() == {GPU: 4} and node.allocatable() == {GPU: 4}


async def test_ended_streams_and_stopped_plugins_are_seen_right_after(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    assert await node.end_streams(GPU) == 1
    assert node.capacity() == {GPU: 2} and node.allocatable() == {GPU: 0}
    await node.restart_plugins()
    assert node.allocatable() == {GPU: 2}
    await node.stop_plugins()
    assert node.allocatable() == {GPU: 0}
    await node.start_plugins()
    assert node.allocatable() == {GPU: 2}
