"""The controller's only door to the API server: counted, retried, and failing with one clear line.

Objects go in and come out as plain dicts (the wire JSON), because everything the controller does with
them is comparing fields. Every request is counted by verb (``calls``), which is what the summary and the
benchmark print. Overload answers (429) and server errors (5xx), and connection failures, are retried a
few times with a growing pause, as client-go does; anything else fails the one object it was about.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx2
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node, NodeStatus
from lightkube.types import PatchType

from dra.slice_publisher import SLICE_KINDS

JSON = dict[str, Any]
T = TypeVar("T")
RETRYABLE = frozenset({429, 500, 502, 503, 504})


class ApiCallError(Exception):
    """An API request failed for good. ``code`` is the HTTP status (None when the server was not reached)."""

    def __init__(self, message: str, code: int | None) -> None:
        super().__init__(message)
        self.code = code


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

    async def call(self, verb: str, what: str, request: Callable[[], Awaitable[T]]) -> T:
        """Run one request (again on retryable failures); failures raise ApiCallError naming ``what``."""
        attempt = 0
        while True:
            self.calls[verb] += 1
            try:
                return await request()
            except ApiError as exc:
                code = exc.status.code
                if code in RETRYABLE and attempt < self.retries:
                    attempt += 1
                    await asyncio.sleep(self.backoff * 2 ** (attempt - 1))
                    continue
                reason = exc.status.reason or "Error"
                raise ApiCallError(f"{what}: {code} {reason}: {exc.status.message}", code) from None
            except httpx2.HTTPError as exc:
                if attempt < self.retries:
                    attempt += 1
                    await asyncio.sleep(self.backoff * 2 ** (attempt - 1))
                    continue
                detail = str(exc) or type(exc).__name__
                raise ApiCallError(f"{what}: cannot reach the API server at {self.server}: {detail}", None) from None

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
        created = await self.call(
            "create", f"creating a ResourceSlice of node {node}", lambda: self.client.create(kind.from_dict(obj))
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

        async def probe() -> None:
            async for _ in self.client.list(SLICE_KINDS[api_version], chunk_size=1):
                break

        try:
            await self.call("list", f"listing {api_version} ResourceSlices", probe)
        except ApiCallError as exc:
            if exc.code == 404:
                return False
            raise
        return True

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
            items = [dict(o.to_dict()) async for o in listing]
            return items, str(listing.resourceVersion)

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
