"""Bug-compatible modes reproduce the named upstream behaviour; off by default, they change nothing."""

from __future__ import annotations

import pytest

from fakegpu.sharing.bug_modes import BugMode, BugModeError, parse_bug_modes

GPU = "nvidia.com/gpu"
TS4 = {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": GPU, "replicas": 4}]}}}


async def test_health_marks_one_replica_per_gpu_1929(fakegpu_node):
    node = await fakegpu_node("2xa100-40gb", config=TS4, bugs=("health-one-device-per-gpu",))
    assert len(node.live.inject_xid("0", 48)) == 1
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 7})


async def test_without_the_bug_every_replica_goes_unhealthy(fakegpu_node):
    node = await fakegpu_node("2xa100-40gb", config=TS4)
    assert len(node.live.inject_xid("0", 48)) == 4
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 4})


async def test_gpu_off_the_bus_rejects_every_pod_2038(fakegpu_node):
    node = await fakegpu_node("4xh100-80gb", bugs=("preferred-allocation-fails-off-bus",))
    node.live.inject_xid("2", 79)
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 3})
    pod = await node.run_pod("p", {"c": {GPU: 1}})
    assert pod.reason == "UnexpectedAdmissionError"
    assert pod.message.startswith(
        "Pod was rejected: Allocate failed due to device plugin GetPreferredAllocation rpc failed with err: rpc "
        "error: code = Unknown desc = error getting list of preferred allocation devices: unable to get device "
        "link information: error getting NVLink for devices (0, 2)"
    )
    node.live.set_health("2", True)
    assert (await node.run_pod("q", {"c": {GPU: 1}})).admitted


async def test_no_reregistration_after_a_kubelet_restart(fakegpu_node):
    node = await fakegpu_node("2xt4", bugs=("no-reregistration",))
    await node.kubelet.stop()
    await node.kubelet.start()
    await node.wait_plugins_looked()
    assert node.capacity() == {GPU: 0} and node.allocatable() == {GPU: 0}
    assert node.plugins.stats.registrations == 1


async def test_random_device_ids_orphan_checkpointed_allocations(fakegpu_node):
    node = await fakegpu_node("2xt4", bugs=("random-device-ids",))
    before = set(node.kubelet.devices(GPU))
    assert (await node.run_pod("p", {"c": {GPU: 1}})).admitted
    await node.restart_plugins()
    after = set(node.kubelet.devices(GPU))
    assert before.isdisjoint(after)
    assert node.kubelet.manager.in_use(GPU) <= before, "the checkpointed allocation names vanished devices"


def test_unknown_mode_is_refused():
    parsed = parse_bug_modes(["no-reregistration,random-device-ids"])
    assert parsed == {BugMode.NO_REREGISTRATION, BugMode.RANDOM_DEVICE_IDS}
    assert all(isinstance(mode, BugMode) for mode in parsed)
    assert {str(mode) for mode in parsed} == {"no-reregistration", "random-device-ids"}  # the CLI's spellings
    with pytest.raises(BugModeError, match="--bug-compat: unknown bug-compatible mode 'sloppy'"):
        parse_bug_modes(["sloppy"])


async def test_settle_is_deprecated_for_the_barrier(fakegpu_node):
    node = await fakegpu_node("2xt4")
    with pytest.warns(DeprecationWarning, match="wait_plugins_looked"):
        await node.settle(0)
