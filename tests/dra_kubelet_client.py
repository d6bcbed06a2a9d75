"""The kubelet's side of the DRA plugin API, for tests: registration, prepare/unprepare, health."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import grpc

from fakegpu.kubeletapi.dra.v1 import api_pb2 as v1
from fakegpu.kubeletapi.dra.v1 import api_pb2_grpc as v1_grpc
from fakegpu.kubeletapi.dra.v1beta1 import api_pb2 as v1beta1
from fakegpu.kubeletapi.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from fakegpu.kubeletapi.drahealth.v1alpha1 import api_pb2 as health
from fakegpu.kubeletapi.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2 as reg
from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2_grpc as reg_grpc

Claim = tuple[str, str, str]
"""(namespace, name, uid)"""


async def get_info(registration_socket: Path) -> reg.PluginInfo:
    async with grpc.aio.insecure_channel(f"unix://{registration_socket}") as channel:
        stub = reg_grpc.RegistrationStub(channel)
        info = await stub.GetInfo(reg.InfoRequest(), timeout=5)
        await stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=5)
        return info


async def prepare(socket: Path, claims: Sequence[Claim]) -> v1.NodePrepareResourcesResponse:
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = v1_grpc.DRAPluginStub(channel)
        request = v1.NodePrepareResourcesRequest(
            claims=[v1.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims]
        )
        return await stub.NodePrepareResources(request, timeout=45)


async def unprepare(socket: Path, claims: Sequence[Claim]) -> v1.NodeUnprepareResourcesResponse:
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = v1_grpc.DRAPluginStub(channel)
        request = v1.NodeUnprepareResourcesRequest(
            claims=[v1.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims]
        )
        return await stub.NodeUnprepareResources(request, timeout=45)


async def prepare_v1beta1(socket: Path, claims: Sequence[Claim]) -> v1beta1.NodePrepareResourcesResponse:
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = v1beta1_grpc.DRAPluginStub(channel)
        request = v1beta1.NodePrepareResourcesRequest(
            claims=[v1beta1.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims]
        )
        return await stub.NodePrepareResources(request, timeout=45)


def health_stream(
    channel: grpc.aio.Channel,
) -> grpc.aio.UnaryStreamCall[health.NodeWatchResourcesRequest, health.NodeWatchResourcesResponse]:
    stub = health_grpc.DRAResourceHealthStub(channel)
    return stub.NodeWatchResources(health.NodeWatchResourcesRequest())
