"""One gRPC server per resource name, on its own socket in the device plugin directory."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from fakegpu.fakeplugin.device_plugin_service import DevicePluginService
from fakegpu.fakeplugin.metrics import DevicePluginMetrics
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2_grpc
from fakegpu.runtime.socket_server import SocketServer
from fakegpu.sharing.live_inventory import LiveInventory

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
        metrics: DevicePluginMetrics | None = None,
    ) -> None:
        self.resource_name = resource_name
        self.socket_path = socket_path
        self._live = live
        self._pre_start_required = pre_start_required
        self._on_call = on_call
        self._metrics = metrics
        self.service = self._new_service()
        self._socket = SocketServer(
            socket_path, lambda server: api_pb2_grpc.add_DevicePluginServicer_to_server(self.service, server)
        )

    def _new_service(self) -> DevicePluginService:
        return DevicePluginService(
            self._live,
            self.resource_name,
            pre_start_required=self._pre_start_required,
            on_call=self._on_call,
            metrics=self._metrics,
        )

    @property
    def running(self) -> bool:
        return self._socket.running

    async def start(self) -> None:
        await self._socket.start()
        log.info("serving %s on %s", self.resource_name, self.socket_path)

    def socket_intact(self) -> bool:
        """False once our socket file was deleted or replaced (e.g. by a restarting kubelet)."""
        return self._socket.socket_intact()

    async def stop(self, grace: float = 0.2) -> None:
        if not self._socket.running:
            return
        self.service.stop_streams()
        await self._socket.stop(grace)
        # A fresh service for the next start: the old one's stop flag must not end new streams.
        self.service = self._new_service()
