"""The fake API server over TLS: clients verify it with the CA its kubeconfig carries, as they verify a real one."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx2
import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from fakegpu.kube.client import load_config
from tests.apiserver import FakeApiServer
from tests.apiserver.standalone import ServerProcess


async def test_a_client_verifies_the_server_with_the_kubeconfig_ca_and_is_refused_without(tmp_path: Path) -> None:
    with FakeApiServer(tls=True) as server:
        server.add_node("n1")
        assert server.url.startswith("https://127.0.0.1:")
        client = AsyncClient(config=load_config(str(server.kubeconfig(tmp_path / "kubeconfig"))), trust_env=False)
        try:
            node = await client.get(Node, "n1")
            assert node.metadata is not None and node.metadata.name == "n1"
        finally:
            await client.close()
        async with httpx2.AsyncClient(base_url=server.url, trust_env=False) as stranger:  # the system CAs only
            with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await stranger.get("/api/v1/nodes/n1")
        assert server.errors == []


async def test_requests_reuse_one_tls_connection_and_alpn_settles_on_http_1_1() -> None:
    """One handshake for many requests (keep-alive); a client offering h2 too still gets HTTP/1.1, the one
    protocol this server speaks."""
    with FakeApiServer(tls=True) as server:
        server.add_node("n1")
        client = server.client()
        try:
            for _ in range(5):
                await client.get(Node, "n1")
        finally:
            await client.close()
        assert server.connections_accepted == 1
        assert server.tls is not None
        context = server.tls.client_context()
        context.set_alpn_protocols(["h2", "http/1.1"])
        with context.wrap_socket(
            socket.create_connection(("127.0.0.1", server.port)), server_hostname="127.0.0.1"
        ) as tls:
            assert tls.selected_alpn_protocol() == "http/1.1"
        assert server.connections_accepted == 2


def test_standalone_server_process_over_tls_writes_a_kubeconfig_with_the_ca() -> None:
    with ServerProcess(36, validate_schema=False, tls=True) as server:
        assert server.url.startswith("https://")
        config = load_config(str(server.kubeconfig)).get()
        assert config is not None and config.cluster.certificate_auth_data
        assert server.counts()["calls"] == {}  # read over TLS, trusting the server's CA
        assert (server.cpu_seconds() or 0) > 0  # its start-up at least (/proc)


async def test_a_watch_streams_over_tls_and_ends_when_the_client_goes() -> None:
    with FakeApiServer(tls=True) as server:
        client = server.client()
        try:
            events = client.watch(Node, resource_version=server.resource_version)
            server.add_node("n1")
            async for kind, node in events:
                assert (kind, node.metadata.name if node.metadata else None) == ("ADDED", "n1")
                break
        finally:
            await client.close()
        assert server.errors == []
