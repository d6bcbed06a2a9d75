"""What the API server serves: which Kubernetes minor it is, and which resource.k8s.io version has slices.

The one home of the version facts both the DRA daemon and the virtual-node controller publish by: the
table of which Kubernetes minors serve which resource.k8s.io version, the newest minor fakegpu knows
(``NEWEST_LAYOUT``; newer servers get its layout), the order the versions are tried in, and the lightkube
kind of each. How slices look at each minor is ``fakegpu.dra.resource_slices``' business.

The server's minor comes from one of two places: the node's kubelet version (the DRA daemon, which reads
its Node anyway) or the server's own ``/version``. lightkube has no call for ``/version``; the request
goes through lightkube's connection adapter with the client's own configuration (server, credentials,
TLS), so it reaches the same API server the same way.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
from lightkube import AsyncClient
from lightkube.config.client_adapter import AsyncClient as adapter_client
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources import resource_v1, resource_v1beta1, resource_v1beta2

SUPPORTED_API_VERSIONS: dict[str, tuple[int, int]] = {
    # group version -> (first Kubernetes minor that serves it, last one); newest first, the order tried in
    "resource.k8s.io/v1": (34, 999),
    "resource.k8s.io/v1beta2": (33, 38),
    "resource.k8s.io/v1beta1": (32, 37),
}
SLICE_KINDS: dict[str, Any] = {
    "resource.k8s.io/v1": resource_v1.ResourceSlice,
    "resource.k8s.io/v1beta2": resource_v1beta2.ResourceSlice,
    "resource.k8s.io/v1beta1": resource_v1beta1.ResourceSlice,
}
"""The lightkube class of ResourceSlices in each version of SUPPORTED_API_VERSIONS."""
API_PREFERENCE = list(SUPPORTED_API_VERSIONS)
"""The order versions are tried in when the server is asked: the newest it serves wins."""
OLDEST_MINOR = min(first for first, _ in SUPPORTED_API_VERSIONS.values())
"""The oldest Kubernetes minor with ResourceSlices in a version fakegpu publishes."""
NEWEST_LAYOUT = 37
"""The newest Kubernetes minor fakegpu knows; newer servers get its slice layout."""

_KUBELET_VERSION = re.compile(r"^v?(\d+)\.(\d+)")
_MINOR = re.compile(r"^(\d+)")
VERSION_TIMEOUT = 10.0
"""Seconds the ``/version`` request may take."""


class DiscoveryError(Exception):
    """The server's version could not be read or understood; the text says which and why."""


def minor_from_kubelet_version(version: str) -> int | None:
    """``v1.36.2`` -> 36; None for anything that is not Kubernetes 1.x."""
    m = _KUBELET_VERSION.match(version.strip())
    return int(m.group(2)) if m and m.group(1) == "1" else None


def minor_from_version_document(document: Any) -> int:
    """The minor of a ``/version`` answer (``"36"``, or ``"36+"`` on some distributions)."""
    fields = document if isinstance(document, dict) else {}
    major, minor = str(fields.get("major", "")), str(fields.get("minor", ""))
    match = _MINOR.match(minor)
    if major != "1" or match is None:
        raise DiscoveryError(f"the API server reports version {major!r}.{minor!r}; expected 1.<minor>")
    return int(match.group(1))


async def read_server_minor(config: SingleConfig, *, trust_env: bool) -> int:
    """The API server's minor from its ``/version``. Transport and decoding errors are raised as they are
    (so a caller can tell the kubeconfig's from the server's); a version that is not 1.x is DiscoveryError."""
    http = adapter_client(config, ConnectionParams(trust_env=trust_env, timeout=httpx2.Timeout(VERSION_TIMEOUT)))
    try:
        response = await http.get("/version")
        response.raise_for_status()
        document = response.json()
    finally:
        await http.aclose()
    return minor_from_version_document(document)


async def serves_slices(client: AsyncClient, api_version: str) -> bool:
    """Whether ``api_version`` serves ResourceSlices: a one-item list, where 404 means no."""
    try:
        async for _ in client.list(SLICE_KINDS[api_version], chunk_size=1):
            break
    except ApiError as exc:
        if exc.status.code == 404:
            return False
        raise
    return True


async def served_api_version(serves: Callable[[str], Awaitable[bool]]) -> str | None:
    """The first version of API_PREFERENCE that ``serves`` (a probe such as ``serves_slices``); None if none."""
    for version in API_PREFERENCE:
        if await serves(version):
            return version
    return None


def served_api_versions(minor: int) -> list[str]:
    """The resource.k8s.io versions Kubernetes 1.<minor> serves, newest first."""
    return [v for v, (first, last) in SUPPORTED_API_VERSIONS.items() if first <= minor <= last]


def layout_minor(minor: int, api_version: str | None) -> int:
    """The slice layout to publish for a server at 1.``minor``: clamped into the minors that serve
    ``api_version`` and to NEWEST_LAYOUT."""
    if api_version is None:
        return min(minor, NEWEST_LAYOUT)
    first, last = SUPPORTED_API_VERSIONS[api_version]
    return max(first, min(minor, last, NEWEST_LAYOUT))
