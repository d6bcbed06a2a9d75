"""Small read-only HTTP endpoints served on the daemon's own event loop: ``GET /metrics`` for a daemon's
Prometheus registry (``MetricsServer``), and any fixed set of paths (``HttpEndpoint``, e.g. the health
checks of ``fakegpu.telemetry.health_endpoint``).

A few lines of HTTP/1.x over ``asyncio.start_server`` rather than prometheus_client's threaded server:
the daemons are asyncio through and through, and a thread would race the loop over the state the
answers read. One request per connection (``Connection: close``), which is all a Prometheus scrape or a
kubelet probe needs; anything else gets 404 (other paths), 405 (other methods) or 400 (not HTTP), and
nothing a client sends, or fails to send, can stop the server.

Off unless ``--metrics-address`` is given. ``PORT`` and ``:PORT`` listen on loopback only (127.0.0.1),
so turning metrics on never opens a port to the network by accident; in a pod, where Prometheus
scrapes the pod IP, give ``0.0.0.0:PORT`` (or ``[::]:PORT``, which listens dual-stack: IPv6 and IPv4, as
Go's ``:PORT`` does, where asyncio alone would listen on IPv6 only).

A misbehaving client costs little: at most ``MAX_CONNECTIONS`` connections are served at once (more are
closed as soon as they are accepted), and each one has a single deadline over its whole exchange (reading
the request, rendering, writing the answer); a client that does not read its answer within it is cut off
(the connection is aborted, not left waiting for a flush).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import ipaddress
import logging
import os
import re
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from fakegpu.sharing.errors import SpecError

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
METRICS_PATH = "/metrics"
ALLOWED_METHODS = ("GET", "HEAD")
EXPECTED = "expected HOST:PORT, [IPV6]:PORT, :PORT or PORT, with PORT from 0 to 65535"
MAX_LINE = 8192
MAX_HEADERS = 100
MAX_CONNECTIONS = 64
"""Connections served at once; Prometheus opens one per scrape, so this only stops a flood."""
CLOSE_TIMEOUT = 2.0
"""After the answer is written: how long the last of it may take to reach the client before the connection
is cut."""
REQUEST_TIMEOUT = 30.0
"""Deadline of one whole exchange: read, render and write (a scrape that slow is long given up anyway)."""
_PORT = re.compile(r"[0-9]{1,5}")
_HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")
_REQUEST_LINE = re.compile(r"([A-Z]+) (\S+) HTTP/1\.[0-9]")


@dataclass(frozen=True)
class ListenAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen_address(value: str, flag: str = "--metrics-address") -> ListenAddress:
    """``PORT``, ``:PORT`` (both loopback), ``HOST:PORT`` or ``[IPV6]:PORT``; port 0 picks a free port.

    Anything else is a ``SpecError`` naming the flag, the value, what is wrong and what was expected.
    """

    def fail(reason: str) -> SpecError:
        return SpecError(flag, f"{value!r}: {reason}; {EXPECTED}")

    if "://" in value:
        raise fail("an address, not a URL")
    if re.fullmatch(r"[0-9]+", value):
        host, port_text = LOOPBACK, value
    elif value.startswith("["):
        host, port_text = _bracketed_host(value, fail)
    else:
        host, port_text = _plain_host(value, fail)
    if not port_text:
        raise fail("no port")
    if not _PORT.fullmatch(port_text) or int(port_text) > 65535:
        raise fail(f"port {port_text!r} is not a number from 0 to 65535")
    return ListenAddress(host, int(port_text))


def _bracketed_host(value: str, fail: Callable[[str], SpecError]) -> tuple[str, str]:
    """``[IPV6]:PORT`` -> the IPv6 address and the port's text (checked by the caller)."""
    end = value.find("]")
    if end < 0:
        raise fail("no closing ']' after the IPv6 address")
    host, rest = value[1:end], value[end + 1 :]
    if not rest.startswith(":"):
        raise fail("no port after the IPv6 address")
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        raise fail(f"{host!r} is not an IPv6 address") from None
    return host, rest[1:]


def _plain_host(value: str, fail: Callable[[str], SpecError]) -> tuple[str, str]:
    """``HOST:PORT`` or ``:PORT`` (loopback) -> the host and the port's text (checked by the caller)."""
    host, colon, port_text = value.rpartition(":")
    if not colon:
        raise fail("no port")
    if ":" in host:
        raise fail("an IPv6 address needs brackets, as in [::1]:9400")
    host = host or LOOPBACK
    if not _HOST_NAME.fullmatch(host):
        raise fail(f"{host!r} is not a host name or IP address")
    if re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise fail(f"{host!r} is not an IPv4 address") from None
    return host, port_text


def add_metrics_address_option(parser: argparse.ArgumentParser) -> None:
    """``--metrics-address`` for a daemon; parsed by ``metrics_address`` (not by argparse, whose errors
    print the usage too: a bad value must be one line and exit status 2, as every other bad input)."""
    parser.add_argument(
        "--metrics-address",
        default=None,
        metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (off unless given); PORT or :PORT "
        "listens on 127.0.0.1 only, so in a pod give 0.0.0.0:PORT for Prometheus to scrape it",
    )


def metrics_address(args: argparse.Namespace) -> ListenAddress | None:
    value: str | None = args.metrics_address
    return None if value is None else parse_listen_address(value)


class _BadRequest(Exception):
    pass


TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class Answer:
    """What one path answers: status, body and its content type."""

    status: HTTPStatus
    body: bytes
    content_type: str = TEXT


Route = Callable[[], Answer | Awaitable[Answer]]
"""Answers ``GET`` (and ``HEAD``) of one path; sync or async; an exception is answered 500 and logged."""


class HttpEndpoint:
    """Serves ``routes`` (path -> ``Route``) at ``http://ADDRESS/<path>`` from ``start()`` to ``stop()``.

    ``what`` names the endpoint in its log line (``serving <what> on <urls>``) and ``not_found`` is the hint
    a request for any other path gets; ``flag`` names the option in errors.
    """

    def __init__(
        self,
        address: ListenAddress,
        routes: Mapping[str, Route],
        *,
        what: str,
        not_found: str,
        flag: str,
        read_timeout: float = 10.0,
        timeout: float = REQUEST_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        if not routes:
            raise TypeError("an HTTP endpoint needs at least one route")
        self.address = address
        self.routes = dict(routes)
        self.what = what
        self.not_found = not_found
        self.flag = flag
        self.read_timeout = read_timeout
        self.timeout = timeout
        self.max_connections = max_connections
        self.refused = 0
        """Connections closed unserved because ``max_connections`` were open."""
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The port listened on: the one asked for, or the one the system picked for port 0."""
        if self._server is None or not self._server.sockets:
            return self.address.port
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def open_connections(self) -> int:
        """Connections being served now."""
        return len(self._connections)

    @property
    def urls(self) -> list[str]:
        """Each route's URL, in the order given (with the port picked for port 0)."""
        return [f"http://{ListenAddress(self.address.host, self.port)}{path}" for path in self.routes]

    @property
    def url(self) -> str:
        """The first route's URL."""
        return self.urls[0]

    async def start(self) -> None:
        """Listen; an address that cannot be used (port taken, host unknown) is a ``SpecError``."""
        try:
            if self.address.host == "::":
                self._server = await asyncio.start_server(
                    self._serve, sock=dual_stack_socket(self.address.port), limit=MAX_LINE
                )
            else:
                self._server = await asyncio.start_server(
                    self._serve, self.address.host, self.address.port, limit=MAX_LINE
                )
        except OSError as exc:
            # asyncio words bind errors its own way; the system's text is the one people search for.
            gai = isinstance(exc, socket.gaierror)
            reason = os.strerror(exc.errno) if exc.errno and not gai else (exc.strerror or str(exc))
            raise SpecError(self.flag, f"cannot listen on {self.address}: {reason}") from None
        log.info("serving %s on %s", self.what, ", ".join(self.urls))

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        # A client that opened a connection and sends nothing must not hold up shutdown.
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=2.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 2.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection. Never ends in an exception, cancellation included: asyncio would log it at ERROR
        from the connection task's done callback (Python 3.11+), e.g. for every open connection at stop."""
        if len(self._connections) >= self.max_connections:
            self.refused += 1
            writer.transport.abort()
            return
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        clean = False
        try:
            await self._exchange(reader, writer)
            clean = True
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away, never finished its request or does not read the answer
        except asyncio.CancelledError:
            pass  # stop(): the connection ends here, quietly
        except Exception:
            log.exception("%s request failed", self.what)
        finally:
            if task is not None:
                self._connections.discard(task)
            if clean:
                writer.close()
            else:
                writer.transport.abort()  # close() would wait for a flush that may never come
        if clean:  # the rest of the answer may still be in the buffer: a short while to flush it, no more
            await _flush_or_abort(writer)

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read the request and answer it, all within ``timeout``; reading alone within ``read_timeout``."""
        async with asyncio.timeout(self.timeout):
            try:
                async with asyncio.timeout(self.read_timeout):
                    method, path = await self._read_request(reader)
            except _BadRequest as exc:
                await self._respond(writer, HTTPStatus.BAD_REQUEST, f"{exc}\n".encode(), head=False)
            else:
                await self._answer(writer, method, path)

    async def _read_request(self, reader: asyncio.StreamReader) -> tuple[str, str]:
        try:
            line = await reader.readline()
            if not line:
                raise ConnectionResetError("closed before a request")
            match = _REQUEST_LINE.fullmatch(line.decode("latin-1").rstrip("\r\n"))
            if match is None:
                raise _BadRequest("not an HTTP/1.x request line")
            for _ in range(MAX_HEADERS):
                header = await reader.readline()
                if not header:
                    raise ConnectionResetError("closed in the headers")
                if header in (b"\r\n", b"\n"):
                    return match.group(1), match.group(2).split("?", 1)[0]
            raise _BadRequest("too many header lines")
        except ValueError:  # a line longer than MAX_LINE
            raise _BadRequest("request line or header too long") from None

    async def _answer(self, writer: asyncio.StreamWriter, method: str, path: str) -> None:
        route = self.routes.get(path)
        if route is None:
            body = f"not found; {self.not_found}\n".encode()
            await self._respond(writer, HTTPStatus.NOT_FOUND, body, method == "HEAD")
        elif method not in ALLOWED_METHODS:
            body = f"method {method} not allowed; use GET\n".encode()
            await self._respond(writer, HTTPStatus.METHOD_NOT_ALLOWED, body, head=False, allow=True)
        else:
            try:
                answered = route()
                answer = await answered if inspect.isawaitable(answered) else answered
            except Exception as exc:  # the route failed: say so, keep serving
                log.exception("answering %s failed", path)
                await self._respond(writer, HTTPStatus.INTERNAL_SERVER_ERROR, f"{exc}\n".encode(), method == "HEAD")
                return
            await self._respond(writer, answer.status, answer.body, method == "HEAD", content_type=answer.content_type)

    @staticmethod
    async def _respond(
        writer: asyncio.StreamWriter,
        status: HTTPStatus,
        body: bytes,
        head: bool,
        *,
        content_type: str = TEXT,
        allow: bool = False,
    ) -> None:
        lines = [
            f"HTTP/1.1 {status.value} {status.phrase}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
            "Connection: close",
        ]
        if allow:
            lines.append("Allow: " + ", ".join(ALLOWED_METHODS))
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head else body))
        await writer.drain()


async def _flush_or_abort(writer: asyncio.StreamWriter) -> None:
    """Wait ``CLOSE_TIMEOUT`` at most for a closed connection's last bytes to go, then cut it; never raises,
    cancellation included (see ``HttpEndpoint._serve``)."""
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await writer.wait_closed()
    except (Exception, asyncio.CancelledError):
        writer.transport.abort()


class MetricsServer(HttpEndpoint):
    """Serves ``registry`` at ``http://ADDRESS/metrics`` from ``start()`` to ``stop()``.

    ``render`` (sync or async, returning the body) replaces ``generate_latest(registry)`` for an exporter
    that writes its own text, as the fake dcgm-exporter does; ``flag`` names the option in errors.
    """

    def __init__(
        self,
        address: ListenAddress,
        registry: CollectorRegistry | None = None,
        *,
        render: Callable[[], bytes | Awaitable[bytes]] | None = None,
        content_type: str = CONTENT_TYPE_LATEST,
        flag: str = "--metrics-address",
        read_timeout: float = 10.0,
        timeout: float = REQUEST_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        if render is None:
            if registry is None:
                raise TypeError("MetricsServer needs a registry or a render function")
            source = registry

            def render() -> bytes:
                return generate_latest(source)

        self.render = render
        self.content_type = content_type
        super().__init__(
            address,
            {METRICS_PATH: self._metrics},
            what="metrics",
            not_found=f"metrics are at {METRICS_PATH}",
            flag=flag,
            read_timeout=read_timeout,
            timeout=timeout,
            max_connections=max_connections,
        )

    async def _metrics(self) -> Answer:
        try:
            rendered = self.render()
            body = await rendered if inspect.isawaitable(rendered) else rendered
        except Exception as exc:  # a collector failed: say so, keep serving
            log.exception("collecting metrics failed")
            return Answer(HTTPStatus.INTERNAL_SERVER_ERROR, f"{exc}\n".encode())
        return Answer(HTTPStatus.OK, body, self.content_type)


def dual_stack_socket(port: int) -> socket.socket:
    """A listening TCP socket on ``[::]:port`` that takes IPv4 connections too (``IPV6_V6ONLY`` off, which
    asyncio turns on for an IPv6 wildcard address)."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with contextlib.suppress(OSError, AttributeError):  # a system without dual-stack sockets: IPv6 only
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", port))
        sock.listen(100)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
