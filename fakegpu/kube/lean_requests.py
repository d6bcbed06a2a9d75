"""Requests lightkube's public API cannot make, or cannot make cheaply, for work at fleet scale.

- One page of a list: lightkube 1.0's ``list(chunk_size=...)`` pages but hides the pages (a caller cannot
  count, retry or stop at one).
- A delete by label selector: its ``deletecollection`` takes no selector, so it could only delete every
  object of a kind.
- A request allowed to take long (``LongCall``): a list or a collection delete of thousands of objects can
  outlast the client's usual read timeout (lightkube's 10 s) on a loaded server, so such a request asks the
  server to finish within ``timeoutSeconds`` and waits for the answer a little longer than that.
- A write from JSON already serialised, answered with the stored object's identity only: a 30 KB
  ResourceSlice built from a pool template is text already, and turning it into a model, the model into
  JSON, and the 30 KB answer back into a model cost more client CPU than the request itself (measured with
  ``bench/virtual_nodes.py``). Asked to, the write asks the server for the object's metadata alone
  (``as=PartialObjectMetadata``, which the API server honours on writes as on reads), so the 30 KB answer
  is not sent, received and parsed at all.

Every request goes through lightkube's own plumbing (URL, credentials, TLS, error mapping, its msgspec
codec), never by hand: only the query parameters and the body's serialisation are ours.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx2
import msgspec
from lightkube import AsyncClient
from lightkube.core import decoders
from lightkube.core.selector import build_selector

T = TypeVar("T")


class _StoredMeta(msgspec.Struct):
    name: str = ""
    resourceVersion: str = ""
    uid: str = ""


class Stored(msgspec.Struct):
    """What a write's answer is read for: the object's identity, and its spec left unparsed (read only
    when asked, e.g. to see whether the server dropped fields)."""

    metadata: _StoredMeta = msgspec.field(default_factory=_StoredMeta)
    spec: msgspec.Raw = msgspec.Raw(b"{}")
    status: msgspec.Raw = msgspec.Raw(b"{}")

    def spec_dict(self) -> dict[str, Any]:
        return dict(msgspec.json.decode(self.spec))

    def status_dict(self) -> dict[str, Any]:
        return dict(msgspec.json.decode(self.status))


class _OwnerHead(msgspec.Struct):
    kind: str = ""
    uid: str = ""
    controller: bool | None = None


class _MetaHead(msgspec.Struct):
    name: str = ""
    resourceVersion: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    ownerReferences: list[_OwnerHead] | None = None


class _PoolHead(msgspec.Struct):
    name: str = ""
    generation: int = 0


class _SliceSpecHead(msgspec.Struct):
    nodeName: str | None = None
    driver: str = ""
    pool: _PoolHead | None = None


class SliceHead(msgspec.Struct):
    """What a ResourceSlice is listed for when only its identity, pool and owner matter: decoding a 30 KB
    slice into this skips its devices (no objects are made for them), several times cheaper in CPU and
    memory than lightkube's whole model. Read with ``fakegpu.dra.slice_digest.slice_key``."""

    metadata: _MetaHead = msgspec.field(default_factory=_MetaHead)
    spec: _SliceSpecHead = msgspec.field(default_factory=_SliceSpecHead)


class _RemainingMeta(msgspec.Struct):
    remainingItemCount: int | None = None


class _Remaining(msgspec.Struct):
    metadata: _RemainingMeta | None = None


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    continue_token: str | None
    """None on the last page."""
    resource_version: str
    remaining: int | None
    """How many objects the pages after this one hold, when the server says (it does for a list it can count)."""


@dataclass(frozen=True)
class LongCall:
    """How long a list page or a collection delete may take. The server is asked to finish within
    ``server_seconds`` (``timeoutSeconds``, a query parameter of both verbs); the client waits
    ``read_seconds`` for the answer, longer, so that a server that needs the whole time answers (or answers
    its own timeout) instead of the client giving up on a request the server goes on carrying out."""

    server_seconds: int
    read_seconds: float

    def __post_init__(self) -> None:
        if self.server_seconds < 1 or self.read_seconds <= self.server_seconds:
            raise ValueError(
                f"a long call needs server_seconds >= 1 and read_seconds above it, got {self.server_seconds} "
                f"and {self.read_seconds}"
            )

    def apply(self, generic: Any, request: Any) -> None:
        """Set the server-side timeout and the longer read timeout on a lightkube ``BasicRequest``; the
        other timeouts (connect, write, pool) stay the client's."""
        # Both, as client-go's generated List sends them: the API server bounds a plain list or a collection
        # delete by the generic ``timeout`` (capped by its --request-timeout), a watch by ``timeoutSeconds``.
        request.params["timeoutSeconds"] = self.server_seconds
        request.params["timeout"] = f"{self.server_seconds}s"
        base: httpx2.Timeout = generic._client.timeout
        request.timeout = httpx2.Timeout(connect=base.connect, read=self.read_seconds, write=base.write, pool=base.pool)


def _selectors(labels: Mapping[str, Any] | None, fields: Mapping[str, Any] | None) -> dict[str, str]:
    params: dict[str, str] = {}
    if labels:
        params["labelSelector"] = build_selector(dict(labels))
    if fields:
        params["fieldSelector"] = build_selector(dict(fields), for_fields=True)
    return params


async def list_page(
    client: AsyncClient,
    kind: type[T],
    *,
    limit: int,
    continue_token: str | None = None,
    labels: Mapping[str, Any] | None = None,
    fields: Mapping[str, Any] | None = None,
    decode_as: type[Any] | None = None,
    long_call: LongCall | None = None,
) -> Page[Any]:
    """One page of at most ``limit`` objects of ``kind`` (a cluster-scoped lightkube resource), decoded as
    ``kind`` or, given, as the narrower msgspec struct ``decode_as`` (e.g. ``SliceHead``); with
    ``long_call``, allowed that long."""
    generic: Any = client._client  # lightkube's request plumbing is untyped
    params: dict[str, Any] = {"limit": limit, **_selectors(labels, fields)}
    if continue_token:
        params["continue"] = continue_token
    request = generic.prepare_request("list", res=kind, params=params)
    if long_call is not None:
        long_call.apply(generic, request)
    response = await generic.send(generic.build_adapter_request(request))
    generic.raise_for_status(response)
    body = response.content
    token, version, items = decoders.decode_list(body, decode_as or kind)
    meta = msgspec.json.decode(body, type=_Remaining).metadata
    return Page(list(items), token or None, version or "", meta.remainingItemCount if meta else None)


async def all_pages(
    client: AsyncClient,
    kind: type[Any],
    *,
    limit: int,
    labels: Mapping[str, Any] | None = None,
    fields: Mapping[str, Any] | None = None,
    decode_as: type[Any] | None = None,
    long_call: LongCall | None = None,
    send: Callable[[Callable[[], Awaitable[Page[Any]]]], Awaitable[Page[Any]]] | None = None,
) -> AsyncIterator[Page[Any]]:
    """Every page of a list, one request each; the caller keeps what it needs of a page before the next.
    ``send`` runs each page's request (to count and retry it, say); by default it is simply awaited."""
    token: str | None = None
    while True:

        def request(token: str | None = token) -> Awaitable[Page[Any]]:
            return list_page(
                client,
                kind,
                limit=limit,
                continue_token=token,
                labels=labels,
                fields=fields,
                decode_as=decode_as,
                long_call=long_call,
            )

        page = await (send(request) if send is not None else request())
        yield page
        token = page.continue_token
        if token is None:
            return


async def delete_collection(
    client: AsyncClient,
    kind: type[Any],
    *,
    labels: Mapping[str, Any],
    propagation: str = "Background",
    long_call: LongCall | None = None,
) -> None:
    """Delete every object of ``kind`` the label selector picks, in one request; dependents go the way
    ``propagation`` says (``Background``: the garbage collector deletes what the objects own). The answer
    (every deleted object, hundreds of MB for thousands of ResourceSlices) is checked for its status only."""
    if not labels:
        raise ValueError("a collection delete needs a label selector: without one it deletes every object of the kind")
    generic: Any = client._client
    params = {**_selectors(labels, None), "propagationPolicy": propagation}
    request = generic.prepare_request("deletecollection", res=kind, params=params)
    if long_call is not None:
        long_call.apply(generic, request)
    response = await generic.send(generic.build_adapter_request(request))
    generic.raise_for_status(response)


PARTIAL_METADATA_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
"""What a client sends to be answered with an object's metadata only; a server that cannot answer so falls
back to the whole object (the second media type), which ``Stored`` reads the same way."""


class _Writes:
    """Writes of one kind through one client, the request template prepared once: lightkube's request
    preparation and httpx's URL merging cost about a quarter of a write's client CPU, and they give the same
    URL and headers every time. Credentials are not in the template: the client's auth flow adds them to
    each request when it is sent, as for any other request."""

    def __init__(self, client: AsyncClient, kind: type[Any]) -> None:
        self._generic: Any = client._client
        request = self._generic.build_adapter_request(
            self._generic.prepare_request("post", res=kind, obj=msgspec.Raw(b"{}"))
        )
        self._url: httpx2.URL = request.url
        self._headers = httpx2.Headers({k: v for k, v in request.headers.items() if k.lower() != "content-length"})
        self._identity_headers = httpx2.Headers({**self._headers, "accept": PARTIAL_METADATA_ACCEPT})

    async def write(self, body: bytes, name: str | None, identity_only: bool) -> Stored:
        headers = self._identity_headers if identity_only else self._headers
        if name is None:
            request = httpx2.Request("POST", self._url, headers=headers, content=body)
        else:
            url = self._url.copy_with(path=f"{self._url.path}/{name}")
            request = httpx2.Request("PUT", url, headers=headers, content=body)
        response = await self._generic.send(request)
        self._generic.raise_for_status(response)
        return msgspec.json.decode(response.content, type=Stored)


_writes: weakref.WeakKeyDictionary[AsyncClient, dict[type[Any], _Writes]] = weakref.WeakKeyDictionary()


async def write_serialized(
    client: AsyncClient, kind: type[Any], body: bytes, *, name: str | None = None, identity_only: bool = False
) -> Stored:
    """Create (``name`` None) or replace the object whose JSON is ``body``; the answer read as ``Stored``.
    ``identity_only`` asks the server to answer with the metadata alone: ``spec`` and ``status`` of the
    answer are then empty, whatever the server stored."""
    per_kind = _writes.setdefault(client, {})
    writes = per_kind.get(kind)
    if writes is None:
        writes = per_kind[kind] = _Writes(client, kind)
    return await writes.write(body, name, identity_only)
