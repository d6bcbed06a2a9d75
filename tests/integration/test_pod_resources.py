"""The kubelet emulator's pod resources API (``v1.PodResourcesLister`` on ``pod-resources/kubelet.sock``),
answered from the allocations it made, as dcgm-exporter and other monitoring agents query it."""

from __future__ import annotations

import grpc
import pytest

from fakegpu.kubeletapi.podresources.v1 import api_pb2 as pr
from fakegpu.kubeletapi.podresources.v1 import api_pb2_grpc as pr_grpc
from fakegpu.telemetry.dcgm.attribution import pod_resources_socket
from tests.raw_wire import LEN, decode, int64, len_field, messages, string, strings, unary

GPU = "nvidia.com/gpu"
LISTER = "/v1.PodResourcesLister/"
TWO_NUMA = {"version": "v1", "numaNodes": 2, "gpus": [{"model": "h100-80gb", "count": 4, "numa": [0, 0, 1, 1]}]}


async def call(node, method: str, request):
    async with grpc.aio.insecure_channel(f"unix://{node.kubelet.pod_resources_socket}") as channel:
        stub = pr_grpc.PodResourcesListerStub(channel)
        return await getattr(stub, method)(request, timeout=5)


def devices_of(container: pr.ContainerResources) -> list[tuple[str, list[str], list[int] | None]]:
    return [
        (d.resource_name, list(d.device_ids), [n.ID for n in d.topology.nodes] if d.HasField("topology") else None)
        for d in container.devices
    ]


async def test_socket_sits_where_dcgm_exporter_looks(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    socket = node.kubelet.pod_resources_socket
    assert socket == node.kubelet.paths.root / "pod-resources" / "kubelet.sock" == pod_resources_socket(node.root)
    assert socket.is_socket()
    await node.kubelet.stop()
    assert not socket.exists()
    await node.kubelet.start()
    assert socket.is_socket()


async def test_list_reports_running_pods_their_containers_and_devices(fakegpu_node):
    node = await fakegpu_node(node_spec=TWO_NUMA)
    listed = await call(node, "List", pr.ListPodResourcesRequest())
    assert list(listed.pod_resources) == []

    big = await node.run_pod("uid-big", {"main": {GPU: 3}, "sidecar": {}}, name="big", namespace="ml")
    plain = await node.run_pod("uid-plain", {"c": {GPU: 1}})  # no name: the UID, in "default"
    rejected = await node.run_pod("uid-rejected", {"c": {GPU: 1}}, name="too-many")
    assert big.admitted and plain.admitted and not rejected.admitted

    listed = await call(node, "List", pr.ListPodResourcesRequest())
    assert [(p.name, p.namespace) for p in listed.pod_resources] == [("big", "ml"), ("uid-plain", "default")]
    main, sidecar = listed.pod_resources[0].containers
    assert (main.name, sidecar.name) == ("main", "sidecar")
    assert list(sidecar.devices) == []
    allocation = next(a for a in node.kubelet.manager.allocations if a.pod_uid == "uid-big")
    # One entry per device ID with that device's NUMA node, as the kubelet's
    # containerDevicesFromResourceDeviceInstances(GetDevices(...)): never several IDs in one entry.
    expected = [(GPU, [i], [numa]) for numa in sorted(allocation.numa) for i in allocation.numa[numa]]
    assert devices_of(main) == expected
    assert sorted(i for _, ids, _ in expected for i in ids) == sorted(allocation.device_ids)
    assert len(expected) == 3 and len(allocation.numa) == 2
    numa_of = {g.uuid: g.numa for g in node.inventory.node.gpus}
    assert all(numa_of[ids[0]] == numa for _, ids, (numa,) in expected)

    node.delete_pod("uid-big")
    listed = await call(node, "List", pr.ListPodResourcesRequest())
    assert [p.name for p in listed.pod_resources] == ["uid-plain"]


async def test_calls_are_counted_not_logged(fakegpu_node):
    """A monitoring agent calls List every few seconds for the node's lifetime: the emulator keeps a count per
    method, not an ever-growing record of every call."""
    node = await fakegpu_node("1xt4")
    for _ in range(3):
        await call(node, "List", pr.ListPodResourcesRequest())
    await call(node, "GetAllocatableResources", pr.AllocatableResourcesRequest())
    assert node.kubelet.pod_resources.calls == {"List": 3, "GetAllocatableResources": 1}


async def test_devices_without_numa_have_no_topology(fakegpu_node):
    spec = {"version": "v1", "gpus": [{"model": "t4", "count": 1, "numa": -1}]}
    node = await fakegpu_node(node_spec=spec)
    await node.run_pod("uid-1", {"c": {GPU: 1}}, name="p")
    listed = await call(node, "List", pr.ListPodResourcesRequest())
    ((_, ids, topology),) = devices_of(listed.pod_resources[0].containers[0])
    assert topology is None and ids == [node.inventory.node.gpus[0].uuid]


async def test_get_allocatable_resources_lists_healthy_devices(fakegpu_node):
    node = await fakegpu_node(node_spec=TWO_NUMA)
    gpus = node.inventory.node.gpus
    answer = await call(node, "GetAllocatableResources", pr.AllocatableResourcesRequest())
    got = sorted((d.resource_name, tuple(d.device_ids), tuple(n.ID for n in d.topology.nodes)) for d in answer.devices)
    assert got == sorted((GPU, (g.uuid,), (g.numa,)) for g in gpus)
    assert list(answer.cpu_ids) == [] and list(answer.memory) == []
    await node.set_health(gpus[3].uuid, False)
    await node.kubelet.wait_for(lambda: node.kubelet.allocatable()[GPU] == 3, what="GPU 3 unhealthy")
    answer = await call(node, "GetAllocatableResources", pr.AllocatableResourcesRequest())
    assert gpus[3].uuid not in {i for d in answer.devices for i in d.device_ids}


async def test_get_one_pod_and_the_kubelets_error_text(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    await node.run_pod("uid-1", {"c": {GPU: 1}}, name="web-0", namespace="shop")
    answer = await call(node, "Get", pr.GetPodResourcesRequest(pod_name="web-0", pod_namespace="shop"))
    assert answer.pod_resources.name == "web-0" and answer.pod_resources.containers[0].devices[0].resource_name == GPU
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call(node, "Get", pr.GetPodResourcesRequest(pod_name="web-0", pod_namespace="default"))
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    assert info.value.details() == "pod web-0 in namespace default not found"


async def test_pods_and_allocations_survive_a_kubelet_restart(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    await node.run_pod("uid-1", {"c": {GPU: 1}}, name="keeps", namespace="ml", annotations={"a": "b"})
    before = await call(node, "List", pr.ListPodResourcesRequest())
    await node.restart_kubelet()
    after = await call(node, "List", pr.ListPodResourcesRequest())
    assert after == before
    assert node.kubelet.pod_annotations("ml", "keeps") == {"a": "b"}
    assert node.kubelet.pod_annotations("ml", "absent") == {}


# ---------------------------------------------------------------------------------------------------
# On the wire, without the generated code: field numbers as upstream k8s.io/kubelet podresources/v1
# ---------------------------------------------------------------------------------------------------


async def test_list_response_on_the_wire(fakegpu_node):
    node = await fakegpu_node(node_spec=TWO_NUMA)
    await node.run_pod("uid-1", {"main": {GPU: 2}, "idle": {}}, name="train", namespace="ml")
    allocation = node.kubelet.manager.allocations[0]
    raw = await unary(node.kubelet.pod_resources_socket, LISTER + "List", b"")
    (pod,) = messages(raw, 1)  # ListPodResourcesResponse.pod_resources = 1
    assert string(pod, 1) == "train" and string(pod, 2) == "ml"  # PodResources.name = 1, namespace = 2
    main, idle = messages(pod, 3)  # containers = 3
    assert string(main, 1) == "main" and string(idle, 1) == "idle"  # ContainerResources.name = 1
    assert messages(idle, 2) == []
    entries = messages(main, 2)  # ContainerResources.devices = 2
    got = []
    for entry in entries:
        topology = messages(entry, 3)  # ContainerDevices.topology = 3
        numa = [int64(n, 1) for n in messages(topology[0], 1)]  # TopologyInfo.nodes = 1, NUMANode.ID = 1
        got.append((string(entry, 1), strings(entry, 2), numa))  # resource_name = 1, device_ids = 2
    assert got == [(GPU, [i], [n]) for n in sorted(allocation.numa) for i in allocation.numa[n]]
    assert all(len(ids) == 1 for _, ids, _ in got)  # repeated field device_ids: one ID per entry
    assert {number for number, wire_type, _ in decode(main)} == {1, 2} and all(
        wire_type == LEN for _, wire_type, _ in decode(main)
    )


async def test_get_request_on_the_wire(fakegpu_node):
    node = await fakegpu_node("2xh100-80gb")
    await node.run_pod("uid-1", {"c": {GPU: 1}}, name="web-0", namespace="shop")
    request = len_field(1, "web-0") + len_field(2, "shop")  # GetPodResourcesRequest.pod_name = 1, pod_namespace = 2
    raw = await unary(node.kubelet.pod_resources_socket, LISTER + "Get", request)
    (pod,) = messages(raw, 1)  # GetPodResourcesResponse.pod_resources = 1
    assert (string(pod, 1), string(pod, 2)) == ("web-0", "shop")
    raw = await unary(node.kubelet.pod_resources_socket, LISTER + "GetAllocatableResources", b"")
    devices = messages(raw, 1)  # AllocatableResourcesResponse.devices = 1
    assert sorted(strings(d, 2)[0] for d in devices) == sorted(g.uuid for g in node.inventory.node.gpus)


def test_generated_names_match_upstream():
    assert pr.DESCRIPTOR.package == "v1"
    assert pr.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name == "v1.PodResourcesLister"
    assert set(pr.DESCRIPTOR.services_by_name["PodResourcesLister"].methods_by_name) == {
        "List",
        "GetAllocatableResources",
        "Get",
    }

    def fields(message) -> dict[str, int]:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}

    assert fields(pr.ListPodResourcesResponse) == {"pod_resources": 1}
    assert fields(pr.PodResources) == {"name": 1, "namespace": 2, "containers": 3}
    assert fields(pr.ContainerResources) == {
        "name": 1,
        "devices": 2,
        "cpu_ids": 3,
        "memory": 4,
        "dynamic_resources": 5,
    }
    assert fields(pr.ContainerMemory) == {"memory_type": 1, "size": 2, "topology": 3}
    assert fields(pr.ContainerDevices) == {"resource_name": 1, "device_ids": 2, "topology": 3}
    assert fields(pr.TopologyInfo) == {"nodes": 1}
    assert fields(pr.NUMANode) == {"ID": 1}
    assert fields(pr.DynamicResource) == {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4}
    assert fields(pr.ClaimResource) == {"cdi_devices": 1, "driver_name": 2, "pool_name": 3, "device_name": 4}
    assert fields(pr.CDIDevice) == {"name": 1}
    assert fields(pr.AllocatableResourcesResponse) == {"devices": 1, "cpu_ids": 2, "memory": 3}
    assert fields(pr.GetPodResourcesRequest) == {"pod_name": 1, "pod_namespace": 2}
    assert fields(pr.GetPodResourcesResponse) == {"pod_resources": 1}
