"""The kubelet's ``v1.PodResourcesLister`` on ``<root>/pod-resources/kubelet.sock``.

Monitoring agents (dcgm-exporter first of all) ask this API which pod and container hold which device,
so it must answer from the allocations the emulator's device manager actually made, the way the kubelet
does (pkg/kubelet/apis/podresources/server_v1.go and the device manager's ``GetDevices``):

- List returns one PodResources per active pod, every container of the pod (also those without
  devices), and per container one ContainerDevices per device ID, once per NUMA node of the device
  (``containerDevicesFromResourceDeviceInstances`` over ``GetDevices``); devices without NUMA affinity
  (-1 in the checkpoint) carry no topology. The kubelet walks Go maps, so its order varies; the emulator
  lists resources by name, then NUMA nodes in order, then the devices in allocation order.
- GetAllocatableResources returns every healthy device the same way: its own ContainerDevices, once per
  NUMA node.
- Get answers for one pod by namespace and name; an unknown pod is a plain Go error (gRPC UNKNOWN) with
  the kubelet's text.

The emulator does not run a CPU or memory manager and has no DRA manager, so ``cpu_ids``, ``memory`` and
``dynamic_resources`` stay empty.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import grpc

from fakegpu.kubelet.device_manager import HEALTHY, NO_NUMA, DeviceManager
from fakegpu.kubeletapi.podresources.v1 import api_pb2, api_pb2_grpc

POD_RESOURCES_DIR = "pod-resources"
POD_RESOURCES_SOCKET = "kubelet.sock"


@dataclass(frozen=True)
class ActivePod:
    """What the pod-resources server needs to know about a pod the kubelet runs."""

    uid: str
    name: str
    namespace: str
    containers: tuple[str, ...]


def _topology(numa: int) -> api_pb2.TopologyInfo | None:
    if numa < 0:
        return None
    return api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=numa)])


def container_devices(manager: DeviceManager, pod_uid: str, container: str) -> list[api_pb2.ContainerDevices]:
    """The kubelet's ``GetDevices(podUID, containerName)`` through ``containerDevicesFromResourceDeviceInstances``:
    one entry per device ID, repeated for each NUMA node the device was allocated from."""
    out: list[api_pb2.ContainerDevices] = []
    allocations = [a for a in manager.allocations if (a.pod_uid, a.container) == (pod_uid, container)]
    for allocation in sorted(allocations, key=lambda a: a.resource):
        # getContainerDevices: device ID -> its NUMA nodes (none for a device without affinity).
        nodes: dict[str, list[int]] = {}
        for numa in sorted(allocation.numa):
            for device_id in allocation.numa[numa]:
                found = nodes.setdefault(device_id, [])
                if numa >= 0 and numa not in found:
                    found.append(numa)
        for device_id, numas in nodes.items():
            for numa in numas or [NO_NUMA]:
                out.append(
                    api_pb2.ContainerDevices(
                        resource_name=allocation.resource, device_ids=[device_id], topology=_topology(numa)
                    )
                )
    return out


def allocatable_devices(manager: DeviceManager) -> list[api_pb2.ContainerDevices]:
    """The kubelet's ``containerDevicesFromResourceDeviceInstances`` over the healthy devices: one entry
    per device, repeated for each NUMA node it reports."""
    out: list[api_pb2.ContainerDevices] = []
    for resource, state in sorted(manager.resources.items()):
        for device_id, device in sorted(state.devices.items()):
            if device.health != HEALTHY:
                continue
            nodes = [n.ID for n in device.topology.nodes] if device.HasField("topology") else []
            for numa in nodes or [NO_NUMA]:
                out.append(
                    api_pb2.ContainerDevices(resource_name=resource, device_ids=[device_id], topology=_topology(numa))
                )
    return out


class PodResourcesService(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, pods: Callable[[], Iterable[ActivePod]], manager: DeviceManager) -> None:
        self._pods = pods
        self.manager = manager
        self.calls: collections.Counter[str] = collections.Counter()
        """RPCs answered, by method (a count, not a log: a monitoring agent calls List every few seconds)."""

    def pod_resources(self, pod: ActivePod) -> api_pb2.PodResources:
        containers = [
            api_pb2.ContainerResources(name=c, devices=container_devices(self.manager, pod.uid, c))
            for c in pod.containers
        ]
        return api_pb2.PodResources(name=pod.name, namespace=pod.namespace, containers=containers)

    async def List(
        self,
        request: api_pb2.ListPodResourcesRequest,
        context: grpc.aio.ServicerContext[api_pb2.ListPodResourcesRequest, api_pb2.ListPodResourcesResponse],
    ) -> api_pb2.ListPodResourcesResponse:
        self.calls["List"] += 1
        return api_pb2.ListPodResourcesResponse(pod_resources=[self.pod_resources(p) for p in self._pods()])

    async def GetAllocatableResources(
        self,
        request: api_pb2.AllocatableResourcesRequest,
        context: grpc.aio.ServicerContext[api_pb2.AllocatableResourcesRequest, api_pb2.AllocatableResourcesResponse],
    ) -> api_pb2.AllocatableResourcesResponse:
        self.calls["GetAllocatableResources"] += 1
        return api_pb2.AllocatableResourcesResponse(devices=allocatable_devices(self.manager))

    async def Get(
        self,
        request: api_pb2.GetPodResourcesRequest,
        context: grpc.aio.ServicerContext[api_pb2.GetPodResourcesRequest, api_pb2.GetPodResourcesResponse],
    ) -> api_pb2.GetPodResourcesResponse:
        self.calls["Get"] += 1
        for pod in self._pods():
            if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                return api_pb2.GetPodResourcesResponse(pod_resources=self.pod_resources(pod))
        await context.abort(
            grpc.StatusCode.UNKNOWN, f"pod {request.pod_name} in namespace {request.pod_namespace} not found"
        )
        raise AssertionError("unreachable: abort raises")
