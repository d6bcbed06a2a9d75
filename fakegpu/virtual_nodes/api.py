"""The controller's only door to the API server: counted, retried, and failing with one clear line.

Objects go in and come out as plain dicts (the wire JSON), because everything the controller does with
them is comparing fields. Every request is counted by verb (``calls``), which is what the summary and the
benchmark print. Overload answers (429, after the pause the server asks for in ``Retry-After``) and
connections that could not be made are retried a few times with a growing pause, as client-go does. Server
errors (5xx) and broken connections are retried too, except for a create with ``generateName``: the server
may have carried it out before failing, and a second one would publish a second object. That failure is
marked ``uncertain`` for the caller to look before it tries again. Anything else fails the one object it
was about. Credentials the kubeconfig cannot produce (an exec plugin that is missing or fails, a token file
that is gone) are ``KubeconfigError``: a bad input, not a server problem.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx2
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError, ConfigError
from lightkube.resources.core_v1 import Node, NodeStatus
from lightkube.types import PatchType

from fakegpu.kube.backoff import retry_pause
from fakegpu.kube.discovery import SLICE_KINDS, DiscoveryError, read_server_minor, serves_slices
from fakegpu.kube.watch_loop import collect

JSON = dict[str, Any]
T = TypeVar("T")
RETRYABLE = frozenset({429, 500, 502, 503, 504})
NOT_SENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)
"""Transport failures before the request left: retrying them cannot repeat a write."""
MAX_RETRY_AFTER = 10.0
"""The longest pause a 429's ``Retry-After`` is followed for, in seconds."""


class ApiCallError(Exception):
    """An API request failed for good. ``code`` is the HTTP status (None when the server was not reached);
    ``uncertain`` when the request may have been carried out all the same (a 5xx or a broken connection
    after a non-idempotent create was sent)."""

    def __init__(self, message: str, code: int | None, *, uncertain: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.uncertain = uncertain


class KubeconfigError(Exception):
    """The kubeconfig's credentials could not be produced when a request needed them."""


def from_kubeconfig(exc: BaseException) -> bool:
    """Whether ``exc`` came from lightkube's handling of the kubeconfig (its auth flows run exec plugins
    and read token files at request time: a missing command, a failing one, or output that is not JSON)."""
    if isinstance(exc, ConfigError):
        return True
    if not isinstance(exc, (OSError, ValueError, KeyError, TypeError)):
        return False
    tb = exc.__traceback__
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).startswith("lightkube.config"):
            return True
        tb = tb.tb_next
    return False


def kubeconfig_problem(exc: BaseException) -> KubeconfigError:
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return KubeconfigError(f"cannot get credentials for the API server: {detail}")


def retry_after(exc: ApiError) -> float | None:
    """The pause a 429 asks for (``Retry-After`` in seconds), capped at MAX_RETRY_AFTER; None without one."""
    response = getattr(exc, "response", None)
    text = response.headers.get("Retry-After") if response is not None else None
    if text is None:
        details = getattr(exc.status, "details", None)
        text = getattr(details, "retryAfterSeconds", None)
    try:
        seconds = float(text) if text is not None else None
    except ValueError:
        return None
    if seconds is None or not 0 <= seconds < float("inf"):
        return None
    return min(seconds, MAX_RETRY_AFTER)


class Api:
    def __init__(self, client: AsyncClient, *, retries: int = 3, backoff: float = 0.2, trust_env: bool = True) -> None:
        self.client = client
        self.retries = retries
        self.backoff = backoff
        self.trust_env = trust_env
        """Whether proxies and CA bundles from the environment apply (``/version`` uses its own connection)."""
        self.calls: collections.Counter[str] = collections.Counter()

    @property
    def server(self) -> str:
        return str(self.client.config.cluster.server)

    async def call(self, verb: str, what: str, request: Callable[[], Awaitable[T]], *, idempotent: bool = True) -> T:
        """Run one request (again on retryable failures); failures raise ApiCallError naming ``what``.

        A request that is not ``idempotent`` (a create with ``generateName``) is repeated only when the
        server cannot have acted on it: a 429, or a connection that was never made."""
        attempt = 0
        while True:
            self.calls[verb] += 1
            try:
                return await request()
            except ApiError as exc:
                code = exc.status.code
                if code in RETRYABLE and attempt < self.retries and (idempotent or code == 429):
                    attempt += 1
                    pause = retry_after(exc) if code == 429 else None
                    await asyncio.sleep(retry_pause(attempt, first=self.backoff) if pause is None else pause)
                    continue
                reason = exc.status.reason or "Error"
                uncertain = not idempotent and code is not None and code >= 500
                message = f"{what}: {code} {reason}: {exc.status.message}"
                raise ApiCallError(message, code, uncertain=uncertain) from None
            except httpx2.HTTPError as exc:
                sent = not isinstance(exc, NOT_SENT)
                if attempt < self.retries and (idempotent or not sent):
                    attempt += 1
                    await asyncio.sleep(retry_pause(attempt, first=self.backoff))
                    continue
                detail = str(exc) or type(exc).__name__
                raise ApiCallError(
                    f"{what}: cannot reach the API server at {self.server}: {detail}",
                    None,
                    uncertain=sent and not idempotent,
                ) from None
            except Exception as exc:
                if from_kubeconfig(exc):
                    raise kubeconfig_problem(exc) from None
                raise

    # -- nodes -----------------------------------------------------------------------------------------
    async def get_node(self, name: str) -> JSON | None:
        try:
            node = await self.call("get", f"reading node {name}", lambda: self.client.get(Node, name))
        except ApiCallError as exc:
            if exc.code == 404:
                return None
            raise
        return dict(node.to_dict())

    async def list_nodes(self, labels: Mapping[str, str] | None = None) -> tuple[list[JSON], str]:
        return await self._list(Node, "listing nodes", labels=labels)

    async def create_node(self, obj: JSON) -> JSON:
        name = obj["metadata"]["name"]
        created = await self.call("create", f"creating node {name}", lambda: self.client.create(Node.from_dict(obj)))
        return dict(created.to_dict())

    async def patch_node(self, name: str, patch: JSON, *, status: bool = False) -> JSON:
        kind: Any = NodeStatus if status else Node
        what = f"patching {'the status of ' if status else ''}node {name}"
        patched = await self.call(
            "patch", what, lambda: self.client.patch(kind, name, patch, patch_type=PatchType.MERGE)
        )
        return dict(patched.to_dict())

    async def delete_node(self, name: str) -> bool:
        """False when the node was already gone."""
        return await self._delete(Node, name, f"deleting node {name}")

    # -- ResourceSlices --------------------------------------------------------------------------------
    async def list_slices(
        self, api_version: str, *, labels: Mapping[str, str] | None = None, fields: Mapping[str, str] | None = None
    ) -> tuple[list[JSON], str]:
        return await self._list(SLICE_KINDS[api_version], "listing ResourceSlices", labels=labels, fields=fields)

    async def create_slice(self, api_version: str, obj: JSON) -> JSON:
        kind = SLICE_KINDS[api_version]
        node = obj["spec"].get("nodeName")
        named = bool(obj["metadata"].get("name"))  # a named create is refused (409) if it happened already
        created = await self.call(
            "create",
            f"creating a ResourceSlice of node {node}",
            lambda: self.client.create(kind.from_dict(obj)),
            idempotent=named,
        )
        return dict(created.to_dict())

    async def replace_slice(self, api_version: str, obj: JSON) -> JSON:
        kind = SLICE_KINDS[api_version]
        what = f"updating ResourceSlice {obj['metadata']['name']}"
        replaced = await self.call("update", what, lambda: self.client.replace(kind.from_dict(obj)))
        return dict(replaced.to_dict())

    async def delete_slice(self, api_version: str, name: str) -> bool:
        return await self._delete(SLICE_KINDS[api_version], name, f"deleting ResourceSlice {name}")

    async def slices_served(self, api_version: str) -> bool:
        """Whether ``api_version`` serves ResourceSlices (a one-item list; 404 means no)."""
        return await self.call(
            "list", f"listing {api_version} ResourceSlices", lambda: serves_slices(self.client, api_version)
        )

    # -- discovery -------------------------------------------------------------------------------------
    async def server_minor(self) -> int:
        """The API server's minor version from ``/version`` (virtual nodes have no kubelet whose version
        could stand in for the cluster's); counted as a get, not retried."""
        self.calls["get"] += 1
        try:
            return await read_server_minor(self.client.config, trust_env=self.trust_env)
        except Exception as exc:
            if from_kubeconfig(exc):  # an exec plugin runs on the first request
                raise kubeconfig_problem(exc) from None
            if isinstance(exc, (httpx2.HTTPError, ValueError)):
                raise DiscoveryError(f"reading the API server's /version failed: {exc}") from None
            raise

    # -- shared ----------------------------------------------------------------------------------------
    async def _list(
        self,
        kind: Any,
        what: str,
        *,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> tuple[list[JSON], str]:
        """Every matching object in one request (no paging: one call to count, and lists of a few thousand
        nodes are what informers fetch anyway), with the list's resourceVersion for a watch to start from."""

        async def run() -> tuple[list[JSON], str]:
            listing = self.client.list(
                kind, labels=dict(labels) if labels else None, fields=dict(fields) if fields else None
            )
            items, version = await collect(listing)
            return [dict(o.to_dict()) for o in items], version

        return await self.call("list", what, run)

    async def _delete(self, kind: Any, name: str, what: str) -> bool:
        try:
            await self.call("delete", what, lambda: self.client.delete(kind, name))
        except ApiCallError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def watch(self, kind: Any, *, labels: Mapping[str, str], resource_version: str) -> AsyncIterator[tuple[str, JSON]]:
        """Events from ``resource_version`` on; the caller restarts from a fresh list when it ends or fails."""
        self.calls["watch"] += 1

        async def events() -> AsyncIterator[tuple[str, JSON]]:
            async for event, obj in self.client.watch(kind, labels=dict(labels), resource_version=resource_version):
                yield event, dict(obj.to_dict())

        return events()
