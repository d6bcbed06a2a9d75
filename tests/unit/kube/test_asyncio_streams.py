"""The asyncio network backend under lightkube's client: the same requests, errors and reuse as anyio's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx2
import pytest
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.resources.core_v1 import Node

from fakegpu.kube.asyncio_streams import PAUSE_READING_AT, AsyncioBackend, use_asyncio_streams
from fakegpu.kube.client import load_config
from fakegpu.kube.lean_requests import write_serialized
from tests.apiserver import FakeApiServer
from tests.apiserver.serving_tls import make_serving_tls
from tests.eventually import eventually


def _backend(client: AsyncClient) -> object:
    return client._client._client._transport._pool._network_backend  # type: ignore[attr-defined]


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
async def test_requests_go_over_one_kept_connection_and_a_closed_one_is_replaced(tmp_path: Path, tls: bool) -> None:
    with FakeApiServer(tls=tls) as server:
        client = AsyncClient(config=load_config(str(server.kubeconfig(tmp_path / "kubeconfig"))), trust_env=False)
        assert use_asyncio_streams(client) and isinstance(_backend(client), AsyncioBackend)
        try:
            body = b'{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}}'
            stored = await write_serialized(client, Node, body)
            assert stored.metadata.name == "n1" and stored.metadata.uid
            for _ in range(3):
                node = await client.get(Node, "n1")
                assert node.metadata is not None and node.metadata.name == "n1"
            assert server.connections_accepted == 1
            assert server._httpd is not None
            server._httpd.close_connections()  # the server drops the idle connection
            node = await client.get(Node, "n1")  # a new connection, not a failure
            assert node.metadata is not None and node.metadata.name == "n1"
            assert server.connections_accepted == 2
        finally:
            await client.close()
        assert server.errors == []


async def test_a_server_not_trusted_by_the_kubeconfig_fails_to_connect() -> None:
    with FakeApiServer(tls=True) as server:
        config = KubeConfig.from_one(cluster=Cluster(server=server.url), user=User())  # the system CAs only
        client = AsyncClient(config=config, trust_env=False)
        use_asyncio_streams(client)
        try:
            with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.get(Node, "n1")
        finally:
            await client.close()


async def test_a_server_that_never_answers_is_a_read_timeout() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)  # the request, never answered

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    config = KubeConfig.from_one(cluster=Cluster(server=f"http://127.0.0.1:{port}"), user=User())
    client = AsyncClient(config=config, trust_env=False, timeout=httpx2.Timeout(0.3))
    use_asyncio_streams(client)
    try:
        with pytest.raises(httpx2.ReadTimeout):
            await client.get(Node, "n1")
    finally:
        await client.close()
        listener.close()


async def test_nothing_listening_is_a_connect_error() -> None:
    with FakeApiServer() as server:
        url = server.url
    client = AsyncClient(config=KubeConfig.from_one(cluster=Cluster(server=url), user=User()), trust_env=False)
    use_asyncio_streams(client)
    try:
        with pytest.raises(httpx2.ConnectError):
            await client.get(Node, "n1")
    finally:
        await client.close()


def test_a_stand_in_client_is_left_alone() -> None:
    assert use_asyncio_streams(object()) is False  # type: ignore[arg-type]


async def test_a_large_answer_read_slowly_over_tls_is_read_to_its_end() -> None:
    """Flow control under TLS: more than ``PAUSE_READING_AT`` bytes arrive before the reader takes them, so the
    socket is paused, and reading must resume it (through the TLS transport the stream reads from; pausing
    the raw one and resuming the TLS one left the connection stalled for good)."""
    size = PAUSE_READING_AT + 2 * 2**20
    tls = make_serving_tls()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"x" * size)
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=tls.context)
    port = listener.sockets[0].getsockname()[1]
    try:
        plain = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
        stream = await plain.start_tls(tls.client_context(), server_hostname="127.0.0.1", timeout=5)
        await stream.write(b"GET\n")
        protocol = stream._protocol  # type: ignore[attr-defined]
        await eventually(lambda: protocol.paused_reading, "the unread answer to pause the socket", 10.0)
        received = 0
        while chunk := await stream.read(65536, timeout=5):
            received += len(chunk)
        assert received == size
        await stream.aclose()
    finally:
        listener.close()
