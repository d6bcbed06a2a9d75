"""``--metrics-address`` parsing and the asyncio ``/metrics`` endpoint, and the probes' ``/healthz`` and ``/readyz``
(``--health-address``), over real TCP on loopback."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket
import urllib.request

import pytest
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter
from prometheus_client.registry import Collector

from fakegpu.sharing.errors import SpecError
from fakegpu.telemetry.health_endpoint import Readiness, health_address, health_endpoint
from fakegpu.telemetry.http_endpoint import MAX_CONNECTIONS, ListenAddress, MetricsServer, parse_listen_address
from tests.eventually import eventually

EXPECTED = "expected HOST:PORT, [IPV6]:PORT, :PORT or PORT, with PORT from 0 to 65535"


@pytest.mark.parametrize(
    ("value", "host", "port", "shown"),
    [
        ("9400", "127.0.0.1", 9400, "127.0.0.1:9400"),
        (":9400", "127.0.0.1", 9400, "127.0.0.1:9400"),
        ("0", "127.0.0.1", 0, "127.0.0.1:0"),
        ("0.0.0.0:9400", "0.0.0.0", 9400, "0.0.0.0:9400"),
        ("localhost:65535", "localhost", 65535, "localhost:65535"),
        ("metrics.node-1.example:80", "metrics.node-1.example", 80, "metrics.node-1.example:80"),
        ("[::1]:9400", "::1", 9400, "[::1]:9400"),
        ("[::]:0", "::", 0, "[::]:0"),
    ],
)
def test_good_addresses(value, host, port, shown):
    address = parse_listen_address(value)
    assert address == ListenAddress(host, port)
    assert str(address) == shown


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "no port"),
        ("localhost", "no port"),
        ("localhost:", "no port"),
        (":", "no port"),
        ("70000", "port '70000' is not a number from 0 to 65535"),
        ("123456", "port '123456' is not a number from 0 to 65535"),
        ("host:http", "port 'http' is not a number from 0 to 65535"),
        (":-1", "port '-1' is not a number from 0 to 65535"),
        ("::1:9400", "an IPv6 address needs brackets, as in [::1]:9400"),
        ("[::1]", "no port after the IPv6 address"),
        ("[::1:9400", "no closing ']' after the IPv6 address"),
        ("[nope]:9400", "'nope' is not an IPv6 address"),
        ("a b:9400", "'a b' is not a host name or IP address"),
        ("http://host:9400", "an address, not a URL"),
        ("host/x:9400", "'host/x' is not a host name or IP address"),
        ("256.1.1.1:9400", "'256.1.1.1' is not an IPv4 address"),
    ],
)
def test_bad_addresses_name_the_flag_the_value_and_what_was_expected(value, reason):
    with pytest.raises(SpecError) as caught:
        parse_listen_address(value)
    assert str(caught.value) == f"--metrics-address: {value!r}: {reason}; {EXPECTED}"
    assert "\n" not in str(caught.value)


def test_the_flag_name_is_the_callers():
    with pytest.raises(SpecError, match=r"^--dcgm-address: 'x': no port; expected HOST:PORT"):
        parse_listen_address("x", "--dcgm-address")


# --- the endpoint ------------------------------------------------------------------------------------


def registry_with_counter() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("demo_events_total", "Events.", ["kind"], registry=registry).labels(kind="a").inc(3)
    return registry


async def exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read until the server closes; (status, headers, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 5.0)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split(" ")[1]), headers, body


@pytest.fixture
async def server():
    metrics = MetricsServer(ListenAddress("127.0.0.1", 0), registry_with_counter(), read_timeout=30.0)
    await metrics.start()
    yield metrics
    await metrics.stop()


async def test_get_metrics_is_the_text_exposition(server):
    assert server.port != 0
    assert server.url == f"http://127.0.0.1:{server.port}/metrics"
    status, headers, body = await exchange(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200
    assert headers["content-type"] == CONTENT_TYPE_LATEST
    assert headers["content-length"] == str(len(body))
    assert headers["connection"] == "close"
    assert b'demo_events_total{kind="a"} 3.0\n' in body
    assert b"# TYPE demo_events_total counter\n" in body


async def test_a_standard_client_reads_it(server):
    def fetch() -> tuple[int, str, str]:
        with urllib.request.urlopen(server.url + "?debug=1", timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()

    status, content_type, text = await asyncio.to_thread(fetch)
    assert (status, content_type) == (200, CONTENT_TYPE_LATEST)
    assert 'demo_events_total{kind="a"} 3.0' in text


async def test_head_has_headers_only(server):
    status, headers, body = await exchange(server.port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
    assert (status, body) == (200, b"")
    assert int(headers["content-length"]) > 0


async def test_other_paths_are_404_and_other_methods_405(server):
    status, _, body = await exchange(server.port, b"GET / HTTP/1.1\r\n\r\n")
    assert (status, body) == (404, b"not found; metrics are at /metrics\n")
    assert (await exchange(server.port, b"GET /metricsx HTTP/1.1\r\n\r\n"))[0] == 404
    status, headers, body = await exchange(server.port, b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi")
    assert (status, headers["allow"], body) == (405, "GET, HEAD", b"method POST not allowed; use GET\n")


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\xff\xfe garbage\r\n\r\n",
        b"GET /metrics\r\n\r\n",  # HTTP/0.9
        b"get /metrics HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/2.0\r\n\r\n",
        b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\n" + b"X-Long: " + b"b" * 20000 + b"\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n",
    ],
)
async def test_bad_requests_get_400_and_the_server_keeps_serving(server, garbage):
    status, _, _ = await exchange(server.port, garbage)
    assert status == 400
    assert (await exchange(server.port, b"GET /metrics HTTP/1.1\r\n\r\n"))[0] == 200


async def test_clients_that_hang_up_or_stall_do_not_stop_it(server, timing):
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.close()  # connected and left without a word
    _, half = await asyncio.open_connection("127.0.0.1", server.port)
    half.write(b"GET /metrics HTTP/1.1\r\nHost: ")  # and one that stalls mid-request
    await half.drain()
    assert (await exchange(server.port, b"GET /metrics HTTP/1.1\r\n\r\n"))[0] == 200
    with timing.at_most(2.5, "stopping with a stalled client"):
        await asyncio.wait_for(server.stop(), 10.0)  # the stalled client does not hold shutdown for its 30 s
    half.close()


async def test_a_stalled_request_times_out():
    metrics = MetricsServer(ListenAddress("127.0.0.1", 0), registry_with_counter(), read_timeout=0.2)
    await metrics.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", metrics.port)
        writer.write(b"GET /metrics HTTP/1.1\r\n")
        assert await asyncio.wait_for(reader.read(), 3.0) == b""  # closed without an answer
        writer.close()
    finally:
        await metrics.stop()


class Broken(Collector):
    def collect(self):
        raise RuntimeError("collector exploded")
        yield


async def test_a_failing_collector_gives_500_not_a_dead_server():
    registry = registry_with_counter()
    broken = Broken()
    registry.register(broken)
    metrics = MetricsServer(ListenAddress("127.0.0.1", 0), registry)
    await metrics.start()
    try:
        status, _, body = await exchange(metrics.port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert (status, body) == (500, b"collector exploded\n")
        registry.unregister(broken)
        assert (await exchange(metrics.port, b"GET /metrics HTTP/1.1\r\n\r\n"))[0] == 200
    finally:
        await metrics.stop()


async def test_an_exporter_may_render_its_own_text():
    async def render() -> bytes:
        await asyncio.sleep(0)  # time passing: one loop turn, as a render that awaits something takes
        return b'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 33\n'

    metrics = MetricsServer(ListenAddress("127.0.0.1", 0), render=render, content_type="text/plain; version=0.0.4")
    await metrics.start()
    try:
        status, headers, body = await exchange(metrics.port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert (status, headers["content-type"]) == (200, "text/plain; version=0.0.4")
        assert body == b'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 33\n'
    finally:
        await metrics.stop()
    with pytest.raises(TypeError):
        MetricsServer(ListenAddress("127.0.0.1", 0))


async def test_a_port_in_use_is_one_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        metrics = MetricsServer(ListenAddress("127.0.0.1", port), CollectorRegistry())
        with pytest.raises(SpecError) as caught:
            await metrics.start()
    assert str(caught.value) == f"--metrics-address: cannot listen on 127.0.0.1:{port}: Address already in use"


async def test_stopped_means_closed(server):
    port = server.port
    await server.stop()
    await server.stop()  # twice is harmless
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)


# --- limits: connections, deadlines, shutdown, dual stack ----------------------------------------------


async def test_connections_beyond_the_cap_are_closed_at_once(timing):
    metrics = MetricsServer(ListenAddress("127.0.0.1", 0), registry_with_counter(), max_connections=4)
    await metrics.start()
    idle = []
    try:
        for _ in range(4):  # connected, saying nothing: each holds a slot until its read timeout
            idle.append(await asyncio.open_connection("127.0.0.1", metrics.port))
        await eventually(lambda: metrics.open_connections == 4, "4 open connection(s)", 3.0)
        reader, writer = await asyncio.open_connection("127.0.0.1", metrics.port)
        writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
        with timing.at_most(1.0, "closing a connection beyond the cap"), contextlib.suppress(ConnectionError):
            assert await asyncio.wait_for(reader.read(), 2.0) == b""  # closed unanswered
        assert metrics.refused == 1
        writer.close()
        idle.pop()[1].close()  # a slot frees up: served again
        await eventually(lambda: metrics.open_connections == 3, "3 open connection(s)", 3.0)
        assert (await exchange(metrics.port, b"GET /metrics HTTP/1.1\r\n\r\n"))[0] == 200
    finally:
        for _, w in idle:
            w.close()
        await metrics.stop()


def test_the_default_cap():
    metrics = MetricsServer(ListenAddress("127.0.0.1", 0), registry_with_counter())
    assert metrics.max_connections == MAX_CONNECTIONS == 64


async def test_a_client_that_does_not_read_its_answer_is_cut_off_at_the_deadline(timing):
    big = b"x" * (64 << 20)  # far more than the socket buffers hold: the write blocks until the client reads
    metrics = MetricsServer(ListenAddress("127.0.0.1", 0), render=lambda: big, timeout=0.5)
    await metrics.start()
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", metrics.port, limit=1024)
        writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
        await eventually(lambda: metrics.open_connections == 1, "1 open connection(s)", 3.0)
        with timing.at_most(2.0, "cutting off a client that does not read"):
            await eventually(lambda: metrics.open_connections == 0, "0 open connection(s)", 5.0)
        writer.close()
        assert (await exchange(metrics.port, b"HEAD /metrics HTTP/1.1\r\n\r\n"))[0] == 200
    finally:
        await metrics.stop()


async def test_a_slow_render_is_bounded_by_the_same_deadline(timing):
    async def render() -> bytes:
        await asyncio.sleep(30)  # time passing: a render that stalls past the deadline
        return b""

    metrics = MetricsServer(ListenAddress("127.0.0.1", 0), render=render, timeout=0.3)
    await metrics.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", metrics.port)
        writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
        with timing.at_most(1.5, "cutting off a slow render"), contextlib.suppress(ConnectionError):
            assert await asyncio.wait_for(reader.read(), 3.0) == b""
        writer.close()
    finally:
        await metrics.stop()


async def test_stopping_with_open_connections_logs_no_error(caplog):
    """asyncio (3.11+) logs a connection task that ends cancelled at ERROR from its done callback."""
    caplog.set_level(logging.DEBUG)
    metrics = MetricsServer(ListenAddress("127.0.0.1", 0), registry_with_counter(), read_timeout=30.0)
    await metrics.start()
    _, stalled = await asyncio.open_connection("127.0.0.1", metrics.port)
    stalled.write(b"GET /metrics HTTP/1.1\r\n")
    await eventually(lambda: metrics.open_connections == 1, "1 open connection(s)", 3.0)
    await metrics.stop()
    # The barrier: the connection tasks ended within stop(), which scheduled their done callbacks then; a
    # callback scheduled now runs after them.
    loop = asyncio.get_running_loop()
    ran: asyncio.Future[None] = loop.create_future()
    loop.call_soon(ran.set_result, None)
    await ran
    stalled.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


def ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback")
async def test_the_ipv6_wildcard_listens_on_ipv4_too():
    metrics = MetricsServer(ListenAddress("::", 0), registry_with_counter())
    await metrics.start()
    try:
        assert metrics.url == f"http://[::]:{metrics.port}/metrics"
        for host in ("::1", "127.0.0.1"):
            reader, writer = await asyncio.open_connection(host, metrics.port)
            writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
            data = await asyncio.wait_for(reader.read(), 5.0)
            writer.close()
            assert data.startswith(b"HTTP/1.1 200 OK"), host
    finally:
        await metrics.stop()


# --- /healthz and /readyz (fakegpu.telemetry.health_endpoint) ------------------------------------------
# Upstream has no HTTP probe to follow: NVIDIA/k8s-device-plugin has no probe, NVIDIA/k8s-dra-driver-gpu
# cmd/gpu-kubelet-plugin/health.go answers a gRPC health Check on its own --healthcheck-port. fakegpu keeps
# the same separation (its own listener) and answers the kubelet's httpGet probes.


@pytest.fixture
async def probes():
    readiness = Readiness("reading node n1's nvidia.com/device-plugin.config label from the API server")
    endpoint = health_endpoint(ListenAddress("127.0.0.1", 0), readiness)
    await endpoint.start()
    yield endpoint, readiness
    await endpoint.stop()


async def test_healthz_answers_while_the_loop_runs_and_readyz_follows_the_daemon(probes):
    endpoint, readiness = probes
    assert endpoint.urls == [f"http://127.0.0.1:{endpoint.port}/healthz", f"http://127.0.0.1:{endpoint.port}/readyz"]
    assert await exchange(endpoint.port, b"GET /healthz HTTP/1.1\r\n\r\n") == (
        200,
        {"content-type": "text/plain; charset=utf-8", "content-length": "3", "connection": "close"},
        b"ok\n",
    )
    status, _, body = await exchange(endpoint.port, b"GET /readyz HTTP/1.1\r\n\r\n")
    assert (status, body) == (
        503,
        b"not ready: reading node n1's nvidia.com/device-plugin.config label from the API server\n",
    )

    missing: list[str] = ["not registered with the kubelet: nvidia.com/gpu"]
    readiness.follow(lambda: "; ".join(missing) or None)
    status, _, body = await exchange(endpoint.port, b"GET /readyz HTTP/1.1\r\n\r\n")
    assert (status, body) == (503, b"not ready: not registered with the kubelet: nvidia.com/gpu\n")
    missing.clear()
    assert (await exchange(endpoint.port, b"GET /readyz?verbose HTTP/1.1\r\n\r\n"))[::2] == (200, b"ok\n")
    # Liveness never depended on readiness.
    assert (await exchange(endpoint.port, b"GET /healthz HTTP/1.1\r\n\r\n"))[0] == 200


async def test_the_reason_is_one_line_and_a_failing_check_is_a_500_not_a_dead_endpoint(probes):
    endpoint, readiness = probes
    readiness.follow(lambda: "publishing failed:\n  connection refused\n")
    assert (await exchange(endpoint.port, b"GET /readyz HTTP/1.1\r\n\r\n"))[::2] == (
        503,
        b"not ready: publishing failed: connection refused\n",
    )

    def broken() -> str | None:
        raise RuntimeError("state unreadable")

    readiness.follow(broken)
    assert (await exchange(endpoint.port, b"GET /readyz HTTP/1.1\r\n\r\n"))[::2] == (500, b"state unreadable\n")
    assert (await exchange(endpoint.port, b"GET /healthz HTTP/1.1\r\n\r\n"))[0] == 200


async def test_probe_paths_only(probes):
    endpoint, _ = probes
    assert (await exchange(endpoint.port, b"GET /metrics HTTP/1.1\r\n\r\n"))[::2] == (
        404,
        b"not found; health checks are at /healthz and /readyz\n",
    )
    assert (await exchange(endpoint.port, b"POST /readyz HTTP/1.1\r\n\r\n"))[0] == 405
    assert (await exchange(endpoint.port, b"HEAD /healthz HTTP/1.1\r\n\r\n"))[::2] == (200, b"")


def test_the_health_flag_is_named_in_its_errors():
    with pytest.raises(SpecError) as bad:
        health_address(argparse.Namespace(health_address="0.0.0.0"))
    assert str(bad.value).startswith("--health-address: '0.0.0.0': no port")
    assert health_address(argparse.Namespace(health_address="0.0.0.0:8081")) == ListenAddress("0.0.0.0", 8081)
    assert health_address(argparse.Namespace(health_address=None)) is None
