"""One gRPC server per resource name, on its own socket in the device plugin directory."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc

from fakeplugin.device_plugin_service import DevicePluginService
from fakeplugin.unix_socket import check_socket_path, identity, remove_stale
from kubeletapi.deviceplugin.v1beta1 import api_pb2_grpc
from sharing.live_inventory import LiveInventory

log = logging.getLogger(__name__)


class ResourceServer:
    def __init__(
        self,
        live: LiveInventory,
        resource_name: str,
        socket_path: Path,
        *,
        pre_start_required: bool = False,
        on_call: Callable[[str, Sequence[str]], None] | None = None,
    ) -> None:
        self.resource_name = resource_name
        self.socket_path = socket_path
        self.service = DevicePluginService(live, resource_name, pre_start_required=pre_start_required, on_call=on_call)
        self._server: grpc.aio.Server | None = None
        self._identity: tuple[int, int] | None = None

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        check_socket_path(self.socket_path)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(self.socket_path)
        server = grpc.aio.server()
        api_pb2_grpc.add_DevicePluginServicer_to_server(self.service, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        os.chmod(self.socket_path, 0o600)
        self._server = server
        self._identity = identity(self.socket_path)
        log.info("serving %s on %s", self.resource_name, self.socket_path)

    def socket_intact(self) -> bool:
        """False once our socket file was deleted or replaced (e.g. by a restarting kubelet)."""
        return self._identity is not None and identity(self.socket_path) == self._identity

    async def stop(self, grace: float = 0.2) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self.service.stop_streams()
        await server.stop(grace)
        if self._identity is not None and identity(self.socket_path) == self._identity:
            self.socket_path.unlink(missing_ok=True)
        self._identity = None
        # A fresh service for the next start: its stop flag must not end new streams.
        old = self.service
        self.service = DevicePluginService(
            old.live, old.resource_name, pre_start_required=old.options.pre_start_required, on_call=old._on_call
        )
