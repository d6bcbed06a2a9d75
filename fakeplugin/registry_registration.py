"""Registering through the kubelet's plugin watcher: a ``pluginregistration.Registration`` server in
``plugins_registry/`` announcing the device plugin socket (type ``DevicePlugin``)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import grpc

from fakeplugin.unix_socket import check_socket_path, identity, remove_stale
from kubeletapi.pluginregistration.v1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

DEVICE_PLUGIN_TYPE = "DevicePlugin"


def registry_socket_name(resource_name: str) -> str:
    """``nvidia.com/gpu`` -> ``nvidia.com-gpu-reg.sock`` (the name a real plugin used, see golden)."""
    return resource_name.replace("/", "-") + "-reg.sock"


class RegistrationService(api_pb2_grpc.RegistrationServicer):
    def __init__(self, name: str, endpoint: str, versions: list[str], plugin_type: str = DEVICE_PLUGIN_TYPE) -> None:
        self.info = api_pb2.PluginInfo(type=plugin_type, name=name, endpoint=endpoint, supported_versions=versions)
        self.registered: bool | None = None
        self.error = ""
        self.notifications = 0

    async def GetInfo(
        self, request: api_pb2.InfoRequest, context: grpc.aio.ServicerContext[api_pb2.InfoRequest, api_pb2.PluginInfo]
    ) -> api_pb2.PluginInfo:
        return self.info

    async def NotifyRegistrationStatus(
        self,
        request: api_pb2.RegistrationStatus,
        context: grpc.aio.ServicerContext[api_pb2.RegistrationStatus, api_pb2.RegistrationStatusResponse],
    ) -> api_pb2.RegistrationStatusResponse:
        self.registered = request.plugin_registered
        self.error = request.error
        self.notifications += 1
        if not request.plugin_registered:
            log.error("kubelet refused %s: %s", self.info.name, request.error)
        return api_pb2.RegistrationStatusResponse()


class RegistryRegistration:
    """Serves the registration socket for one plugin until stopped."""

    def __init__(self, socket_path: Path, service: RegistrationService) -> None:
        self.socket_path = socket_path
        self.service = service
        self._server: grpc.aio.Server | None = None
        self._identity: tuple[int, int] | None = None

    async def start(self) -> None:
        check_socket_path(self.socket_path)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(self.socket_path)
        server = grpc.aio.server()
        api_pb2_grpc.add_RegistrationServicer_to_server(self.service, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        os.chmod(self.socket_path, 0o600)
        self._server = server
        self._identity = identity(self.socket_path)

    def socket_intact(self) -> bool:
        return self._identity is not None and identity(self.socket_path) == self._identity

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        await server.stop(0.1)
        if self._identity is not None and identity(self.socket_path) == self._identity:
            self.socket_path.unlink(missing_ok=True)
        self._identity = None
