"""Metric plumbing both daemons share: a daemon's own registry with build info, and RPC accounting.

Each daemon gets its own ``CollectorRegistry`` (never prometheus_client's global one), so tests, the
demo and several daemons in one process never collide over metric names.

Every RPC a servicer method decorated with ``observed_unary`` / ``observed_stream`` handles is counted
once when it ends, by method and final gRPC status code (what the client saw: ``OK``, the code of an
``abort`` such as ``INVALID_ARGUMENT`` or an injected fault's code, ``UNKNOWN`` for an exception,
``CANCELLED`` when the client went away, ``DEADLINE_EXCEEDED`` when the call's deadline ran out while it
was handled), its duration goes into a histogram, and one line is logged at
debug level. For a stream (ListAndWatch) "ends" and "duration" mean the end and the lifetime of the
stream, as in go-grpc-prometheus; open streams have their own gauge.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, TypeVar

import grpc
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Device plugin RPCs take well under a millisecond; DRA prepares read the API server (the kubelet gives
up after 45 s) and injected delays can be long, hence the range."""


def fakegpu_version() -> str:
    try:
        return importlib.metadata.version("fakegpu")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def daemon_registry() -> CollectorRegistry:
    """A fresh registry for one daemon: ``fakegpu_build_info`` plus the usual process and Python metrics.

    ``*_created`` series are turned off (process-wide): they double every counter and histogram, and
    nothing here uses them.
    """
    disable_created_metrics()  # type: ignore[no-untyped-call]
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    build = Gauge(
        "fakegpu_build_info", "Always 1; the version label says which fakegpu runs.", ["version"], registry=registry
    )
    build.labels(version=fakegpu_version()).set(1)
    return registry


@dataclass
class RpcCall:
    """One RPC in flight; the handler may add the device IDs it was asked for (they go into the log line)."""

    method: str
    scope: str
    code: str = "OK"
    devices: list[str] = field(default_factory=list)


_current: ContextVar[RpcCall | None] = ContextVar("fakegpu_rpc_call", default=None)


def current_rpc() -> RpcCall | None:
    """The unary RPC the calling code is handling, if any (each gRPC call runs in its own task)."""
    return _current.get()


class RpcMetrics:
    """``<prefix>_rpc_requests_total{[scope],method,code}`` and ``<prefix>_rpc_duration_seconds{[scope],method}``.

    ``scope_label`` names the label carrying the scope (``resource`` for the device plugin, which runs one
    server per resource); without it the scope (the DRA driver name) appears only in the log line, under
    ``scope_field``.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None,
        prefix: str,
        *,
        scope_label: str | None,
        scope_field: str,
        logger: logging.Logger,
    ) -> None:
        scope = [scope_label] if scope_label else []
        self.scope_label = scope_label
        self.scope_field = scope_field
        self.log = logger
        self.requests = Counter(
            f"{prefix}_rpc_requests_total",
            "RPCs handled, by method and the gRPC status code the client got; streams count when they end.",
            [*scope, "method", "code"],
            registry=registry,
        )
        self.duration = Histogram(
            f"{prefix}_rpc_duration_seconds",
            "Time to handle an RPC (for a stream: how long it was open).",
            [*scope, "method"],
            registry=registry,
            buckets=DURATION_BUCKETS,
        )

    def observer(self, scope: str) -> RpcObserver:
        return RpcObserver(self, scope)

    def record(self, call: RpcCall, seconds: float) -> None:
        scope = {self.scope_label: call.scope} if self.scope_label else {}
        self.requests.labels(**scope, method=call.method, code=call.code).inc()
        self.duration.labels(**scope, method=call.method).observe(seconds)
        if self.log.isEnabledFor(logging.DEBUG):
            extra: dict[str, Any] = {
                "method": call.method,
                self.scope_field: call.scope,
                "code": call.code,
                "duration_seconds": round(seconds, 6),
            }
            devices = ""
            if call.devices:
                extra["devices"] = list(call.devices)
                devices = " [" + ",".join(call.devices) + "]"
            self.log.debug(
                "%s %s: %s in %.1f ms%s", call.scope, call.method, call.code, seconds * 1000, devices, extra=extra
            )


def _status_name(context: grpc.aio.ServicerContext[Any, Any], default: str) -> str:
    code = context.code()
    return code.name if isinstance(code, grpc.StatusCode) else default


def _cancelled_code(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    """grpc cancels the handler both when the client goes away and when the call's deadline passes; the
    client sees DEADLINE_EXCEEDED in the second case, so that is what counts."""
    try:
        remaining = context.time_remaining()
    except Exception:  # a context that cannot tell (a test double, a call torn down): the client left
        return "CANCELLED"
    return "DEADLINE_EXCEEDED" if remaining is not None and remaining <= 0 else "CANCELLED"


class RpcObserver:
    """The RPC metrics bound to one scope (a resource name or a driver name), for one servicer."""

    def __init__(self, metrics: RpcMetrics, scope: str) -> None:
        self.metrics = metrics
        self.scope = scope

    def observe(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> _Observation:
        """Time one call: ``with observer.observe("Allocate", context) as call: ...``."""
        return _Observation(self.metrics, RpcCall(method, self.scope), context)


class _Observation:
    def __init__(self, metrics: RpcMetrics, call: RpcCall, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self.metrics = metrics
        self.call = call
        self.context = context
        self.started = 0.0

    def __enter__(self) -> RpcCall:
        self.started = time.perf_counter()
        return self.call

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.call.code = _status_name(self.context, "OK")  # a handler may set_code() and return
        elif isinstance(exc, grpc.aio.AbortError):
            self.call.code = _status_name(self.context, "UNKNOWN")
        elif isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
            self.call.code = _cancelled_code(self.context)
        else:  # grpc answers an exception escaping a handler with UNKNOWN
            self.call.code = "UNKNOWN"
        self.metrics.record(self.call, time.perf_counter() - self.started)


class ObservedService(Protocol):
    rpc_observer: RpcObserver


_Service = TypeVar("_Service", bound=ObservedService)
_Request = TypeVar("_Request")
_Response = TypeVar("_Response")
_Context = TypeVar("_Context", bound="grpc.aio.ServicerContext[Any, Any]")


def observed_unary(
    handler: Callable[[_Service, _Request, _Context], Awaitable[_Response]],
) -> Callable[[_Service, _Request, _Context], Coroutine[Any, Any, _Response]]:
    """Count, time and log a unary servicer method through its ``rpc_observer``; the method name is the
    Python method's (gRPC's servicer methods are named after the RPCs)."""
    method = handler.__name__

    @functools.wraps(handler)
    async def wrapper(self: _Service, request: _Request, context: _Context) -> _Response:
        with self.rpc_observer.observe(method, context) as call:
            token = _current.set(call)
            try:
                return await handler(self, request, context)
            finally:
                _current.reset(token)

    return wrapper


def observed_stream(
    handler: Callable[[_Service, _Request, _Context], AsyncIterator[_Response]],
) -> Callable[[_Service, _Request, _Context], AsyncIterator[_Response]]:
    """``observed_unary`` for a server-streaming method. The inner generator is closed as soon as the
    stream ends, so its own cleanup (open-stream counts) never waits for the GC."""
    method = handler.__name__

    @functools.wraps(handler)
    async def wrapper(self: _Service, request: _Request, context: _Context) -> AsyncIterator[_Response]:
        with self.rpc_observer.observe(method, context):
            stream = handler(self, request, context)
            try:
                async for message in stream:
                    yield message
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()

    return wrapper
