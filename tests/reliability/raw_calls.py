"""Helpers for the load and fuzz suites (``test_load.py``, ``test_rpc_fuzz.py``) and ``bench/load.py``.

- Latency figures: many calls fired at once, each timed, summarized by nearest-rank percentiles.
- Raw gRPC: any bytes to any method path over a real Unix socket; the result is an ``Answer`` (the
  status code, its text and, when OK, the response bytes) whether the call succeeded or not.
- Clear errors: every refusal a server may give is listed as a ``Refusal`` (code + full-match pattern);
  any other error (UNKNOWN from an exception escaping a handler, a transport failure, a text nobody
  wrote on purpose) is reported as unclear.
- Logged tracebacks: log records carrying ``exc_info`` or a ``Traceback`` text, which a server only
  writes for something nobody handled.
- A DRA driver against the in-process API server, and allocated ResourceClaims for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import grpc

from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.dra.feature_gates import parse_feature_gates
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.eventually import eventually

T = TypeVar("T")

DRA_DRIVER = "gpu.nvidia.com"

UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
"""Client channel options for the fuzzer: it judges the server, so its own 4 MB receive limit must not
turn a large (valid) answer into an error."""

# --- latency figures ---------------------------------------------------------------------------------


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` 0.5 for p50, 0.99 for p99); 0 for no samples."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass(frozen=True)
class Figures:
    """One burst of concurrent calls: how many, how long the whole burst took, per-call latencies."""

    name: str
    count: int
    wall: float
    p50: float
    p99: float
    max: float

    def line(self) -> str:
        return (
            f"{self.name}: {self.count} concurrent calls in {self.wall:.2f} s, "
            f"p50 {self.p50 * 1000:.1f} ms, p99 {self.p99 * 1000:.1f} ms, max {self.max * 1000:.1f} ms"
        )


@dataclass
class Burst(Generic[T]):
    """What ``burst`` returns: every call's result (or the exception it raised) and the figures."""

    results: list[T | BaseException]
    figures: Figures

    @property
    def failures(self) -> list[BaseException]:
        return [r for r in self.results if isinstance(r, BaseException)]

    def values(self) -> list[T]:
        """The results, once ``failures`` is known to be empty."""
        return [r for r in self.results if not isinstance(r, BaseException)]


async def burst(name: str, count: int, call: Callable[[int], Awaitable[T]]) -> Burst[T]:
    """Start ``call(0) .. call(count - 1)`` at once and wait for all; each call is timed on its own
    (from its start to its end), the wall time from the first start to the last end."""
    latencies: list[float] = [0.0] * count

    async def one(i: int) -> T:
        started = time.perf_counter()
        try:
            return await call(i)
        finally:
            latencies[i] = time.perf_counter() - started

    started = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(count)), return_exceptions=True)
    wall = time.perf_counter() - started
    figures = Figures(name, count, wall, percentile(latencies, 0.5), percentile(latencies, 0.99), max(latencies))
    return Burst(list(results), figures)


# --- raw gRPC ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """How a server answered one call: OK with the response bytes (for a stream: its first message, or
    None if it ended without one), or a status code with its text."""

    code: grpc.StatusCode
    details: str
    payload: bytes | None = None

    @property
    def ok(self) -> bool:
        return self.code == grpc.StatusCode.OK

    def __str__(self) -> str:
        if self.ok:
            return f"OK ({'no message' if self.payload is None else f'{len(self.payload)} bytes'})"
        return f"{self.code.name}: {shorten(self.details, 300)!r}"


def shorten(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def unix_channel(socket: Path | str, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(f"unix://{socket}", options=list(options))


async def unary_bytes(channel: grpc.aio.Channel, path: str, request: bytes, timeout: float = 10.0) -> Answer:
    """Send ``request`` as the raw message of unary method ``path``."""
    call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
        path, request_serializer=None, response_deserializer=None
    )
    try:
        response = await call(request, timeout=timeout)
    except grpc.aio.AioRpcError as err:
        return Answer(err.code(), err.details() or "")
    assert isinstance(response, bytes)
    return Answer(grpc.StatusCode.OK, "", response)


async def first_message_bytes(channel: grpc.aio.Channel, path: str, request: bytes, timeout: float = 10.0) -> Answer:
    """Open server-streaming method ``path`` with ``request``, read its first message, then cancel."""
    call: grpc.aio.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(
        path, request_serializer=None, response_deserializer=None
    )
    stream = call(request, timeout=timeout)
    try:
        first = await stream.read()
    except grpc.aio.AioRpcError as err:
        return Answer(err.code(), err.details() or "")
    finally:
        stream.cancel()
    if first is grpc.aio.EOF:
        return Answer(grpc.StatusCode.OK, "", None)
    assert isinstance(first, bytes)
    return Answer(grpc.StatusCode.OK, "", first)


# --- what counts as a clear error ----------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    """A refusal a server gives on purpose: this code with a text matching ``pattern`` in full."""

    code: grpc.StatusCode
    pattern: str
    why: str = ""
    _compiled: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", re.compile(self.pattern, re.DOTALL))

    def matches(self, answer: Answer) -> bool:
        return answer.code == self.code and self._compiled.fullmatch(answer.details) is not None


UNDECODABLE = Refusal(
    grpc.StatusCode.INTERNAL,
    r"grpc: error unmarshalling request: .+",
    "bytes that do not parse as the request message (grpc-go's code and text)",
)


def unclear(answer: Answer, refusals: Iterable[Refusal]) -> str | None:
    """None for an OK answer or a listed refusal; otherwise why the answer is not a clear error."""
    if answer.ok:
        return None
    if any(r.matches(answer) for r in refusals):
        return None
    if answer.code == grpc.StatusCode.UNKNOWN and answer.details.startswith("Unexpected <class"):
        return f"an exception escaped the handler: {answer}"
    return f"not a refusal the server gives on purpose: {answer}"


# --- logged tracebacks ---------------------------------------------------------------------------------


def tracebacks(records: Iterable[logging.LogRecord]) -> list[str]:
    """Records a server wrote for something nobody handled: with exception info, or a traceback text."""
    found = []
    for record in records:
        message = record.getMessage()
        if record.exc_info or record.exc_text or "Traceback (most recent call last)" in message:
            found.append(f"{record.name} {record.levelname}: {shorten(message, 300)}")
    return found


# --- the DRA driver and its claims ------------------------------------------------------------------------


async def start_dra_driver(
    server: FakeApiServer,
    root: Path,
    *,
    node: str,
    gpus: str,
    mig_layout: str | None = None,
) -> DraDriver:
    """The DRA driver as ``fakegpu dra --feature-gates NVMLDeviceHealthCheck=true`` runs it (every service it
    can serve, the health stream too), serving under ``root`` and publishing to ``server``; returns once its
    slices are published. Stop it (``await driver.stop()``) before the server."""
    inputs = InventoryInputs(node_name=node, gpus=(gpus,), mig_layout=mig_layout)
    live = LiveInventory(load_inventory(inputs))
    gates = parse_feature_gates("NVMLDeviceHealthCheck=true")
    settings = DraSettings(driver=DRA_DRIVER, cdi_root=root / "cdi", mig_mode="static", feature_gates=gates)
    driver = DraDriver(
        live,
        KubeletPaths(root / "kubelet"),
        settings,
        server.client,
    )
    await driver.start()
    try:
        await driver.wait_published()
    except BaseException:
        await driver.stop()
        raise
    return driver


def published_device_names(server: FakeApiServer, node: str) -> list[str]:
    """Every device name the node's ResourceSlices of ``gpu.nvidia.com`` publish, in slice order."""
    names: list[str] = []
    for s in server.objects("resourceslices"):
        spec = s["spec"]
        if spec["driver"] == DRA_DRIVER and spec.get("nodeName") == node:
            names.extend(d["name"] for d in spec.get("devices", []))
    return names


# --- leaks --------------------------------------------------------------------------------------------


def _tcp_inodes() -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            next(lines, None)
            inodes.update(line.split()[9] for line in lines if len(line.split()) > 9)
    return inodes


def open_fds() -> tuple[int, int]:
    """File descriptors this process holds (Linux): (all but TCP sockets, TCP sockets)."""
    tcp = _tcp_inodes()
    others = tcp_fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, already closed
            continue
        if target.startswith("socket:[") and target[8:-1] in tcp:
            tcp_fds += 1
        else:
            others += 1
    return others, tcp_fds


@dataclass(frozen=True)
class Footprint:
    """What a server leaks if it keeps something per call: descriptors (Unix sockets of gRPC connections,
    files), TCP connections (to the API server, pooled by its HTTP client) and asyncio tasks."""

    fds: int
    tcp: int
    tasks: int

    @classmethod
    def now(cls) -> Footprint:
        fds, tcp = open_fds()
        return cls(fds, tcp, len(asyncio.all_tasks()))


async def settled_footprint(baseline: Footprint, slack: int = 4, timeout: float = 5.0) -> Footprint:
    """Wait until descriptors and tasks are back within ``slack`` of ``baseline`` (closing takes a few
    loop turns); returns the last footprint seen, which the caller compares."""

    def settled() -> Footprint | None:
        current = Footprint.now()
        return current if current.fds <= baseline.fds + slack and current.tasks <= baseline.tasks + slack else None

    try:
        found = await eventually(settled, "descriptors and tasks back near the baseline", timeout, interval=0.05)
    except AssertionError:  # the caller compares and fails with the figures
        found = None
    return found or Footprint.now()


HTTP_KEEPALIVE = 20
"""httpx keeps up to 20 idle connections to the API server (lightkube's client): a pool, not a leak."""


async def no_leaks(baseline: Footprint, slack: int = 4) -> None:
    """Fail unless descriptors and asyncio tasks come back within ``slack`` of ``baseline`` and the API
    server connections within the HTTP client's pool."""
    after = await settled_footprint(baseline, slack)
    print(f"footprint before {baseline}, after {after}")
    assert after.fds <= baseline.fds + slack, f"file descriptors leaked: {baseline.fds} before, {after.fds} after"
    assert after.tcp <= baseline.tcp + HTTP_KEEPALIVE, f"connections leaked: {baseline.tcp} before, {after.tcp} after"
    assert after.tasks <= baseline.tasks + slack, f"asyncio tasks leaked: {baseline.tasks} before, {after.tasks} after"
