"""The controller's only door to the API server: counted, retried, and failing with one clear line.

Nodes go in and come out as plain dicts (the wire JSON), because what the controller does with them is
comparing fields. ResourceSlices, thirty times larger at fleet scale, never become dicts: they are written
from the JSON a pool template already holds and listed as ``SliceKey``s (``fakegpu.kube.lean_requests``), and
lists go in pages. Every request is counted by verb (``calls``), which is what the summary and the benchmark
print; every 429 and success is told to the bulk job's ``AdaptiveLimit``. Overload answers (429, after the
pause the server asks for in ``Retry-After``) and connections that could not be made are retried a few times
with a growing pause, as client-go does. Server errors (5xx) and broken connections are retried too, except
for a create with ``generateName``: the server may have carried it out before failing, and a second one would
publish a second object. That failure is marked ``uncertain`` for the caller to look before it tries again.
Anything else fails the one object it was about. Credentials the kubeconfig cannot produce (an exec plugin
that is missing or fails, a token file that is gone) are ``KubeconfigError``: a bad input, not a server
problem.

Lists and collection deletes are long calls (``LONG_CALL``): on a real Kubernetes v1.36.2 server a collection
delete of about 7000 ResourceSlices outlived the client's 10 s read timeout and ``--delete`` failed after its
nodes were gone. A long call asks the server to finish within ``timeoutSeconds`` and waits longer than that;
one that times out all the same (or is answered 504) is tried again up to ``long_retries`` times, each retry
told to ``notice`` so the user sees a slow server being waited for, not a hang.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx2
import msgspec
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError, ConfigError
from lightkube.resources import resource_v1, resource_v1beta1, resource_v1beta2
from lightkube.resources.core_v1 import Node, NodeStatus
from lightkube.types import PatchType

from fakegpu.dra.slice_digest import SliceKey, slice_key
from fakegpu.kube.adaptive_limit import AdaptiveLimit
from fakegpu.kube.asyncio_streams import use_asyncio_streams
from fakegpu.kube.backoff import retry_note, retry_pause
from fakegpu.kube.discovery import SLICE_KINDS, DiscoveryError, read_server_minor, serves_slices
from fakegpu.kube.lean_requests import (
    LongCall,
    Page,
    SliceHead,
    Stored,
    all_pages,
    delete_collection,
    list_page,
    write_serialized,
)
from fakegpu.kube.page_sizes import NODE_PAGE, SLICE_KEY_PAGE
from fakegpu.virtual_nodes.slice_template import SliceBody

JSON = dict[str, Any]
T = TypeVar("T")
RETRYABLE = frozenset({429, 500, 502, 503, 504})
NOT_SENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)
"""Transport failures before the request left: retrying them cannot repeat a write."""
CLASS_KINDS: dict[str, Any] = {
    "resource.k8s.io/v1": resource_v1.DeviceClass,
    "resource.k8s.io/v1beta2": resource_v1beta2.DeviceClass,
    "resource.k8s.io/v1beta1": resource_v1beta1.DeviceClass,
}
MAX_RETRY_AFTER = 10.0
"""The longest pause a 429's ``Retry-After`` is followed for, in seconds."""
LONG_CALL = LongCall(server_seconds=60, read_seconds=75.0)
"""Lists and collection deletes: the server's own bound on a request (``--request-timeout``, 60 s by
default) asked for explicitly, and a read timeout above it."""
LONG_RETRIES = 8
"""How often a long call that timed out is tried again: a server that needs minutes to delete thousands of
slices is waited for about ten minutes (each try goes on from what the previous one deleted)."""
TIMED_OUT = 504
"""The status a server answers when a request outlived its ``timeoutSeconds``."""


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
    def __init__(
        self,
        client: AsyncClient,
        *,
        retries: int = 3,
        backoff: float = 0.2,
        trust_env: bool = True,
        long_call: LongCall = LONG_CALL,
        long_retries: int = LONG_RETRIES,
    ) -> None:
        self.client = client
        use_asyncio_streams(client)  # thousands of requests: the lighter network backend (see its module)
        self.retries = retries
        self.backoff = backoff
        self.long_call = long_call
        self.long_retries = long_retries
        self.notice: Callable[[str], None] = lambda line: None
        """Told of each retry of a long call that timed out: one line naming the request and the next try."""
        self.trust_env = trust_env
        """Whether proxies and CA bundles from the environment apply (``/version`` uses its own connection)."""
        self.calls: collections.Counter[str] = collections.Counter()
        self.limit: AdaptiveLimit | None = None
        """Told of every 429 and every success, when a bulk job adapts its concurrency."""

    @property
    def server(self) -> str:
        return str(self.client.config.cluster.server)

    async def call(
        self, verb: str, what: str, request: Callable[[], Awaitable[T]], *, idempotent: bool = True, long: bool = False
    ) -> T:
        """Run one request (again on retryable failures); failures raise ApiCallError naming ``what``.

        A request that is not ``idempotent`` (a create with ``generateName``) is repeated only when the
        server cannot have acted on it: a 429, or a connection that was never made. A ``long`` one (sent
        with ``self.long_call``) that timed out is repeated up to ``long_retries`` times."""
        attempt = 0
        while True:
            self.calls[verb] += 1
            try:
                result = await request()
            except ApiError as exc:
                code = exc.status.code
                if code == 429 and self.limit is not None:
                    self.limit.throttled()
                if (
                    code in RETRYABLE
                    and attempt < self._tries(long and code == TIMED_OUT)
                    and (idempotent or code == 429)
                ):
                    attempt += 1
                    pause = retry_after(exc) if code == 429 else None
                    pause = retry_pause(attempt, first=self.backoff) if pause is None else pause
                    if long and code == TIMED_OUT:
                        self._notice_slow(what, f"{code} {exc.status.reason or 'Timeout'}", attempt, pause)
                    await asyncio.sleep(pause)
                    continue
                reason = exc.status.reason or "Error"
                uncertain = not idempotent and code is not None and code >= 500
                message = f"{what}: {code} {reason}: {exc.status.message}"
                raise ApiCallError(message, code, uncertain=uncertain) from None
            except httpx2.HTTPError as exc:
                sent = not isinstance(exc, NOT_SENT)
                slow = long and isinstance(exc, httpx2.ReadTimeout)
                if attempt < self._tries(slow) and (idempotent or not sent):
                    attempt += 1
                    pause = retry_pause(attempt, first=self.backoff)
                    if slow:
                        self._notice_slow(what, f"no answer in {self.long_call.read_seconds:g} s", attempt, pause)
                    await asyncio.sleep(pause)
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
            if self.limit is not None:
                self.limit.succeeded()
            return result

    def _tries(self, slow: bool) -> int:
        """How many retries a failure allows: a long call that timed out gets ``long_retries``."""
        return max(self.retries, self.long_retries) if slow else self.retries

    def _notice_slow(self, what: str, detail: str, attempt: int, pause: float) -> None:
        self.notice(f"{what}: the API server is slow ({detail}); waiting for it, {retry_note(attempt + 1, pause)}")

    # -- nodes -----------------------------------------------------------------------------------------
    async def get_node(self, name: str) -> JSON | None:
        try:
            node = await self.call("get", f"reading node {name}", lambda: self.client.get(Node, name))
        except ApiCallError as exc:
            if exc.code == 404:
                return None
            raise
        return dict(node.to_dict())

    async def node_pages(self, labels: Mapping[str, Any] | None = None) -> AsyncIterator[list[JSON]]:
        """Nodes a page at a time (as wire dicts): the caller keeps what it needs of each page, not the fleet."""
        async for page in self._pages(Node, "listing nodes", NODE_PAGE, labels=labels):
            yield [dict(n.to_dict()) for n in page.items]

    async def list_nodes(self, labels: Mapping[str, Any] | None = None) -> tuple[list[JSON], str]:
        """Every matching Node (in pages) and the resourceVersion to watch from: for the watcher's own nodes."""
        nodes: list[JSON] = []
        version = ""
        async for page in self._pages(Node, "listing nodes", NODE_PAGE, labels=labels):
            nodes += [dict(n.to_dict()) for n in page.items]
            version = page.resource_version
        return nodes, version

    async def create_node(self, obj: JSON, *, identity_only: bool = False) -> Stored:
        """Create a Node; the answer is read for its identity and (unless ``identity_only``) whether it kept
        the status."""
        name = obj["metadata"]["name"]
        body = msgspec.json.encode(obj)  # compact JSON, several times cheaper than json.dumps
        return await self.call(
            "create",
            f"creating node {name}",
            lambda: write_serialized(self.client, Node, body, identity_only=identity_only),
        )

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

    async def delete_nodes(self, labels: Mapping[str, Any]) -> None:
        """Every Node the selector picks, in one request; the slices they own go with them (garbage collector)."""
        await self.call(
            "deletecollection",
            "deleting the virtual nodes",
            lambda: delete_collection(self.client, Node, labels=labels, long_call=self.long_call),
            long=True,
        )

    # -- ResourceSlices --------------------------------------------------------------------------------
    async def slice_pages(
        self,
        api_version: str,
        *,
        labels: Mapping[str, Any] | None = None,
        fields: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[list[SliceKey]]:
        """ResourceSlices a page at a time, each reduced to its key as the page arrives."""
        kind = SLICE_KINDS[api_version]
        async for page in self._pages(
            kind, "listing ResourceSlices", SLICE_KEY_PAGE, labels=labels, fields=fields, decode_as=SliceHead
        ):
            yield [slice_key(s) for s in page.items]

    async def list_slices(
        self, api_version: str, *, labels: Mapping[str, Any] | None = None, fields: Mapping[str, Any] | None = None
    ) -> tuple[list[SliceKey], str]:
        """The keys of every matching slice (in pages) and the resourceVersion to watch from."""
        keys: list[SliceKey] = []
        version = ""
        kind = SLICE_KINDS[api_version]
        async for page in self._pages(
            kind, "listing ResourceSlices", SLICE_KEY_PAGE, labels=labels, fields=fields, decode_as=SliceHead
        ):
            keys += [slice_key(s) for s in page.items]
            version = page.resource_version
        return keys, version

    async def first_slice(self, api_version: str, *, labels: Mapping[str, Any]) -> SliceKey | None:
        """One slice the selector picks (a one-item page), or None when there is none."""
        kind = SLICE_KINDS[api_version]
        page = await self.call(
            "list",
            "listing ResourceSlices",
            lambda: list_page(self.client, kind, limit=1, labels=labels, decode_as=SliceHead, long_call=self.long_call),
            long=True,
        )
        return slice_key(page.items[0]) if page.items else None

    async def create_slice(self, api_version: str, obj: SliceBody, *, identity_only: bool = False) -> Stored:
        """Create a slice from its serialised body; the answer is read for its identity (and, unless
        ``identity_only``, for the spec the server kept)."""
        kind = SLICE_KINDS[api_version]
        named = obj.name is not None  # a named create is refused (409) if it happened already
        return await self.call(
            "create",
            f"creating a ResourceSlice of node {obj.node}",
            lambda: write_serialized(self.client, kind, obj.body(), identity_only=identity_only),
            idempotent=named,
        )

    async def replace_slice(self, api_version: str, obj: SliceBody, *, identity_only: bool = False) -> Stored:
        kind = SLICE_KINDS[api_version]
        return await self.call(
            "update",
            f"updating ResourceSlice {obj.name}",
            lambda: write_serialized(self.client, kind, obj.body(), name=obj.name, identity_only=identity_only),
        )

    async def delete_slice(self, api_version: str, name: str) -> bool:
        return await self._delete(SLICE_KINDS[api_version], name, f"deleting ResourceSlice {name}")

    async def delete_slices(self, api_version: str, labels: Mapping[str, Any]) -> None:
        """Every slice the selector picks, in one request."""
        kind = SLICE_KINDS[api_version]
        await self.call(
            "deletecollection",
            "deleting ResourceSlices",
            lambda: delete_collection(self.client, kind, labels=labels, long_call=self.long_call),
            long=True,
        )

    # -- DeviceClasses (the dra-extended mode) ---------------------------------------------------------
    async def list_device_classes(self, api_version: str) -> list[JSON]:
        kind = CLASS_KINDS[api_version]
        classes: list[JSON] = []
        async for page in self._pages(kind, "listing DeviceClasses", NODE_PAGE):
            classes += [dict(c.to_dict()) for c in page.items]
        return classes

    async def create_device_class(self, api_version: str, obj: JSON) -> None:
        kind = CLASS_KINDS[api_version]
        name = obj["metadata"]["name"]
        await self.call("create", f"creating DeviceClass {name}", lambda: self.client.create(kind.from_dict(obj)))

    async def replace_device_class(self, api_version: str, obj: JSON) -> None:
        kind = CLASS_KINDS[api_version]
        name = obj["metadata"]["name"]
        await self.call("update", f"updating DeviceClass {name}", lambda: self.client.replace(kind.from_dict(obj)))

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
    async def _pages(
        self,
        kind: Any,
        what: str,
        limit: int,
        *,
        labels: Mapping[str, Any] | None = None,
        fields: Mapping[str, Any] | None = None,
        decode_as: type[Any] | None = None,
    ) -> AsyncIterator[Page[Any]]:
        """The pages of a list, each its own counted and retried request. A continue token that expired
        between two pages (410) fails the list: the caller's state was built from the pages before it."""
        pages = all_pages(
            self.client,
            kind,
            limit=limit,
            labels=labels,
            fields=fields,
            decode_as=decode_as,
            long_call=self.long_call,
            send=lambda request: self.call("list", what, request, long=True),
        )
        async for page in pages:
            yield page

    async def _delete(self, kind: Any, name: str, what: str) -> bool:
        try:
            await self.call("delete", what, lambda: self.client.delete(kind, name))
        except ApiCallError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def watch_nodes(self, *, labels: Mapping[str, str], resource_version: str) -> AsyncIterator[tuple[str, JSON]]:
        """Node events from ``resource_version`` on; the caller restarts from a fresh list when it ends or fails."""
        self.calls["watch"] += 1

        async def events() -> AsyncIterator[tuple[str, JSON]]:
            async for event, obj in self.client.watch(Node, labels=dict(labels), resource_version=resource_version):
                yield event, dict(obj.to_dict())

        return events()

    def watch_slices(
        self, api_version: str, *, labels: Mapping[str, str], resource_version: str
    ) -> AsyncIterator[tuple[str, SliceKey]]:
        """Slice events from ``resource_version`` on, each slice reduced to its key."""
        self.calls["watch"] += 1
        kind = SLICE_KINDS[api_version]

        async def events() -> AsyncIterator[tuple[str, SliceKey]]:
            async for event, obj in self.client.watch(kind, labels=dict(labels), resource_version=resource_version):
                yield event, slice_key(obj)

        return events()
