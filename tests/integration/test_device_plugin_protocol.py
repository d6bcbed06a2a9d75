"""The device plugin against the kubelet emulator, over real Unix sockets."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from fakegpu.fakeplugin import device_plugin_service
from fakegpu.fakeplugin.allocation_error import AllocationError
from fakegpu.kubelet.plugin_endpoint import PluginEndpoint
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from fakegpu.sharing.faults import FaultSpec
from fakegpu.sharing.identifiers import strip_replica
from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.testing.fake_node import FakeNode

GPU = "nvidia.com/gpu"


def ts(replicas: int, name: str = GPU, **extra):
    return {"version": "v1", "sharing": {"timeSlicing": {**extra, "resources": [{"name": name, "replicas": replicas}]}}}


async def test_registration_calls_in_the_kubelets_order(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    assert node.calls.methods(GPU)[:2] == ["GetDevicePluginOptions", "ListAndWatch"]
    req = node.kubelet.registration.requests[0]
    assert (req.version, req.endpoint, req.resource_name) == ("v1beta1", "nvidia-gpu.sock", GPU)
    assert req.options.get_preferred_allocation_available is True
    assert node.kubelet.devices(GPU) == {g.uuid: "Healthy" for g in node.inventory.node.gpus}


async def test_registration_through_plugins_registry(fakegpu_node):
    node = await fakegpu_node("2xl4", registration="plugins-registry")
    assert node.kubelet.registration.requests == []
    assert ("register", "DevicePlugin", GPU) in node.kubelet.watcher.events
    reg = node.plugins.registry[GPU].service
    assert reg.registered is True and reg.error == ""
    assert reg.info.endpoint == str(node.kubelet.paths.device_plugins / "nvidia-gpu.sock")
    assert node.allocatable() == {GPU: 2}


async def test_one_server_per_resource(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb", mig_layout="all-balanced", mig_strategy="mixed")
    assert node.capacity() == {"nvidia.com/mig-1g.10gb": 4, "nvidia.com/mig-2g.20gb": 2, "nvidia.com/mig-3g.40gb": 2}
    sockets = sorted(p.name for p in node.kubelet.paths.device_plugins.glob("nvidia-*.sock"))
    assert sockets == ["nvidia-mig-1g.10gb.sock", "nvidia-mig-2g.20gb.sock", "nvidia-mig-3g.40gb.sock"]


async def test_kubelet_restart_reregisters_within_a_second_with_the_same_ids(fakegpu_node, timing):
    node = await fakegpu_node("8xh100-80gb")
    ids = node.kubelet.devices(GPU)
    pod = await node.run_pod("p1", {"c": {GPU: 2}})
    assert pod.admitted
    for _ in range(3):
        took = await node.restart_kubelet()
        timing.within(took, 1.0, "re-registration after a kubelet restart")
        assert node.kubelet.devices(GPU) == ids
    checkpoint = node.kubelet.checkpoint()
    assert checkpoint is not None
    assert [e.pod_uid for e in checkpoint.pod_device_entries] == ["p1"]
    assert node.kubelet.manager.in_use(GPU) == set(pod.env("c")["NVIDIA_VISIBLE_DEVICES"].split(","))


async def test_kubelet_restart_in_plugins_registry_mode(fakegpu_node, timing):
    node = await fakegpu_node("2xl4", registration="plugins-registry")
    ids = node.kubelet.devices(GPU)
    for _ in range(3):
        await node.kubelet.stop()
        await node.kubelet.start()
        took = await node.wait_synced()
        timing.within(took, 1.0, "re-registration after a kubelet restart")
        assert node.kubelet.devices(GPU) == ids
    kinds = [e[0] for e in node.kubelet.watcher.events]
    assert kinds == ["register"] * 4, "exactly one registration per kubelet start, none rejected or repeated"


async def test_plugin_socket_deleted_serves_and_registers_again(fakegpu_node, timing):
    node = await fakegpu_node("2xt4")
    sock = node.kubelet.paths.device_plugins / "nvidia-gpu.sock"
    before = node.plugins.stats.registrations
    with timing.at_most(1.0, "serving and registering again after the socket was deleted"):
        sock.unlink()
        await node.kubelet.wait_for(lambda: node.plugins.stats.registrations > before and sock.exists(), 5.0)
    await node.wait_synced()


async def test_plugin_waits_for_a_missing_kubelet_socket(fakegpu_dir, timing):
    node = FakeNode(fakegpu_dir / "k", InventoryInputs(node_name="n", gpus=("2xt4",)))
    node.kubelet.paths.device_plugins.mkdir(parents=True)
    await node.plugins.start()
    try:
        await node.wait_plugins_looked()
        assert node.plugins.registered == {GPU: False}
        await node.kubelet.start()
        took = await node.wait_synced()
        timing.within(took, 1.0, "registration once the kubelet socket appeared")
    finally:
        await node.stop()


async def test_health_change_is_pushed(fakegpu_node, timing):
    node = await fakegpu_node("4xh100-80gb")
    sends = node.plugins.servers[GPU].service.sends
    await node.wait_plugins_looked()
    assert node.plugins.servers[GPU].service.sends == sends, "ListAndWatch must not resend without a change"
    gpu = node.inventory.node.gpus[2].uuid
    with timing.at_most(0.5, "the health change to reach the kubelet"):
        await node.set_health("2", False)
        await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 3}, 5.0)
    assert node.capacity() == {GPU: 4}
    assert node.kubelet.devices(GPU)[gpu] == "Unhealthy"
    await node.set_health(gpu, True)
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 4})


async def test_unhealthy_gpu_takes_all_its_replicas(fakegpu_node):
    node = await fakegpu_node("2xa100-40gb", config=ts(4))
    await node.set_health("0", False)
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 4})


async def test_concurrent_list_and_watch_streams(fakegpu_node):
    node = await fakegpu_node("2xt4")
    sock = node.kubelet.paths.device_plugins / "nvidia-gpu.sock"
    async with grpc.aio.insecure_channel(f"unix://{sock}") as channel:
        stub = api_pb2_grpc.DevicePluginStub(channel)
        streams = [stub.ListAndWatch(api_pb2.Empty()) for _ in range(5)]
        firsts = [await s.read() for s in streams]
        assert all(isinstance(f, api_pb2.ListAndWatchResponse) and len(f.devices) == 2 for f in firsts)
        await node.set_health("1", False)
        seconds = [await asyncio.wait_for(s.read(), 2.0) for s in streams]
        assert all(
            isinstance(m, api_pb2.ListAndWatchResponse) and [d.health for d in m.devices] == ["Healthy", "Unhealthy"]
            for m in seconds
        )
        for s in streams:
            s.cancel()


async def test_stream_end_marks_unhealthy_then_drops_after_grace(fakegpu_node):
    node = await fakegpu_node("2xt4", grace_period=300)
    await node.plugins.stop()
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 0})
    assert node.capacity() == {GPU: 2}
    node.kubelet.clock.advance(299)
    assert node.capacity() == {GPU: 2}
    node.kubelet.clock.advance(2)
    assert node.capacity() == {}
    assert node.kubelet.checkpoint().registered_devices == {}


async def test_ids_stable_across_plugin_restart(fakegpu_node, timing):
    node = await fakegpu_node(
        "2xh100-80gb", mig_layout="all-1g.10gb", mig_strategy="mixed", config=ts(2, "nvidia.com/mig-1g.10gb")
    )
    before = node.kubelet.devices("nvidia.com/mig-1g.10gb")
    took = await node.restart_plugins()
    timing.within(took, 1.0, "re-registration after a plugin restart")
    assert node.kubelet.devices("nvidia.com/mig-1g.10gb") == before
    assert len(before) == 28


async def test_allocation_goes_through_preferred_then_allocate(fakegpu_node):
    node = await fakegpu_node("2xa100-40gb", config=ts(2))
    pod = await node.run_pod("p", {"c": {GPU: 1}})
    assert pod.admitted
    assert node.calls.methods(GPU)[2:] == ["GetPreferredAllocation", "Allocate"]
    _resource, _method, available = node.calls.calls[2]
    assert available == tuple(sorted(node.kubelet.devices(GPU)))


@pytest.mark.parametrize(
    ("policy", "expect_gpus"),
    [("distributed", 2), ("packed", 1)],
)
async def test_preferred_allocation_policies_through_the_kubelet(fakegpu_node, policy, expect_gpus):
    node = await fakegpu_node("2xa100-40gb", config=ts(4), flags={"shared_devices_allocation_policy": policy})
    pod = await node.run_pod("p", {"c": {GPU: 2}})
    assert pod.admitted
    ids = node.kubelet.manager.in_use(GPU)
    assert len({strip_replica(i) for i in ids}) == expect_gpus
    assert len(pod.env("c")["NVIDIA_VISIBLE_DEVICES"].split(",")) == expect_gpus


async def test_nvlink_aware_preference_for_whole_gpus(fakegpu_node):
    spec = {"nvlink": [[0, 1, 2, 3], [4, 5, 6, 7]], "gpus": [{"model": "h100-80gb", "count": 8}]}
    node = await fakegpu_node(node_spec=spec)
    first = await node.run_pod("a", {"c": {GPU: 1}})
    second = await node.run_pod("b", {"c": {GPU: 4}})
    assert first.admitted and second.admitted
    uuids = [g.uuid for g in node.inventory.node.gpus]
    got = {uuids.index(u) for u in second.env("c")["NVIDIA_VISIBLE_DEVICES"].split(",")}
    assert got == {4, 5, 6, 7}


async def test_fail_requests_greater_than_one_gives_the_kubelets_admission_error(fakegpu_node):
    """NVIDIA/k8s-device-plugin internal/plugin/server.go: Allocate returns a plain Go error, which
    grpc-go sends as Unknown; the kubelet copies the code (as a real kubelet v1.36.2 did)."""
    node = await fakegpu_node("2xa100-40gb", config=ts(2, failRequestsGreaterThanOne=True))
    pod = await node.run_pod("p", {"c": {GPU: 2}})
    assert pod.phase == "Failed" and pod.reason == "UnexpectedAdmissionError"
    assert pod.message == (
        "Pod was rejected: Allocate failed due to rpc error: code = Unknown desc = invalid allocation "
        'request for "nvidia.com/gpu": invalid request: maximum request size for shared resources is 1; found 2, '
        "which is unexpected"
    )
    assert node.kubelet.manager.in_use(GPU) == set()
    assert (await node.run_pod("q", {"c": {GPU: 1}})).admitted


async def test_more_than_allocatable_is_rejected_by_admission(fakegpu_node):
    node = await fakegpu_node("2xt4")
    pod = await node.run_pod("p", {"c": {GPU: 3}})
    assert pod.phase == "Failed" and pod.reason == "OutOfnvidia.com/gpu"
    assert "Node didn't have enough resource: nvidia.com/gpu, requested: 3, used: 0, capacity: 2" in pod.message


async def test_pre_start_container_when_required(fakegpu_node):
    node = await fakegpu_node("2xt4", pre_start_required=True)
    pod = await node.run_pod("p", {"c": {GPU: 1}})
    assert pod.admitted
    assert node.calls.methods(GPU)[-1] == "PreStartContainer"
    assert node.calls.calls[-1][2] == node.calls.calls[-2][2]


async def test_no_pre_start_unless_required(fakegpu_node):
    node = await fakegpu_node("2xt4")
    await node.run_pod("p", {"c": {GPU: 1}})
    assert "PreStartContainer" not in node.calls.methods(GPU)


ALLOCATE_CASES = [
    ({}, {"NVIDIA_VISIBLE_DEVICES": "{u0}"}, 0, []),
    ({"deviceIDStrategy": "index"}, {"NVIDIA_VISIBLE_DEVICES": "0"}, 0, []),
    ({"deviceListStrategy": "volume-mounts"}, {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}, 1, []),
    ({"deviceListStrategy": "cdi-cri"}, {}, 0, ["k8s.device-plugin.nvidia.com/gpu={u0}"]),
    (
        {"deviceListStrategy": ["envvar", "cdi-cri"]},
        {"NVIDIA_VISIBLE_DEVICES": "{u0}"},
        0,
        ["k8s.device-plugin.nvidia.com/gpu={u0}"],
    ),
]


@pytest.mark.parametrize(("plugin_flags", "env", "mounts", "cdi"), ALLOCATE_CASES)
async def test_allocate_strategies_through_the_kubelet(fakegpu_node, plugin_flags, env, mounts, cdi):
    node = await fakegpu_node("1xh100-80gb", config={"version": "v1", "flags": {"plugin": plugin_flags}})
    pod = await node.run_pod("p", {"c": {GPU: 1}})
    u0 = node.inventory.node.gpus[0].uuid
    response = pod.responses["c"][GPU]
    assert dict(response.envs) == {k: v.format(u0=u0) for k, v in env.items()}
    assert len(response.mounts) == mounts
    assert [c.name for c in response.cdi_devices] == [c.format(u0=u0) for c in cdi]


async def test_cdi_annotations_strategy(fakegpu_node):
    node = await fakegpu_node(
        "1xh100-80gb", config={"version": "v1", "flags": {"plugin": {"deviceListStrategy": "cdi-annotations"}}}
    )
    pod = await node.run_pod("p", {"c": {GPU: 1}})
    ((key, value),) = pod.responses["c"][GPU].annotations.items()
    assert key.startswith("cdi.k8s.io/nvidia-device-plugin_")
    assert value == f"k8s.device-plugin.nvidia.com/gpu={node.inventory.node.gpus[0].uuid}"


async def test_mps_allocation(fakegpu_node):
    config = {
        "version": "v1",
        "flags": {"mpsRoot": "/run/nvidia/mps"},
        "sharing": {"mps": {"resources": [{"name": GPU, "replicas": 4}]}},
    }
    node = await fakegpu_node("1xl4", config=config)
    pod = await node.run_pod("p", {"c": {GPU: 1}})
    response = pod.responses["c"][GPU]
    assert response.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe"
    assert {(m.host_path, m.container_path) for m in response.mounts} >= {
        ("/run/nvidia/mps/nvidia.com/gpu/pipe", "/mps/nvidia.com/gpu/pipe"),
        ("/run/nvidia/mps/shm", "/dev/shm"),
    }
    denied = await node.run_pod("q", {"c": {GPU: 2}})
    assert "maximum request size for shared resources is 1; found 2" in denied.message


async def test_replicas_of_one_gpu_are_deduplicated(fakegpu_node):
    """gpu-operator#386: two replicas can land on one GPU; the container then sees one GPU."""
    node = await fakegpu_node("1xa100-40gb", config=ts(4))
    pod = await node.run_pod("p", {"c": {GPU: 2}})
    assert pod.env("c")["NVIDIA_VISIBLE_DEVICES"] == node.inventory.node.gpus[0].uuid


async def test_unknown_device_is_unknown_as_nvidias_plain_go_error(fakegpu_node):
    """NVIDIA/k8s-device-plugin internal/plugin/server.go: Allocate and GetPreferredAllocation return plain
    Go errors, which grpc-go sends as Unknown."""
    node = await fakegpu_node("1xt4")
    endpoint = PluginEndpoint(GPU, node.kubelet.paths.device_plugins / "nvidia-gpu.sock")
    await endpoint.connect()
    try:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await endpoint.allocate(["GPU-does-not-exist"])
        assert err.value.code() == grpc.StatusCode.UNKNOWN
        assert err.value.details() == (
            'invalid allocation request for "nvidia.com/gpu": invalid request: unknown device: GPU-does-not-exist'
        )
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await endpoint.get_preferred_allocation(["GPU-x"], [], 1)
        assert err.value.code() == grpc.StatusCode.UNKNOWN
        assert err.value.details() == "error getting list of preferred allocation devices: unknown device: GPU-x"
    finally:
        await endpoint.close()


async def test_xid_health_model(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    gpu0 = node.inventory.node.gpus[0].uuid
    assert node.live.inject_xid("0", 13) == []
    assert node.live.inject_xid("0", 79) == [gpu0]
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 1})
    assert node.kubelet.devices(GPU)[gpu0] == "Unhealthy"


async def test_xid_policy_from_the_environment(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb", env={"DP_DISABLE_HEALTHCHECKS": "79"})
    assert node.live.inject_xid("0", 79) == []
    assert node.live.inject_xid("0", 48) == [node.inventory.node.gpus[0].uuid]


async def test_failed_preferred_allocation_gives_the_kubelets_text(fakegpu_node, monkeypatch):
    """NVIDIA #2038: a GPU off the bus makes GetPreferredAllocation fail for every pod."""

    def broken(*args, **kwargs):
        raise AllocationError("unable to get device link information")

    monkeypatch.setattr(device_plugin_service, "preferred_allocation", broken)
    node = await fakegpu_node("2xh100-80gb")
    pod = await node.run_pod("p", {"c": {GPU: 1}})
    assert pod.reason == "UnexpectedAdmissionError"
    assert pod.message == (
        "Pod was rejected: Allocate failed due to device plugin GetPreferredAllocation rpc failed with err: "
        "rpc error: code = Unknown desc = error getting list of preferred allocation devices: unable to get "
        "device link information, which is unexpected"
    )


async def test_injected_allocate_failures_then_recovery(fakegpu_node):
    node = await fakegpu_node("2xt4")
    node.live.faults.inject("Allocate", FaultSpec(times=2, code="UNAVAILABLE", message="driver busy"))
    for uid in ("a", "b"):
        pod = await node.run_pod(uid, {"c": {GPU: 1}})
        assert pod.message == (
            "Pod was rejected: Allocate failed due to rpc error: code = Unavailable desc = driver busy, which is "
            "unexpected"
        )
    assert (await node.run_pod("c", {"c": {GPU: 1}})).admitted
    assert node.live.faults.fired == [("Allocate", "failed with UNAVAILABLE")] * 2


async def test_injected_delay_on_preferred_allocation(fakegpu_node):
    node = await fakegpu_node("2xt4")
    node.live.faults.inject("GetPreferredAllocation", FaultSpec(delay=0.3))
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert (await node.run_pod("p", {"c": {GPU: 1}})).admitted
    assert loop.time() - started >= 0.3


async def test_ended_streams_leave_the_resource_unallocatable(fakegpu_node):
    """NVIDIA #368: 'ListAndWatch ended unexpectedly' -> every device unhealthy until re-registration."""
    node = await fakegpu_node("2xt4")
    assert node.plugins.servers[GPU].service.end_streams() == 1
    await node.kubelet.wait_for(lambda: node.allocatable() == {GPU: 0})
    assert node.capacity() == {GPU: 2}
    await node.restart_kubelet()
    assert node.allocatable() == {GPU: 2}


async def test_start_registration_and_stop_are_logged_with_nvidias_lines(fakegpu_node, caplog):
    """NVIDIA/k8s-device-plugin internal/plugin/server.go Start/Stop and cmd/nvidia-device-plugin/main.go:
    the same lines, so log greps written for the real plugin carry over."""
    caplog.set_level("INFO", logger="fakegpu.fakeplugin.plugin_manager")
    node = await fakegpu_node("1xl4")
    socket = node.kubelet.paths.device_plugins / "nvidia-gpu.sock"
    await node.restart_plugins()
    lines = [r.getMessage() for r in caplog.records if r.name == "fakegpu.fakeplugin.plugin_manager"]
    for line in (
        "Starting Plugins.",
        "Starting GRPC server for 'nvidia.com/gpu'",
        f"Starting to serve 'nvidia.com/gpu' on {socket}",
        "Registered device plugin for 'nvidia.com/gpu' with Kubelet",
        "Stopping plugins.",
        f"Stopping to serve 'nvidia.com/gpu' on {socket}",
    ):
        assert line in lines, (line, lines)
    assert lines.index("Stopping plugins.") < lines.index(f"Stopping to serve 'nvidia.com/gpu' on {socket}")


async def test_mps_replicas_over_the_daemons_cap_leave_the_resource_unserved(fakegpu_node, caplog):
    """NVIDIA/k8s-device-plugin cmd/mps-control-daemon/mps/device.go (assertReplicas) and
    internal/plugin/mps.go (waitForDaemon): 49 replicas load, the control daemon refuses them, and the
    plugin never serves the resource, logging why."""
    caplog.set_level("INFO", logger="fakegpu.fakeplugin.plugin_manager")
    config = {
        "version": "v1",
        "flags": {"mpsRoot": "/run/nvidia/mps"},
        "sharing": {"mps": {"resources": [{"name": GPU, "replicas": 49}]}},
    }
    node = await fakegpu_node("1xh100-80gb", config=config)
    assert len(node.inventory.resources[0].devices) == 49
    assert node.plugins.servers == {} and node.capacity() == {}
    assert node.plugins.blocked() == {
        GPU: "invalid MPS configuration: invalid device maximum allowed replicas exceeded: 49 > 48"
    }
    assert (
        "Failed to start plugin: error waiting for MPS daemon: error checking MPS daemon health: failed to send "
        "command to MPS daemon: exit status 1"
    ) in caplog.text
    assert "Failed to start one or more plugins. Retrying in 30s..." in caplog.text
    assert not (await node.run_pod("p", {"c": {GPU: 1}})).admitted


async def test_health_changes_are_logged_with_nvidias_lines(fakegpu_node, caplog):
    """NVIDIA/k8s-device-plugin internal/plugin/server.go ListAndWatch: "'%s' device marked unhealthy: %s"
    (and "healthy" when a device recovers)."""
    caplog.set_level("INFO", logger="fakegpu.fakeplugin.device_plugin_service")
    node = await fakegpu_node("2xl4")
    g1 = node.inventory.node.gpus[1].uuid
    await node.set_health("1", False)
    await node.kubelet.wait_for(lambda: node.allocatable().get(GPU) == 1, 5.0, "GPU 1 unhealthy")
    await node.set_health("1", True)
    await node.kubelet.wait_for(lambda: node.allocatable().get(GPU) == 2, 5.0, "GPU 1 healthy again")
    lines = [r.getMessage() for r in caplog.records if r.name == "fakegpu.fakeplugin.device_plugin_service"]
    assert lines.count(f"'nvidia.com/gpu' device marked unhealthy: {g1}") == 1
    assert lines.count(f"'nvidia.com/gpu' device marked healthy: {g1}") == 1
