"""Registering through the kubelet's plugin watcher: a ``pluginregistration.Registration`` server in
``plugins_registry/`` announcing a plugin's service socket. Device plugins (type ``DevicePlugin``)
and DRA drivers (type ``DRAPlugin``) both register this way."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import grpc

from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2, api_pb2_grpc
from fakegpu.runtime.socket_server import SocketServer

log = logging.getLogger(__name__)

DEVICE_PLUGIN_TYPE = "DevicePlugin"


def registry_socket_name(plugin_name: str) -> str:
    """``nvidia.com/gpu`` -> ``nvidia.com-gpu-reg.sock``; ``gpu.nvidia.com`` -> ``gpu.nvidia.com-reg.sock``
    (the names real plugins use on a real kubelet)."""
    return plugin_name.replace("/", "-") + "-reg.sock"


RegistrationStatusCallback = Callable[[bool, str], None]
"""``(registered, error)``: what the kubelet said in NotifyRegistrationStatus."""


class RegistrationService(api_pb2_grpc.RegistrationServicer):
    def __init__(
        self,
        name: str,
        endpoint: str,
        versions: list[str],
        plugin_type: str = DEVICE_PLUGIN_TYPE,
        *,
        on_status: RegistrationStatusCallback | None = None,
    ) -> None:
        self.info = api_pb2.PluginInfo(type=plugin_type, name=name, endpoint=endpoint, supported_versions=versions)
        self.registered: bool | None = None
        self.error = ""
        self.notifications = 0
        self.on_status = on_status
        """Called with each NotifyRegistrationStatus (to count registrations); its errors are logged only."""

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
        if self.on_status is not None:
            try:
                self.on_status(request.plugin_registered, request.error)
            except Exception:  # a counter must not fail the kubelet's call
                log.exception("registration status callback of %s failed", self.info.name)
        return api_pb2.RegistrationStatusResponse()


class RegistryRegistration:
    """Serves the registration socket for one plugin until stopped."""

    def __init__(self, socket_path: Path, service: RegistrationService) -> None:
        self.socket_path = socket_path
        self.service = service
        self._socket = SocketServer(
            socket_path, lambda server: api_pb2_grpc.add_RegistrationServicer_to_server(service, server)
        )

    async def start(self) -> None:
        await self._socket.start()

    def socket_intact(self) -> bool:
        return self._socket.socket_intact()

    async def stop(self) -> None:
        await self._socket.stop(0.1)
