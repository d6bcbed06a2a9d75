"""The admin socket server: an owner-only Unix socket (never TCP) serving a daemon's ops.

The socket file is made 0600 (in a 0700 directory it creates) before the server accepts anything, and
every connection's peer credentials are checked: only the daemon's own user (and root) may talk to it.
Any exception from an op is answered as an error and never stops the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import struct
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from fakegpu.control.protocol import MAX_REQUEST, AdminError, Op, check_arguments, encode, op_fields, parse_request
from fakegpu.runtime.unix_socket import check_socket_path, identity, remove_stale

log = logging.getLogger(__name__)

SOCKET_MODE = 0o600
DIR_MODE = 0o700


def peer_uid(sock: Any) -> int | None:
    """The UID of the process at the other end of a Unix socket (None where the OS cannot say)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:  # pragma: no cover - not Linux; the 0600 file mode still guards the socket
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)


class AdminServer:
    """Serves ``ops`` on the Unix socket ``path`` until :meth:`stop`."""

    def __init__(
        self,
        path: Path | str,
        ops: Mapping[str, Op],
        *,
        max_request: int = MAX_REQUEST,
        allowed_uids: Collection[int] = (),
    ) -> None:
        self.path = Path(path)
        self.ops = dict(ops)
        self.max_request = max_request
        self.allowed_uids = frozenset(allowed_uids) or frozenset({os.geteuid(), 0})
        self._fields = {name: op_fields(name, op) for name, op in self.ops.items()}
        self._server: asyncio.Server | None = None
        self._identity: tuple[int, int] | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self.requests = 0
        self.refused = 0

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        check_socket_path(self.path)
        if not self.path.parent.exists():
            self.path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        remove_stale(self.path, keep_live=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old_umask = os.umask(0o177)
            try:
                sock.bind(str(self.path))
            finally:
                os.umask(old_umask)
            os.chmod(self.path, SOCKET_MODE)
            sock.listen(16)
            self._server = await asyncio.start_unix_server(self._serve, sock=sock, limit=self.max_request)
        except BaseException:
            sock.close()
            if self._server is None:
                with contextlib.suppress(OSError):
                    remove_stale(self.path, keep_live=True)
            raise
        self._identity = identity(self.path)
        log.info("admin socket listening on %s", self.path)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        # Closing a connection ends its conversation at the next read; an op still running after a
        # second is cancelled.
        for writer in self._connections.values():
            writer.close()
        tasks = list(self._connections)
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=1.0)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 2.0)
        if self._identity is not None and identity(self.path) == self._identity:
            self.path.unlink(missing_ok=True)
        self._identity = None

    async def __aenter__(self) -> AdminServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections[task] = writer
        try:
            await self._conversation(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            if self._server is not None:
                raise
            # Cancelled by stop(): end quietly (asyncio logs a connection task that ends cancelled).
        except Exception:
            log.exception("admin connection failed")
        finally:
            if task is not None:
                self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _conversation(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        uid = peer_uid(writer.get_extra_info("socket"))
        if uid is not None and uid not in self.allowed_uids:
            self.refused += 1
            log.warning("admin socket %s: refused a connection from uid %d", self.path, uid)
            await self._send(
                writer,
                {"ok": False, "error": f"permission denied: uid {uid} may not use the admin socket {self.path}"},
            )
            return
        while True:
            try:
                line = await reader.readline()
            except (ValueError, asyncio.LimitOverrunError):
                await self._send(
                    writer, {"ok": False, "error": f"request is larger than {self.max_request} bytes; refused"}
                )
                return
            if not line:
                return
            if not line.strip():
                continue
            self.requests += 1
            await self._send(writer, await self.answer(line))

    async def answer(self, line: bytes) -> dict[str, Any]:
        """The response to one request line; never raises (a failing op is an error answer)."""
        try:
            op_name, args = parse_request(line)
        except AdminError as exc:
            return {"ok": False, "error": str(exc)}
        op = self.ops.get(op_name)
        if op is None:
            return {"ok": False, "error": f"unknown op {op_name!r}; known ops: {', '.join(sorted(self.ops))}"}
        try:
            result = await op(**check_arguments(op_name, self._fields[op_name], args))
        except AdminError as exc:
            return {"ok": False, "error": str(exc)}
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("admin op %s failed", op_name)
            return {"ok": False, "error": f"op {op_name!r} failed: {type(exc).__name__}: {exc}"}
        try:
            json.dumps(result)
        except (TypeError, ValueError):
            log.exception("admin op %s returned a result that is not JSON", op_name)
            return {"ok": False, "error": f"op {op_name!r} returned a result that is not JSON"}
        return {"ok": True, "result": result}

    async def _send(self, writer: asyncio.StreamWriter, response: dict[str, Any]) -> None:
        writer.write(encode(response))
        await writer.drain()
