"""A grpc.aio server bound to one Unix socket file, owner-only, that notices when the file vanishes.

Both the device plugin servers and the plugins_registry registration servers are this: a stale socket
is removed first (a socket a live process still serves is refused with ``SocketInUse``, never taken over),
the new one is made 0600, and deletion (a restarting kubelet cleans the directory) is detected by
comparing the file's identity.

A request whose bytes do not parse as the method's message is answered as a Go gRPC server answers it
(``INTERNAL``, ``grpc: error unmarshalling request: ...``) instead of grpc-python's default, an
``UNKNOWN`` status naming a Python exception class plus a logged traceback for every such request.
"""

from __future__ import annotations

import inspect
import itertools
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

from fakegpu.runtime.directories import ensure_dir
from fakegpu.runtime.unix_socket import MAX_SOCKET_PATH, check_socket_path, identity, remove_stale

UNMARSHAL_ERROR = "grpc: error unmarshalling request: "
"""grpc-go's text for a request that does not parse (sent with code INTERNAL), which the kubelet's
plugins built on grpc-go answer with."""


_private_names = itertools.count()
PRIVATE_SOCKET_PREFIX = ".fg"
"""What the private name a server binds before renaming it into place starts with (``.fg<pid>.<n>``, hex):
left behind only by a process killed between the two, and ``fakegpu cleanup`` looks for it."""
"""Numbers the private names servers bind before they are renamed into place."""


class _Undecodable:
    """Stands in for a request whose bytes did not parse; the wrapped handler refuses it."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


def _tolerant(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as exc:  # protobuf's DecodeError, or whatever a deserializer raises
            return _Undecodable(f"{type(exc).__name__}: {exc}" if not str(exc) else str(exc))

    return parse


async def _refuse(request: _Undecodable, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    await context.abort(grpc.StatusCode.INTERNAL, UNMARSHAL_ERROR + request.error)


def _guard_unary(behavior: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if isinstance(request, _Undecodable):
            await _refuse(request, context)
        result = behavior(request, context)
        return await result if inspect.isawaitable(result) else result

    return unary


def _guard_stream(behavior: Callable[..., Any]) -> Callable[..., AsyncIterator[Any]]:
    async def stream(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        if isinstance(request, _Undecodable):
            await _refuse(request, context)
        messages = behavior(request, context)
        if inspect.isawaitable(messages):  # a coroutine handler that writes with context.write()
            await messages
            return
        try:
            if hasattr(messages, "__aiter__"):
                async for message in messages:
                    yield message
            elif messages is not None:
                for message in messages:
                    yield message
        finally:
            aclose = getattr(messages, "aclose", None)
            if aclose is not None:
                await aclose()

    return stream


class DecodeErrors(grpc.aio.ServerInterceptor):
    """Answers undecodable requests of unary-request methods with grpc-go's status (see the module doc)."""

    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler[Any, Any], grpc.RpcMethodHandler[Any, Any]]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        parse = _tolerant(handler.request_deserializer)
        wrapped: grpc.RpcMethodHandler[Any, Any]
        if handler.unary_unary is not None:
            wrapped = grpc.unary_unary_rpc_method_handler(
                _guard_unary(handler.unary_unary), parse, handler.response_serializer
            )
        elif handler.unary_stream is not None:
            wrapped = grpc.unary_stream_rpc_method_handler(
                _guard_stream(handler.unary_stream), parse, handler.response_serializer
            )
        else:
            return handler
        self._wrapped[method] = (handler, wrapped)
        return wrapped


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
        ensure_dir(self.socket_path.parent)
        remove_stale(self.socket_path, keep_live=True)
        # gRPC binds a private name, renamed into place once it serves: gRPC unlinks the path it bound when
        # the server stops, whatever file is there by then, and a path another plugin took over in between
        # must keep that plugin's socket (deleting it made two plugins on one directory fight).
        private = self.socket_path.with_name(f"{PRIVATE_SOCKET_PREFIX}{os.getpid():x}.{next(_private_names):x}")
        # gRPC refuses a path of MAX_SOCKET_PATH bytes (its own limit is one shorter): where even the short
        # private name does not fit, bind the public path itself, as before the rename existed.
        bound = private if len(os.fsencode(private)) < MAX_SOCKET_PATH else self.socket_path
        if bound is private:
            private.unlink(missing_ok=True)
        server = grpc.aio.server(interceptors=[DecodeErrors()])
        self._add_services(server)
        # gRPC binds (creates the file) here: under a restrictive umask the socket is owner-only from its
        # first moment, not only from the chmod below (under umask 0 anyone could connect in between).
        old_umask = os.umask(0o177)
        try:
            server.add_insecure_port(f"unix://{bound}")
        finally:
            os.umask(old_umask)
        await server.start()
        try:
            os.chmod(bound, 0o600)
            if bound is private:
                os.rename(private, self.socket_path)
        except OSError:
            # The socket vanished between bind and rename (a kubelet restart wiping the directory): stop the
            # server we just started rather than leave it running unowned; the caller serves again.
            await server.stop(None)
            if bound is private:
                private.unlink(missing_ok=True)
            raise
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
