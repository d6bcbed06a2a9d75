"""The kubelet's ``v1beta1.Registration`` service on kubelet.sock.

As in the kubelet, Register validates the version and the resource name, then dials the plugin and
calls GetDevicePluginOptions before it returns; ListAndWatch starts right after.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import grpc

from fakegpu.kubelet.device_manager import DeviceManager
from fakegpu.kubelet.plugin_endpoint import PluginEndpoint
from fakegpu.kubelet.resource_names import is_extended_resource_name
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

SUPPORTED_VERSIONS = ["v1beta1"]


def validate_registration(version: str, resource_name: str) -> str | None:
    """The kubelet's rejection text, or None when the request is acceptable."""
    if version not in SUPPORTED_VERSIONS:
        return (
            f"requested API version {json.dumps(version)} is not supported by kubelet. "
            f"Supported version is {json.dumps(SUPPORTED_VERSIONS, separators=(',', ':'))}"
        )
    if not is_extended_resource_name(resource_name):
        return f"the ResourceName {json.dumps(resource_name)} is invalid"
    return None


class KubeletRegistrationService(api_pb2_grpc.RegistrationServicer):
    def __init__(self, manager: DeviceManager, device_plugin_dir: Path) -> None:
        self.manager = manager
        self.device_plugin_dir = device_plugin_dir
        self.requests: list[api_pb2.RegisterRequest] = []

    async def Register(
        self,
        request: api_pb2.RegisterRequest,
        context: grpc.aio.ServicerContext[api_pb2.RegisterRequest, api_pb2.Empty],
    ) -> api_pb2.Empty:
        self.requests.append(request)
        log.info("Got registration request from device plugin with resource %s", request.resource_name)
        problem = validate_registration(request.version, request.resource_name)
        if problem is not None:
            await context.abort(grpc.StatusCode.UNKNOWN, problem)
        endpoint_name = request.endpoint
        if not endpoint_name or "/" in endpoint_name or endpoint_name in (".", ".."):
            await context.abort(
                grpc.StatusCode.UNKNOWN, f"invalid endpoint {endpoint_name!r}: expected a socket file name"
            )
        endpoint = PluginEndpoint(request.resource_name, self.device_plugin_dir / endpoint_name)
        try:
            await endpoint.connect()
        except grpc.aio.AioRpcError as exc:
            await context.abort(
                grpc.StatusCode.UNKNOWN, f"failed to dial device plugin: {exc.code().name}: {exc.details()}"
            )
        await self.manager.connect(request.resource_name, endpoint)
        log.info("Device plugin connected: %s", request.resource_name)
        return api_pb2.Empty()
