"""An HTTP client's sockets on asyncio's own transports, for the clients that send thousands of requests.

httpx's connection pool (httpcore) reaches the network through a backend. Its default under asyncio is
anyio's: every read and write of every request goes through anyio's cancel scopes, its TLS stream (TLS in
Python, over a socket stream with checkpoints of its own) and per-call dicts of attributes. A profile of a
1000-node dynamic-MIG bring-up over TLS (``bench/virtual_nodes.py``, 10 requests per node) put a quarter of
the client's CPU there. This backend does the same work on an ``asyncio.Protocol`` and asyncio's own TLS
(``loop.start_tls``): one buffer, one future per wait, a timer only while waiting.

What stays as it was: the pool, HTTP/1.1 framing (h11), keep-alive, TLS verification (the pool's
``ssl.SSLContext``, so the kubeconfig's CA and client certificates), the exceptions httpx maps (httpcore's
``ConnectError``, ``ReadTimeout`` and friends) and the check of an idle connection the server closed (the
socket polled, as httpcore does).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore2
from httpcore2 import AsyncNetworkBackend, AsyncNetworkStream
from httpcore2._utils import is_socket_readable
from lightkube import AsyncClient

PAUSE_READING_AT = 4 * 2**20
"""Bytes received and not yet read at which the socket stops being read (the server then waits)."""


class _Protocol(asyncio.Protocol):
    """Received bytes, end of stream and write flow control of one connection, for ``_Stream``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self.paused_writing = False
        self.paused_reading = False
        self._waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) >= PAUSE_READING_AT and self.transport is not None and not self.paused_reading:
            self.paused_reading = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self.paused_writing = False
        self._wake()

    def pause_writing(self) -> None:
        self.paused_writing = True

    def resume_writing(self) -> None:
        self.paused_writing = False
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float | None, timed_out: type[Exception]) -> None:
        """Until something changes (bytes, end of stream, room to write), at most ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter, timed_out)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()


def _expire(waiter: asyncio.Future[None], timed_out: type[Exception]) -> None:
    if not waiter.done():
        waiter.set_exception(timed_out())


class _Stream(AsyncNetworkStream):
    def __init__(self, transport: asyncio.Transport, protocol: _Protocol, raw: socket.socket | None) -> None:
        self._transport = transport
        self._protocol = protocol
        self._raw = raw
        self._loop = asyncio.get_running_loop()
        self._pending: list[bytes] = []
        """Writes not yet handed to the transport: a request's head and body go out together (see ``write``)."""

    def _flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._flush()
        protocol = self._protocol
        while not protocol.buffer:
            if protocol.eof:
                if protocol.error is not None:
                    raise httpcore2.ReadError(str(protocol.error) or type(protocol.error).__name__)
                return b""
            await protocol.wait(timeout, httpcore2.ReadTimeout)
        buffer = protocol.buffer
        if len(buffer) <= max_bytes:
            data = bytes(buffer)
            buffer.clear()
        else:
            data = bytes(buffer[:max_bytes])
            del buffer[:max_bytes]
        if protocol.paused_reading and len(buffer) < PAUSE_READING_AT // 2:
            protocol.paused_reading = False
            self._transport.resume_reading()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """Handed to the transport once the task yields: h11 writes a request's head and its body one after
        the other, and sent apart they cost two TLS records, two system calls and two wake-ups of the
        server, where one does."""
        if not buffer:
            return
        protocol = self._protocol
        if protocol.eof or self._transport.is_closing():
            raise httpcore2.WriteError(str(protocol.error or "the connection is closed"))
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(buffer)
        if protocol.paused_writing:
            self._flush()
            while protocol.paused_writing:
                await protocol.wait(timeout, httpcore2.WriteTimeout)
            if protocol.error is not None:
                raise httpcore2.WriteError(str(protocol.error))

    async def aclose(self) -> None:
        self._flush()
        self._transport.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            upgrade = loop.start_tls(
                self._transport,
                self._protocol,
                ssl_context,
                server_hostname=server_hostname,
                ssl_handshake_timeout=timeout,
            )
            async with asyncio.timeout(timeout):  # not wait_for, which on 3.11 can swallow a cancellation
                transport = await upgrade
        except TimeoutError:
            self._transport.close()
            raise httpcore2.ConnectTimeout("the TLS handshake timed out") from None
        except (OSError, ssl.SSLError) as exc:
            self._transport.close()
            raise httpcore2.ConnectError(str(exc) or type(exc).__name__) from exc
        if transport is None:
            raise httpcore2.ConnectError("the connection closed during the TLS handshake")
        assert isinstance(transport, asyncio.Transport)
        # start_tls does not call connection_made again: point the protocol at the TLS transport, so that
        # read flow control pauses and resumes the same transport (pausing the raw one under TLS would never
        # be undone through the TLS one).
        self._protocol.transport = transport
        return _Stream(transport, self._protocol, self._raw)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # An idle connection with anything to read (or closed) was closed by the server.
            protocol = self._protocol
            return (
                protocol.eof or bool(protocol.buffer) or is_socket_readable(self._raw)
            )  # httpcore's own probe: both backends decide alike
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._raw
        return None


class AsyncioBackend(AsyncNetworkBackend):
    """httpcore's network backend on asyncio transports (see the module docstring)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        return await _connected(
            loop.create_connection(_Protocol, host, port, local_addr=local), timeout, socket_options
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        return await _connected(loop.create_unix_connection(_Protocol, path), timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _connected(connecting: Any, timeout: float | None, socket_options: Iterable[Any] | None) -> _Stream:
    try:
        async with asyncio.timeout(timeout):  # not wait_for, which on 3.11 can swallow a cancellation
            transport, protocol = await connecting
    except TimeoutError:
        raise httpcore2.ConnectTimeout("connecting timed out") from None
    except OSError as exc:
        raise httpcore2.ConnectError(str(exc) or type(exc).__name__) from exc
    raw = transport.get_extra_info("socket")
    for option in socket_options or ():
        raw.setsockopt(*option)
    return _Stream(transport, protocol, raw)


def use_asyncio_streams(client: AsyncClient) -> bool:
    """Put the backend under ``client``'s connection pool (before its first request); False when the client
    is not a lightkube client over httpx's own transport (a test's stand-in), which is then left alone."""
    with contextlib.suppress(AttributeError):
        transport: Any = client._client._client._transport  # lightkube -> httpx -> transport (untyped here)
        pool = transport._pool  # -> httpcore's pool
        # HTTP/1.1 only: the streams keep one waiter per connection, which HTTP/2's several requests on one
        # connection would share (lightkube leaves HTTP/2 off, as do these clients).
        if isinstance(pool, httpcore2.AsyncConnectionPool) and not pool._http2:
            pool._network_backend = AsyncioBackend()
            return True
    return False
