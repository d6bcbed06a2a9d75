"""Which slice layout and which resource.k8s.io version the cluster wants.

Virtual nodes have no kubelet whose version could stand in for the cluster's (the DRA daemon's trick), so
the server's own ``/version`` is read. lightkube has no call for it; the request goes through lightkube's
connection adapter with the client's own configuration (server, credentials, TLS), so it reaches the same
API server the same way.
"""

from __future__ import annotations

import re

import httpx2
from lightkube.config.client_adapter import AsyncClient as adapter_client
from lightkube.config.client_adapter import ConnectionParams

from fakegpu.dra.resource_slices import SUPPORTED_API_VERSIONS
from fakegpu.dra.slice_publisher import API_PREFERENCE
from fakegpu.virtual_nodes.api import Api, from_kubeconfig, kubeconfig_problem

_MINOR = re.compile(r"^(\d+)")
NEWEST_LAYOUT = 37
"""Newer servers get the newest layout this version of fakegpu knows."""


class DiscoveryError(Exception):
    """The server's version or API groups could not be read; the text says which and why."""


async def server_minor(api: Api) -> int:
    """The API server's minor version from ``/version`` (``"36"``, or ``"36+"`` on some distributions)."""
    try:
        http = adapter_client(
            api.client.config, ConnectionParams(trust_env=api.trust_env, timeout=httpx2.Timeout(10.0))
        )
    except Exception as exc:
        if from_kubeconfig(exc):
            raise kubeconfig_problem(exc) from None
        raise
    api.calls["get"] += 1
    try:
        response = await http.get("/version")
        response.raise_for_status()
        document = response.json()
    except Exception as exc:
        if from_kubeconfig(exc):  # an exec plugin runs on the first request
            raise kubeconfig_problem(exc) from None
        if isinstance(exc, (httpx2.HTTPError, ValueError)):
            raise DiscoveryError(f"reading the API server's /version failed: {exc}") from None
        raise
    finally:
        await http.aclose()
    major, minor = str(document.get("major", "")), str(document.get("minor", ""))
    match = _MINOR.match(minor)
    if major != "1" or match is None:
        raise DiscoveryError(f"the API server reports version {major!r}.{minor!r}; expected 1.<minor>")
    return int(match.group(1))


async def served_api_version(api: Api, preferred: str | None) -> str | None:
    """``preferred`` when given; else the first of v1, v1beta2, v1beta1 whose ResourceSlices can be listed."""
    if preferred is not None:
        return preferred
    for version in API_PREFERENCE:
        if await api.slices_served(version):
            return version
    return None


def layout_minor(minor: int, api_version: str | None) -> int:
    """The server's minor, clamped into what the API version is served by and what fakegpu knows."""
    if api_version is None:
        return min(minor, NEWEST_LAYOUT)
    first, last = SUPPORTED_API_VERSIONS[api_version]
    return max(first, min(minor, last, NEWEST_LAYOUT))
