"""A grpc.aio server bound to one Unix socket file, owner-only, that notices when the file vanishes.

Both the device plugin servers and the plugins_registry registration servers are this: a stale socket
is removed first, the new one is made 0600, and deletion (a restarting kubelet cleans the directory)
is detected by comparing the file's identity.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import grpc

from kubeletapi.unix_socket import check_socket_path, identity, remove_stale


class SocketServer:
    def __init__(self, socket_path: Path, add_services: Callable[[grpc.aio.Server], None]) -> None:
        self.socket_path = socket_path
        self._add_services = add_services
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
        self._add_services(server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        os.chmod(self.socket_path, 0o600)
        self._server = server
        self._identity = identity(self.socket_path)

    def socket_intact(self) -> bool:
        """False once our socket file was deleted or replaced."""
        return self._identity is not None and identity(self.socket_path) == self._identity

    async def stop(self, grace: float = 0.2) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        await server.stop(grace)
        if self.socket_intact():
            self.socket_path.unlink(missing_ok=True)
        self._identity = None
