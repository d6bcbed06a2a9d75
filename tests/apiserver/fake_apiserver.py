"""An in-process fake Kubernetes API server for DRA driver tests.

``FakeApiServer`` serves HTTP/1.1 on ``127.0.0.1`` (ephemeral port only), plain or over TLS (``tls``), from a
background thread (``http.server.ThreadingHTTPServer``), so a test's own asyncio loop can drive
``lightkube.AsyncClient`` against it. It serves ``/version``, legacy discovery (``/api``, ``/api/v1``, ``/apis``,
``/apis/resource.k8s.io[/<v>]``), core/v1 ``nodes`` and ``pods`` and resource.k8s.io ``resourceslices``,
``deviceclasses`` and ``resourceclaims`` (+ ``status`` subresources of nodes and claims) with the verbs
create, get, list, update, patch (merge, JSON patch, simplified server-side apply), delete,
deletecollection and watch.

Every object written through the API is checked with ``kubernetes_validate.validate(obj, "<1.N>.0",
strict=True)`` (through :mod:`tests.apiserver.schema_cache`, which keeps the parsed schemas) plus the
rules of :mod:`tests.apiserver.k8s_validation` before it is stored; failures are answered with
``422 Invalid`` and recorded in :attr:`FakeApiServer.rejections`. ``validate_schema=False`` skips the
kubernetes-validate part (milliseconds per object; benchmarks of fleets use it), the rules still run.

Semantics kept: ``generateName`` (prefix cut to 58 characters + 5 characters of the Kubernetes
alphabet), 409 ``AlreadyExists``, optimistic concurrency (409 ``Conflict``), immutable fields (422),
server-managed ``uid`` / ``resourceVersion`` (one global counter) / ``creationTimestamp`` /
``generation`` (bumped on spec changes), no-op updates that change nothing (no new resourceVersion,
no event), finalizers (delete only marks ``deletionTimestamp``; the update that removes the last
finalizer deletes), garbage collection through ``ownerReferences`` (deleting a Node deletes the slices it
owns; an owner index makes that O(dependents); ``propagationPolicy`` Orphan keeps them, Foreground is
served like Background), ``deletecollection`` with selectors answering the list of deleted objects, status
subresources (create/update of a ResourceClaim ignores ``status``; ``/status`` changes only
``status``), feature-gate field dropping for ResourceSlices, field/label selectors, list paging
(``limit``/``continue``; ``remainingItemCount`` only without selectors, as a real server) and watches
(initial ``ADDED`` events when no ``resourceVersion`` is given or with ``sendInitialEvents=true``, which ends
them with the ``k8s.io/initial-events-end`` BOOKMARK kubectl's waits need, replay of the history after a given
``resourceVersion``, ``410 Expired`` ERROR event after :meth:`FakeApiServer.compact` or once the bounded
history, ``history_limit`` events, has dropped the version, ``timeoutSeconds``).

Objects are kept as metadata plus compact JSON (:mod:`tests.apiserver.stored_object`), so a fleet of 9,000
30 KB ResourceSlices costs about 300 MB, not gigabytes. ``GET /debug/fakegpu/counts`` answers the request
counts and bytes received per verb (for a client in another process; :mod:`tests.apiserver.standalone`
runs the server in a process of its own).

With ``nfd_crds=True`` Node Feature Discovery's NodeFeature is served and checked against its CRD's schema
(:mod:`tests.apiserver.nodefeature_crd`).
With ``nvidia_crds=True`` NVIDIA's ComputeDomain and ComputeDomainClique (and core/v1 ``events``) are served,
``/apis`` lists resource.nvidia.com, and their writes are pruned, defaulted and validated against the CRDs'
own schemas in deploy/overlays/compute-domains (:mod:`tests.apiserver.crd_schema`), immutable-spec rule
included; a ComputeDomain's ``status`` is written only through ``/status``.

Limitations: no conversion between resource.k8s.io versions. Objects are stored once per resource (the
name space is shared by all versions, as in a real cluster) in the version they were written with, and a
get/list/watch through another version returns them unchanged, with their own ``apiVersion``. No authn/
authz unless a test names a token's user and grants (:meth:`FakeApiServer.authorize`, 403 otherwise),
Namespace objects only with ``namespaces_and_crds`` (and then only a terminating one refuses writes, a
missing one does not), no other admission, no managedFields; strategic merge patch answers 415; server-side
apply is "create, or JSON-merge the applied object" (no field ownership, ``force`` ignored, omitted fields
are not removed); discovery is the legacy (non-aggregated) JSON form.
"""

from __future__ import annotations

import base64
import bisect
import collections
import contextlib
import copy
import json
import os
import queue
import random
import select
import socket
import socketserver
import ssl
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, TypeVar, cast
from urllib.parse import parse_qs, urlsplit

import kubernetes_validate  # type: ignore[import-untyped]
import yaml
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import Cluster, User

from . import crd_schema, schema_cache
from . import k8s_selectors as sel
from . import k8s_validation as val
from .authorization import Allows, Attributes, Authorizer, forbidden_message
from .pod_validation import validate_pod
from .serving_tls import ServingTls, make_serving_tls
from .stored_object import StoredObject

JSON = dict[str, Any]
_T = TypeVar("_T")

RESOURCE_GROUP = "resource.k8s.io"
#: resource.k8s.io versions in order of preference, with the Kubernetes minor that introduced them.
RESOURCE_VERSIONS: dict[str, int] = {"v1": 34, "v1beta2": 33, "v1beta1": 32}
SUPPORTED_MINORS = range(32, 37)
PROPAGATION_POLICIES = ("Background", "Foreground", "Orphan")
#: the debug endpoint with the request counts and bytes received per verb (not itself counted)
COUNTS_PATH = "/debug/fakegpu/counts"
VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand
_MAX_GENERATED_PREFIX = 58  # 63 - 5 random characters
_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    plural: str
    kind: str
    namespaced: bool
    has_status: bool = False
    field_labels: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    """what discovery lists as ``shortNames`` (kubectl resolves ``crd`` through it)"""

    @property
    def group_resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def field_values(self, obj: Mapping[str, Any]) -> dict[str, str]:
        meta = obj.get("metadata") or {}
        values = {"metadata.name": meta.get("name") or "", "metadata.namespace": meta.get("namespace") or ""}
        for label in self.field_labels:
            current: Any = obj
            for part in label.split("."):
                current = current.get(part) if isinstance(current, Mapping) else None
            if isinstance(current, bool) or label == "spec.unschedulable":
                current = "true" if current else "false"
            values[label] = "" if current is None else str(current)
        return values

    def selectable_fields(self) -> tuple[str, ...]:
        return ("metadata.name", *(("metadata.namespace",) if self.namespaced else ()), *self.field_labels)


NODES = ResourceType("", "nodes", "Node", namespaced=False, has_status=True, field_labels=("spec.unschedulable",))
RESOURCE_SLICES = ResourceType(
    RESOURCE_GROUP, "resourceslices", "ResourceSlice", namespaced=False, field_labels=("spec.nodeName", "spec.driver")
)
DEVICE_CLASSES = ResourceType(RESOURCE_GROUP, "deviceclasses", "DeviceClass", namespaced=False)
RESOURCE_CLAIMS = ResourceType(RESOURCE_GROUP, "resourceclaims", "ResourceClaim", namespaced=True, has_status=True)
RESOURCE_CLAIM_TEMPLATES = ResourceType(
    RESOURCE_GROUP, "resourceclaimtemplates", "ResourceClaimTemplate", namespaced=True
)
PODS = ResourceType("", "pods", "Pod", namespaced=True, has_status=True, field_labels=("spec.nodeName",))
NVIDIA_GROUP = "resource.nvidia.com"
NVIDIA_VERSION = "v1beta1"
#: NVIDIA's DRA driver's custom resources (served once their CRDs are installed: ``nvidia_crds=True``)
COMPUTE_DOMAINS = ResourceType(NVIDIA_GROUP, "computedomains", "ComputeDomain", namespaced=True, has_status=True)
COMPUTE_DOMAIN_CLIQUES = ResourceType(NVIDIA_GROUP, "computedomaincliques", "ComputeDomainClique", namespaced=True)
NFD_GROUP = "nfd.k8s-sigs.io"
NFD_VERSION = "v1alpha1"
#: Node Feature Discovery's NodeFeature (``nfd_crds=True``), what GFD writes with useNodeFeatureAPI
NODE_FEATURES = ResourceType(NFD_GROUP, "nodefeatures", "NodeFeature", namespaced=True)
#: the groups whose kinds are custom resources, checked against their CRD's schema (tests.apiserver.crd_schema)
CUSTOM_GROUPS = frozenset({NVIDIA_GROUP, NFD_GROUP})
#: core/v1 Events, served with the NVIDIA kinds (the compute-domain controller records its transitions)
EVENTS = ResourceType("", "events", "Event", namespaced=True)
#: Namespaces and CRDs with their deletion lifecycle (``namespaces_and_crds=True``): what a teardown waits on
NAMESPACES = ResourceType("", "namespaces", "Namespace", namespaced=False, has_status=True, short_names=("ns",))
APIEXTENSIONS_GROUP = "apiextensions.k8s.io"
CRDS = ResourceType(
    APIEXTENSIONS_GROUP,
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
    has_status=True,
    short_names=("crd", "crds"),
)
#: what kube-apiserver's namespace strategy puts in spec.finalizers (the namespace controller's)
NAMESPACE_FINALIZER = "kubernetes"
#: what apiextensions-apiserver adds to a CRD being deleted until its custom resources are gone
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
_TYPES = {
    t.plural: t
    for t in (
        NODES,
        PODS,
        RESOURCE_SLICES,
        DEVICE_CLASSES,
        RESOURCE_CLAIMS,
        RESOURCE_CLAIM_TEMPLATES,
        COMPUTE_DOMAINS,
        COMPUTE_DOMAIN_CLIQUES,
        NODE_FEATURES,
        EVENTS,
        NAMESPACES,
        CRDS,
    )
}


class RequestRecord(NamedTuple):
    method: str
    path: str
    query: dict[str, str]
    accept: str = ""
    user: str | None = None
    """The user of the request's bearer token (``authorize``); None for an unrestricted request."""


@dataclass(frozen=True)
class Rejection:
    """A write the server refused as malformed or invalid (HTTP 400, 415 or 422)."""

    verb: str
    kind: str
    name: str | None
    code: int
    reason: str
    message: str
    body: Any


class ApiFailure(Exception):
    """An API error, answered as a ``Status`` object."""

    def __init__(self, code: int, message: str, *, reason: str | None = None, details: JSON | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> JSON:
        status: JSON = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            status["details"] = self.details
        return status


@dataclass
class _Response:
    code: int
    body: Any
    content_type: str = "application/json"


def _wants_partial_metadata(headers: Mapping[str, str]) -> bool:
    """Whether the client's first choice of media type is ``PartialObjectMetadata`` (meta.k8s.io/v1), as
    the real API server honours on writes too (``transformResponseObject`` in its create and update
    handlers): the answer then carries the object's metadata only."""
    first = headers.get("accept", "").split(",")[0]
    params = dict(p.strip().partition("=")[::2] for p in first.split(";")[1:])
    return params.get("as") == "PartialObjectMetadata" and params.get("g") == "meta.k8s.io" and params.get("v") == "v1"


def _as_partial_metadata(response: _Response) -> _Response:
    body = response.body
    if isinstance(body, bytes | bytearray | memoryview):
        body = json.loads(bytes(body))
    if not isinstance(body, dict) or "metadata" not in body or body.get("kind") == "Status":
        return response
    partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": body["metadata"]}
    return _Response(response.code, partial, response.content_type)


@dataclass
class _Fault:
    verb: str
    kind: str
    status: int
    remaining: int
    message: str | None


@dataclass
class _Delay:
    verb: str
    kind: str
    seconds: float
    remaining: int


@dataclass
class _Event:
    rv: int
    plural: str
    type: str
    obj: StoredObject
    old: StoredObject | None


@dataclass
class _Watcher:
    rtype: ResourceType
    namespace: str | None
    fields: list[sel.Requirement]
    labels: list[sel.Requirement]
    events: queue.Queue[bytes | None] = field(default_factory=queue.Queue)

    def matches(self, obj: StoredObject | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj.meta.get("namespace") != self.namespace:
            return False
        return sel.fields_match(self.fields, obj.fields) and sel.labels_match(self.labels, obj.labels)

    def deliver(self, event: _Event) -> None:
        if event.plural != self.rtype.plural:
            return
        new_match = self.matches(event.obj)
        if event.type == "MODIFIED":
            old_match = self.matches(event.old)
            kind = {(True, True): "MODIFIED", (True, False): "ADDED", (False, True): "DELETED"}.get(
                (new_match, old_match)
            )
        else:
            kind = event.type if new_match else None
        if kind is not None:
            self.events.put(_stored_event_line(kind, event.obj))


@dataclass
class _WatchStream:
    watcher: _Watcher
    deadline: float | None


@dataclass
class _Route:
    rtype: ResourceType
    group_version: str
    namespace: str | None
    name: str | None
    subresource: str | None
    verb: str

    @property
    def kind_key(self) -> str:
        return f"{self.rtype.plural}/{self.subresource}" if self.subresource else self.rtype.plural


def _event_line(kind: str, obj: Any) -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _stored_event_line(kind: str, obj: StoredObject) -> bytes:
    return b'{"type":"' + kind.encode() + b'","object":' + obj.object_bytes() + b"}\n"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _default_taint_times(slice_obj: JSON) -> None:
    """A device taint written without ``timeAdded`` gets the time of the write, in whole seconds, as the API
    server defaults it (kubernetes/kubernetes ``pkg/apis/resource/v1/defaults.go`` ``SetDefaults_DeviceTaint``
    @ v1.36.0); v1beta1 keeps a device's fields under ``basic``."""
    for device in (slice_obj.get("spec") or {}).get("devices") or []:
        holder = device.get("basic", device) if isinstance(device, dict) else {}
        for taint in holder.get("taints") or []:
            if isinstance(taint, dict):
                taint.setdefault("timeAdded", _now())


def _clone(obj: _T) -> _T:
    """A deep copy of a JSON value, by a JSON round trip (two to three times faster than ``copy.deepcopy``)."""
    return cast(_T, json.loads(json.dumps(obj)))


def _version_of(api_version: str) -> str:
    return api_version.rsplit("/", 1)[-1]


def _number(query: Mapping[str, str], key: str) -> float:
    try:
        return float(query.get(key) or 0)
    except ValueError as exc:
        raise ApiFailure(400, f"invalid {key}: {query[key]!r}") from exc


def _json_path(parts: Sequence[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch; raises ``ApiFailure`` on malformed or failing operations."""
    if not isinstance(operations, list):
        raise ApiFailure(400, "json patch must be a list of operations")
    doc = copy.deepcopy(doc)

    def parent(pointer: str) -> tuple[Any, str]:
        if not pointer.startswith("/"):
            raise ApiFailure(422, f"invalid JSON pointer {pointer!r}")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]
        node = doc
        for part in parts[:-1]:
            try:
                node = node[int(part)] if isinstance(node, list) else node[part]
            except (KeyError, IndexError, ValueError, TypeError) as exc:
                raise ApiFailure(422, f"json patch: path {pointer!r} not found") from exc
        return node, parts[-1]

    def get(pointer: str) -> Any:
        node, last = parent(pointer)
        try:
            return node[int(last)] if isinstance(node, list) else node[last]
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiFailure(422, f"json patch: path {pointer!r} not found") from exc

    def remove(pointer: str) -> Any:
        value = get(pointer)
        node, last = parent(pointer)
        if isinstance(node, list):
            del node[int(last)]
        else:
            del node[last]
        return value

    def add(pointer: str, value: Any) -> None:
        nonlocal doc
        if pointer == "":
            doc = value
            return
        node, last = parent(pointer)
        if isinstance(node, list):
            node.insert(len(node) if last == "-" else int(last), value)
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ApiFailure(422, f"json patch: cannot add at {pointer!r}")

    for op in operations:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            add(path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            remove(path)
        elif kind == "replace":
            remove(path)
            add(path, copy.deepcopy(op.get("value")))
        elif kind == "move":
            add(path, remove(op.get("from", "")))
        elif kind == "copy":
            add(path, copy.deepcopy(get(op.get("from", ""))))
        elif kind == "test":
            if get(path) != op.get("value"):
                raise ApiFailure(422, f"json patch: test operation for path {path!r} failed")
        else:
            raise ApiFailure(400, f"json patch: unknown operation {kind!r}")
    return doc


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True  # server_close() joins every handler thread
    # socketserver's default listen backlog is 5: a client opening more connections at once loses SYNs and
    # waits a second for the retransmission. A real API server accepts far more.
    request_queue_size = 128

    def __init__(self, api: FakeApiServer, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api = api
        self.tls = tls
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def server_bind(self) -> None:
        # HTTPServer.server_bind would resolve the host name (socket.getfqdn), which can be slow.
        socketserver.TCPServer.server_bind(self)
        self.server_name = "127.0.0.1"
        self.server_port = int(self.server_address[1])

    def get_request(self) -> tuple[socket.socket, Any]:
        """With TLS, the accepted connection is wrapped here and its handshake left to the handler's thread
        (``_Handler.setup``): a handshake in the accepting thread would make every new client wait for it."""
        conn, address = super().get_request()
        if self.tls is None:
            return conn, address
        return self.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False), address

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
            self.api.connections_accepted += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            self.api.errors.append(traceback.format_exc())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    _headers_buffer: list[bytes]  # BaseHTTPRequestHandler's, written with the body in one write (_serve)
    timeout = 60
    disable_nagle_algorithm = True  # headers and body are separate writes: avoid the 40 ms delayed-ACK stall
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()  # sets the connection's timeout, which bounds the handshake too
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length:
            return self.rfile.read(int(length))
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return b""

    def _serve(self, method: str) -> None:
        body = self._read_body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        result = self.server.api.handle_request(method, self.path, headers, body)
        if isinstance(result, _WatchStream):
            self._stream(result)
            return
        if isinstance(result.body, bytes):
            payload = result.body
        elif isinstance(result.body, (dict, list)):
            payload = json.dumps(result.body).encode()
        else:
            payload = str(result.body).encode()
        self.send_response(result.code)
        self.send_header("Content-Type", result.content_type)
        self.send_header("Content-Length", str(len(payload)))
        # Headers and body in one write, as a real API server's buffered writer sends a response: two writes
        # reach the client as two segments and cost it a second wake-up per request.
        self._headers_buffer.append(b"\r\n")
        self.wfile.write(b"".join(self._headers_buffer) + payload)
        self._headers_buffer = []

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if isinstance(self.connection, ssl.SSLSocket):
                # No peeking through TLS. An HTTP/1.1 client sends nothing while a response streams, so
                # anything to read is its close_notify or the end of the connection.
                return bool(readable)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _stream(self, stream: _WatchStream) -> None:
        api = self.server.api
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            while True:
                try:
                    line = stream.watcher.events.get(timeout=api.watch_poll_interval)
                except queue.Empty:
                    if api.stopping or self._client_gone():
                        self.close_connection = True
                        break
                    if stream.deadline is not None and time.monotonic() >= stream.deadline:
                        break
                    continue
                if line is None:
                    break
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            # A cleanly terminated chunked stream leaves the connection reusable (keep-alive), as with a real server.
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
        finally:
            api._remove_watcher(stream.watcher)


class FakeApiServer:
    """A Kubernetes API server double for the DRA driver; see the module docstring for the semantics kept.

    Use as a context manager (or ``start()``/``stop()``) and point lightkube at it with ``server.client()``.
    """

    def __init__(
        self,
        kubernetes_version: str = "1.36",
        *,
        resource_api_versions: Sequence[str] | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        allow_unconditional_update: bool = False,
        watch_poll_interval: float = 0.05,
        validate_schema: bool = True,
        history_limit: int = 1000,
        nvidia_crds: bool = False,
        nfd_crds: bool = False,
        namespaces_and_crds: bool = False,
        tls: bool = False,
        events: bool = False,
    ) -> None:
        """With ``tls`` the server serves HTTPS with a CA of its own (:mod:`tests.apiserver.serving_tls`),
        which ``lightkube_config``, ``client`` and ``kubeconfig`` carry, so clients verify it as a real one;
        without, plain HTTP (cheaper for the tests that do not measure the client).

        ``nvidia_crds`` serves NVIDIA's ComputeDomain and ComputeDomainClique kinds, as a cluster with the
        DRA driver's CRDs installed does, and core/v1 Events with them; ``events`` serves Events alone (a
        server without them answers 404, which the daemons' Event writers must survive). ``nfd_crds`` serves
        Node Feature Discovery's NodeFeature, checked against its CRD's schema
        (:mod:`tests.apiserver.nodefeature_crd`), as a cluster running NFD does.

        ``validate_schema=False`` skips the kubernetes-validate schema check of written objects (the
        server's own rules in :mod:`tests.apiserver.k8s_validation` still run): it costs milliseconds per
        object, too much for a benchmark fleet. ``history_limit`` bounds the watch history (the last N
        events; a watch from an older resourceVersion gets 410 Expired), so a fleet's churn does not keep
        every version of every object alive.

        ``namespaces_and_crds`` serves core/v1 Namespaces and apiextensions.k8s.io/v1 CustomResourceDefinitions
        with what a teardown meets on a real server: deleting a Namespace only marks it ``Terminating`` and
        deletes what it holds (objects with finalizers are only marked); deleting a CRD marks it (finalizer
        ``customresourcecleanup.apiextensions.k8s.io``, condition ``Terminating``) and deletes its custom
        resources; each goes once nothing of it is left, a CRD's kind is then no longer served. Creating in a
        terminating namespace answers 403, creating a custom resource of a terminating CRD 405. A namespace
        need not exist to be written to (no NamespaceLifecycle admission for missing ones).
        """
        parts = kubernetes_version.lstrip("v").split(".")
        if len(parts) not in (2, 3) or parts[0] != "1" or not all(p.isdigit() for p in parts):
            raise ValueError(f"kubernetes_version must look like '1.36', got {kubernetes_version!r}")
        self.minor = int(parts[1])
        if self.minor not in SUPPORTED_MINORS:
            raise ValueError(f"unsupported Kubernetes version {kubernetes_version!r} (1.32 to 1.36)")
        self.kubernetes_version = f"1.{self.minor}"
        self.git_version = f"v1.{self.minor}.{parts[2] if len(parts) == 3 else 0}"
        self._validate_version = f"1.{self.minor}.0"
        if resource_api_versions is None:
            resource_api_versions = [v for v, since in RESOURCE_VERSIONS.items() if since <= self.minor]
        for version in resource_api_versions:
            if RESOURCE_VERSIONS.get(version, 99) > self.minor:
                raise ValueError(f"resource.k8s.io/{version} does not exist in Kubernetes 1.{self.minor}")
        #: served resource.k8s.io versions, preferred first
        self.resource_api_versions = [v for v in RESOURCE_VERSIONS if v in resource_api_versions]
        self.feature_gates = {**val.default_feature_gates(self.minor), **(feature_gates or {})}
        self.allow_unconditional_update = allow_unconditional_update
        self.watch_poll_interval = watch_poll_interval
        self.validate_schema = validate_schema
        self.stamp_taint_times = True
        """Default a device taint's ``timeAdded`` on writes, as a real API server does (``_default_taint_times``)."""
        if history_limit < 1:
            raise ValueError(f"history_limit must be at least 1, got {history_limit}")

        #: every request received: (method, path, query)
        self.requests: list[RequestRecord] = []
        #: requests per API verb ("create", "list", ...)
        self.counts: collections.Counter[str] = collections.Counter()
        #: bytes received (request line, headers, body) per API verb; discovery requests under "discovery"
        self.bytes_received: collections.Counter[str] = collections.Counter()
        #: request bodies received (the objects as sent, nothing of the HTTP around them) per (verb, kind)
        self.body_bytes: collections.Counter[tuple[str, str]] = collections.Counter()
        #: connections accepted (each one a TLS handshake with ``tls``): how well clients reuse them
        self.connections_accepted = 0
        #: discovery, version and health requests (not API verbs, so not in ``counts``)
        self.discovery_requests = 0
        #: the messages of requests refused 403 because their token's user may not make them (``authorize``)
        self.forbidden: list[str] = []
        self._authorizer = Authorizer()
        #: writes refused as malformed or invalid (400/415/422), fault injection excluded
        self.rejections: list[Rejection] = []
        #: tracebacks of unexpected server-side exceptions (answered 500); tests may assert it stays empty
        self.errors: list[str] = []

        self._served: dict[tuple[str, str], dict[str, ResourceType]] = {("", "v1"): {"nodes": NODES, "pods": PODS}}
        for version in self.resource_api_versions:
            self._served[(RESOURCE_GROUP, version)] = {
                t.plural: t for t in (DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_SLICES)
            }
        if nvidia_crds:
            self._served[(NVIDIA_GROUP, NVIDIA_VERSION)] = {
                t.plural: t for t in (COMPUTE_DOMAINS, COMPUTE_DOMAIN_CLIQUES)
            }
        if nvidia_crds or events:
            self._served[("", "v1")][EVENTS.plural] = EVENTS
        if nfd_crds:
            self._served[(NFD_GROUP, NFD_VERSION)] = {NODE_FEATURES.plural: NODE_FEATURES}
        if namespaces_and_crds:
            self._served[("", "v1")][NAMESPACES.plural] = NAMESPACES
            self._served[(APIEXTENSIONS_GROUP, "v1")] = {CRDS.plural: CRDS}
        # Namespaces and CRDs being deleted, waiting for what they hold to go (see _advance_terminations).
        self._terminating: set[tuple[str, str, str]] = set()
        self._advancing = False
        self._lock = threading.RLock()
        # Stored objects are immutable (tests/apiserver/stored_object.py): responses, watch events and the
        # history share them without copies.
        self._objects: dict[tuple[str, str, str], StoredObject] = {}
        self._by_plural: dict[str, dict[tuple[str, str, str], StoredObject]] = collections.defaultdict(dict)
        # Garbage collection indexes: uid -> key of the live object, and owner uid -> keys of its dependents,
        # so that deleting an owner costs O(its dependents), not a scan of every object.
        self._uid_keys: dict[str, tuple[str, str, str]] = {}
        self._dependents: dict[str, set[tuple[str, str, str]]] = {}
        self._rv = 0
        self._history: collections.deque[_Event] = collections.deque(maxlen=history_limit)
        self._history_floor = 0
        self._watchers: list[_Watcher] = []
        self._faults: list[_Fault] = []
        self._delays: list[_Delay] = []
        self._verb_counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self._random = random.Random()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.tls: ServingTls | None = make_serving_tls() if tls else None

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> FakeApiServer:
        if self._httpd is not None:
            raise RuntimeError("FakeApiServer already started")
        self._stopping.clear()
        self._httpd = _HTTPServer(self, self.tls.context if self.tls is not None else None)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-apiserver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: ends watch streams, closes every connection and joins all server threads."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        self._stopping.set()
        self.close_watches()
        httpd.shutdown()
        httpd.close_connections()
        httpd.server_close()
        thread.join()
        self._httpd = self._thread = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("FakeApiServer not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"{'https' if self.tls is not None else 'http'}://127.0.0.1:{self.port}"

    @property
    def ca_data(self) -> str | None:
        """The CA as a kubeconfig's ``certificate-authority-data`` holds it (base64 PEM); None over plain HTTP."""
        return base64.b64encode(self.tls.ca_pem).decode() if self.tls is not None else None

    def lightkube_config(self, namespace: str = "default", *, token: str | None = None) -> KubeConfig:
        """A lightkube ``KubeConfig`` for ``AsyncClient(config=...)`` (with ``tls``, trusting this server's CA;
        with ``token``, the bearer token of a user given to ``authorize``, else no credentials)."""
        cluster = Cluster(server=self.url, certificate_auth_data=self.ca_data)
        return KubeConfig.from_one(cluster=cluster, user=User(token=token), namespace=namespace)

    def client(self, *, token: str | None = None) -> AsyncClient:
        """A lightkube client of this server that ignores proxy variables from the environment; the bound
        method is the client factory the daemons take (``DraDriver(..., apiserver.client)``). With ``token``
        its requests are that user's (``authorize``)."""
        return AsyncClient(config=self.lightkube_config(token=token), trust_env=False)

    def authorize(self, token: str, user: str, allows: Allows) -> None:
        """Requests bearing ``token`` are ``user``'s from now on and get 403 Forbidden, with a real server's
        message (also kept in ``forbidden``), for whatever ``allows`` refuses; calling it again for the token
        replaces the grants. Requests without a token stay unrestricted."""
        self._authorizer.add(token, user, allows)

    def kubeconfig(self, path: str | os.PathLike[str], namespace: str = "default", *, token: str | None = None) -> Path:
        """Write a kubeconfig file pointing at this server (with ``token``: as ``client``; with ``tls``, carrying
        the CA) and return its path."""
        cluster = {"server": self.url}
        if self.ca_data is not None:
            cluster["certificate-authority-data"] = self.ca_data
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": cluster}],
            "users": [{"name": "fake", "user": {"token": token} if token else {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
            "current-context": "fake",
        }
        target = Path(path)
        target.write_text(yaml.safe_dump(config))
        return target

    # ----------------------------------------------------------------------------------- test helpers

    @property
    def resource_version(self) -> str:
        """The current (latest) resourceVersion."""
        return str(self._rv)

    def count(self, verb: str, kind: str | None = None) -> int:
        """Number of API requests with ``verb`` (and resource ``kind``, e.g. "resourceslices")."""
        with self._lock:
            if kind is None:
                return self.counts[verb]
            return self._verb_counts[(verb, kind)]

    def fail_next(self, verb: str, kind: str, status: int = 500, times: int = 1, *, message: str | None = None) -> None:
        """Answer the next ``times`` requests of ``verb`` on ``kind`` (plural, "*" for any) with ``status``.

        A ``watch`` failure with status 410 is sent like the real server does: an ERROR event on the stream.
        """
        if verb not in (*VERBS, "*"):
            raise ValueError(f"unknown verb {verb!r}")
        with self._lock:
            self._faults.append(_Fault(verb, kind, status, times, message))

    def delay_next(self, verb: str, kind: str, seconds: float, times: int = 1) -> None:
        """Answer the next ``times`` requests of ``verb`` on ``kind`` (plural, "*" for any) ``seconds`` late,
        as a real API server busy with a collection delete of thousands of objects does. The request is
        carried out after the pause, whether or not the client still waits for it (a real server goes on
        with a request whose client timed out)."""
        if verb not in (*VERBS, "*"):
            raise ValueError(f"unknown verb {verb!r}")
        if seconds <= 0 or times < 1:
            raise ValueError(f"a delay needs seconds > 0 and times >= 1, got {seconds} and {times}")
        with self._lock:
            self._delays.append(_Delay(verb, kind, seconds, times))

    def objects(self, kind_plural: str, namespace: str | None = None) -> list[JSON]:
        """Deep copies of the stored objects of a resource, sorted by namespace and name."""
        with self._lock:
            return [
                obj.full()
                for (_, ns, _), obj in sorted(self._by_plural[kind_plural].items())
                if namespace is None or ns == namespace
            ]

    def get_object(self, kind_plural: str, name: str, namespace: str | None = None) -> JSON | None:
        with self._lock:
            obj = self._objects.get((kind_plural, namespace or "", name))
            return obj.full() if obj is not None else None

    def owned_by(self, owner_uid: str) -> list[str]:
        """``plural/name`` of the stored objects with an owner reference to ``owner_uid`` (from the owner index
        that garbage collection uses)."""
        with self._lock:
            return sorted(f"{key[0]}/{key[2]}" for key in self._dependents.get(owner_uid, ()))

    def add_node(self, name: str, labels: Mapping[str, str] | None = None) -> str:
        """Create a Node object and return its uid."""
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {},
        }
        return str(self.create_direct(node)["metadata"]["uid"])

    def create_direct(self, obj: Mapping[str, Any], *, validate: bool = True) -> JSON:
        """Store an object behind the API's back (``status`` is kept); emits ADDED. Returns the stored copy."""
        new = copy.deepcopy(dict(obj))
        rtype = self._type_of(new)
        meta = new.setdefault("metadata", {})
        with self._lock:
            if not meta.get("name"):
                meta["name"] = self._generate_name(rtype, meta.get("namespace") or "", meta.get("generateName") or "")
            key = self._key(rtype, meta)
            if key in self._objects:
                raise ValueError(f"{rtype.plural} {key[1]}/{key[2]} already exists")
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
            if rtype.group in CUSTOM_GROUPS:  # a real server defaults what it reads from storage, too
                crd_schema.custom_schemas()[rtype.plural].normalize(new)
            if validate:
                self._raise_direct(rtype, new)
            return self._commit_put(rtype, key, new)

    def update_direct(self, obj: Mapping[str, Any], *, validate: bool = True) -> JSON:
        """Replace a stored object unconditionally (status included); emits MODIFIED."""
        new = copy.deepcopy(dict(obj))
        rtype = self._type_of(new)
        meta = new.setdefault("metadata", {})
        with self._lock:
            key = self._key(rtype, meta)
            stored = self._objects.get(key)
            if stored is None:
                raise KeyError(f"{rtype.plural} {key[1]}/{key[2]} not found")
            self._carry_server_metadata(new, stored.full())
            if validate:
                self._raise_direct(rtype, new)
            return self._commit_put(rtype, key, new)

    def delete_direct(
        self,
        kind_plural: str,
        name: str | None = None,
        *,
        namespace: str | None = None,
        field_selector: str = "",
        label_selector: str = "",
    ) -> list[JSON]:
        """Delete objects immediately behind the API's back (e.g. the kubelet wiping a node's slices).

        Finalizers are ignored; watchers get DELETED events; owned objects are garbage collected. With
        ``name`` unset every object matching the namespace and selectors is deleted. Returns the deleted objects.
        """
        rtype = _TYPES[kind_plural]
        fields = sel.parse_field_selector(field_selector, rtype.selectable_fields())
        labels = sel.parse_label_selector(label_selector)
        with self._lock:
            deleted = []
            for key, obj in sorted(self._by_plural[kind_plural].items()):
                if name is not None and key[2] != name:
                    continue
                if namespace is not None and key[1] != namespace:
                    continue
                if key not in self._objects or not self._selected(obj, fields, labels):
                    continue  # gone: collected as a dependent of an object deleted before it
                deleted.append(self._commit_delete(rtype, key, "Background").full())
            return deleted

    def close_watches(self) -> int:
        """End every open watch stream (as an API server restart would). Returns how many were open."""
        with self._lock:
            for watcher in self._watchers:
                watcher.events.put(None)
            return len(self._watchers)

    def compact(self) -> None:
        """Forget the event history: watches from an older resourceVersion get a 410 Expired ERROR event."""
        with self._lock:
            self._history.clear()
            self._history_floor = self._rv

    def counts_doc(self) -> JSON:
        """What ``GET /debug/fakegpu/counts`` answers: requests and bytes received per verb, so that a client
        in another process (a benchmark) can read them."""
        with self._lock:
            return {
                "calls": dict(self.counts),
                "bytes_received": dict(self.bytes_received),
                "discovery_requests": self.discovery_requests,
                "connections": self.connections_accepted,
                "objects": {plural: len(keys) for plural, keys in self._by_plural.items() if keys},
            }

    @property
    def open_watches(self) -> int:
        with self._lock:
            return len(self._watchers)

    # ------------------------------------------------------------------------------------- HTTP entry

    def handle_request(
        self, method: str, raw_path: str, headers: Mapping[str, str], body: bytes
    ) -> _Response | _WatchStream:
        """Serve one request (called from the HTTP handler threads); header names are lower case."""
        split = urlsplit(raw_path)
        if method == "GET" and split.path == COUNTS_PATH:
            return _Response(200, self.counts_doc())
        # The request's size on the wire: request line, header lines, blank line, body.
        size = len(f"{method} {raw_path} HTTP/1.1\r\n") + sum(len(k) + len(v) + 4 for k, v in headers.items())
        size += 2 + len(body)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        restricted = self._authorizer.user(headers.get("authorization"))
        user = restricted[0] if restricted else None
        self.requests.append(RequestRecord(method, split.path, query, headers.get("accept", ""), user))
        route: _Route | None = None
        injected = False
        try:
            routed = self._route(method, split.path, query)
            if isinstance(routed, _Response):
                with self._lock:
                    self.discovery_requests += 1
                    self.bytes_received["discovery"] += size
                return routed
            route = routed
            if restricted is not None:
                self._authorize(route, *restricted)
            with self._lock:
                self.counts[route.verb] += 1
                self.bytes_received[route.verb] += size
                self.body_bytes[(route.verb, route.kind_key)] += len(body)
                self._verb_counts[(route.verb, route.kind_key)] += 1
                fault = self._take_fault(route.verb, route.kind_key)
                delay = self._take_delay(route.verb, route.kind_key)
            if delay and self._stopping.wait(delay):
                raise ApiFailure(503, "the fake API server is stopping")
            if fault is not None:
                injected = True
                message = fault.message or f"injected failure: {route.verb} {route.kind_key}"
                if route.verb == "watch" and fault.status == 410:
                    watcher = _Watcher(route.rtype, route.namespace, [], [])
                    watcher.events.put(_event_line("ERROR", ApiFailure(410, message).status()))
                    watcher.events.put(None)
                    return _WatchStream(watcher, None)
                raise ApiFailure(fault.status, message)
            return self._dispatch(route, query, headers, body)
        except ApiFailure as failure:
            write = route is not None and route.verb in ("create", "update", "patch")
            if route is not None and write and not injected and failure.code in (400, 415, 422):
                self.rejections.append(
                    Rejection(
                        route.verb,
                        route.kind_key,
                        route.name,
                        failure.code,
                        failure.reason,
                        failure.message,
                        body.decode(errors="replace"),
                    )
                )
            return _Response(failure.code, failure.status())
        except Exception as exc:
            self.errors.append(traceback.format_exc())
            return _Response(500, ApiFailure(500, f"fake apiserver internal error: {exc!r}").status())

    # --------------------------------------------------------------------------------------- routing

    def _discovery(self, segs: list[str]) -> _Response | None:
        if segs == ["version"]:
            return _Response(200, self._version_doc())
        if segs in (["healthz"], ["livez"], ["readyz"]):
            return _Response(200, "ok", "text/plain; charset=utf-8")
        if segs == ["api"]:
            return _Response(
                200,
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.port}"}
                    ],
                },
            )
        if segs == ["apis"]:
            groups = [self._group_doc()] if self.resource_api_versions else []
            if (NVIDIA_GROUP, NVIDIA_VERSION) in self._served:
                groups.append(self._nvidia_group_doc())
            if (NFD_GROUP, NFD_VERSION) in self._served:
                groups.append(self._single_version_group_doc(NFD_GROUP, NFD_VERSION))
            if (APIEXTENSIONS_GROUP, "v1") in self._served:
                groups.append(self._single_version_group_doc(APIEXTENSIONS_GROUP, "v1"))
            return _Response(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        if segs == ["apis", RESOURCE_GROUP] and self.resource_api_versions:
            return _Response(200, {"kind": "APIGroup", "apiVersion": "v1", **self._group_doc()})
        if segs == ["apis", NVIDIA_GROUP] and (NVIDIA_GROUP, NVIDIA_VERSION) in self._served:
            return _Response(200, {"kind": "APIGroup", "apiVersion": "v1", **self._nvidia_group_doc()})
        if segs == ["apis", NFD_GROUP] and (NFD_GROUP, NFD_VERSION) in self._served:
            return _Response(
                200, {"kind": "APIGroup", "apiVersion": "v1", **self._single_version_group_doc(NFD_GROUP, NFD_VERSION)}
            )
        if segs == ["apis", APIEXTENSIONS_GROUP] and (APIEXTENSIONS_GROUP, "v1") in self._served:
            doc = self._single_version_group_doc(APIEXTENSIONS_GROUP, "v1")
            return _Response(200, {"kind": "APIGroup", "apiVersion": "v1", **doc})
        if segs == ["api", "v1"]:
            return _Response(200, self._resource_list("", "v1"))
        if len(segs) == 3 and segs[0] == "apis" and (segs[1], segs[2]) in self._served:
            return _Response(200, self._resource_list(segs[1], segs[2]))
        return None

    def _version_doc(self) -> JSON:
        return {
            "major": "1",
            "minor": str(self.minor),
            "emulationMajor": "1",
            "emulationMinor": str(self.minor),
            "minCompatibilityMajor": "1",
            "minCompatibilityMinor": str(self.minor - 1),
            "gitVersion": self.git_version,
            "gitCommit": "0" * 40,
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.25.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    def _group_doc(self) -> JSON:
        versions = [{"groupVersion": f"{RESOURCE_GROUP}/{v}", "version": v} for v in self.resource_api_versions]
        return {"name": RESOURCE_GROUP, "versions": versions, "preferredVersion": versions[0]}

    @classmethod
    def _nvidia_group_doc(cls) -> JSON:
        return cls._single_version_group_doc(NVIDIA_GROUP, NVIDIA_VERSION)

    @staticmethod
    def _single_version_group_doc(group: str, version: str) -> JSON:
        served = {"groupVersion": f"{group}/{version}", "version": version}
        return {"name": group, "versions": [served], "preferredVersion": served}

    def _resource_list(self, group: str, version: str) -> JSON:
        resources: list[JSON] = []
        for rtype in sorted(self._served[(group, version)].values(), key=lambda t: t.plural):
            resources.append(
                {
                    "name": rtype.plural,
                    "singularName": rtype.kind.lower(),
                    "namespaced": rtype.namespaced,
                    "kind": rtype.kind,
                    "verbs": list(VERBS),
                    **({"shortNames": list(rtype.short_names)} if rtype.short_names else {}),
                }
            )
            if rtype.has_status:
                resources.append(
                    {
                        "name": f"{rtype.plural}/status",
                        "singularName": "",
                        "namespaced": rtype.namespaced,
                        "kind": rtype.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
        group_version = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}

    def _route(self, method: str, path: str, query: Mapping[str, str]) -> _Route | _Response:
        segs = [s for s in path.split("/") if s]
        if method == "GET" and (doc := self._discovery(segs)) is not None:
            return doc
        not_found = ApiFailure(404, "the server could not find the requested resource", details={})
        if segs[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", segs[2:]
        elif len(segs) >= 3 and segs[0] == "apis":
            group, version, rest = segs[1], segs[2], segs[3:]
        else:
            raise not_found
        types = self._served.get((group, version))
        if types is None or not rest:
            raise not_found
        watch_path = rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
        namespace = None
        # /namespaces/<ns>/<plural>... is a namespaced path; /namespaces[/<name>[/status]] the Namespaces themselves
        if rest and rest[0] == "namespaces" and ((len(rest) >= 3 and rest[2] in types) or "namespaces" not in types):
            if len(rest) < 3:
                raise not_found
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3 or rest[0] not in types:
            raise not_found
        rtype = types[rest[0]]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if (sub is not None and (sub != "status" or not rtype.has_status or watch_path)) or (
            namespace is not None and not rtype.namespaced
        ):
            raise not_found
        watch = watch_path or query.get("watch", "").lower() in ("true", "1")
        verb = self._verb(method, name, sub, watch)
        if rtype.namespaced and namespace is None and verb not in ("list", "watch"):
            raise not_found
        group_version = f"{group}/{version}" if group else version
        return _Route(rtype, group_version, namespace, name, sub, verb)

    @staticmethod
    def _verb(method: str, name: str | None, sub: str | None, watch: bool) -> str:
        verb: str | None = None
        if method == "GET":
            verb = "watch" if watch else ("get" if name else "list")
            if sub is not None and verb != "get":
                verb = None
        elif method == "POST":
            verb = "create" if name is None else None
        elif method == "PUT":
            verb = "update" if name else None
        elif method == "PATCH":
            verb = "patch" if name else None
        elif method == "DELETE":
            verb = ("delete" if name else "deletecollection") if sub is None else None
        if verb is None:
            raise ApiFailure(405, "the server does not allow this method on the requested resource")
        return verb

    def _authorize(self, route: _Route, user: str, allows: Allows) -> None:
        group = route.group_version.rpartition("/")[0]
        request = Attributes(user, route.verb, group, route.kind_key, route.namespace, route.name)
        if allows(request):
            return
        message = forbidden_message(request)
        with self._lock:
            self.forbidden.append(message)
        details: JSON = {"group": group, "kind": route.rtype.plural}
        if route.name:
            details["name"] = route.name
        raise ApiFailure(403, message, details=details)

    def _take_fault(self, verb: str, kind: str) -> _Fault | None:
        for fault in self._faults:
            if fault.verb in (verb, "*") and fault.kind in (kind, "*", kind.split("/", maxsplit=1)[0]):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    def _take_delay(self, verb: str, kind: str) -> float:
        for delay in self._delays:
            if delay.verb in (verb, "*") and delay.kind in (kind, "*", kind.split("/", maxsplit=1)[0]):
                delay.remaining -= 1
                if delay.remaining <= 0:
                    self._delays.remove(delay)
                return delay.seconds
        return 0.0

    def _dispatch(
        self, route: _Route, query: Mapping[str, str], headers: Mapping[str, str], body: bytes
    ) -> _Response | _WatchStream:
        dry_run = bool(query.get("dryRun"))
        if route.verb == "get":
            with self._lock:  # a concurrent delete stamps the object it removes
                return _Response(200, self._existing(route)[1].object_bytes())
        if route.verb == "list":
            return self._list(route, query)
        if route.verb == "watch":
            return self._watch(route, query)
        if route.verb in ("create", "update", "patch"):
            if route.verb == "create":
                written = self._create(route, self._parse_body(headers, body), dry_run)
            elif route.verb == "update":
                written = self._update(route, self._parse_body(headers, body), dry_run)
            else:
                written = self._patch(route, query, headers, body, dry_run)
            return _as_partial_metadata(written) if _wants_partial_metadata(headers) else written
        if route.verb == "delete":
            return self._delete(route, query, body, dry_run)
        return self._delete_collection(route, query, body, dry_run)

    # ------------------------------------------------------------------------------------- read verbs

    def _existing(self, route: _Route) -> tuple[tuple[str, str, str], StoredObject]:
        assert route.name is not None
        key = (route.rtype.plural, route.namespace or "", route.name)
        obj = self._objects.get(key)
        if obj is None:
            raise ApiFailure(
                404,
                f'{route.rtype.group_resource} "{route.name}" not found',
                details={"name": route.name, "group": route.rtype.group, "kind": route.rtype.plural},
            )
        return key, obj

    def _selectors(
        self, route: _Route, query: Mapping[str, str]
    ) -> tuple[list[sel.Requirement], list[sel.Requirement]]:
        try:
            fields = sel.parse_field_selector(query.get("fieldSelector", ""), route.rtype.selectable_fields())
            labels = sel.parse_label_selector(query.get("labelSelector", ""))
        except sel.SelectorError as exc:
            raise ApiFailure(400, str(exc)) from exc
        if route.name is not None:  # /watch/<plural>/<name>
            fields.append(sel.Requirement("metadata.name", "=", (route.name,)))
        return fields, labels

    @staticmethod
    def _selected(obj: StoredObject, fields: list[sel.Requirement], labels: list[sel.Requirement]) -> bool:
        return sel.fields_match(fields, obj.fields) and sel.labels_match(labels, obj.labels)

    def _matching(self, route: _Route, query: Mapping[str, str]) -> Iterator[tuple[tuple[str, str, str], StoredObject]]:
        fields, labels = self._selectors(route, query)
        for key, obj in sorted(self._by_plural[route.rtype.plural].items()):
            if route.namespace is not None and key[1] != route.namespace:
                continue
            if self._selected(obj, fields, labels):
                yield key, obj

    def _list_doc(self, route: _Route, items: list[StoredObject], extra_meta: JSON | None = None) -> bytes:
        head = {
            "kind": f"{route.rtype.kind}List",
            "apiVersion": route.group_version,
            "metadata": {"resourceVersion": str(self._rv), **(extra_meta or {})},
        }
        return json.dumps(head).encode()[:-1] + b', "items": [' + b",".join(i.item_bytes() for i in items) + b"]}"

    def _list(self, route: _Route, query: Mapping[str, str]) -> _Response:
        """A list, paged with ``limit``/``continue`` in (namespace, name) order. As on a real API server,
        ``remainingItemCount`` is only given when no selector was used (else the count is unknown)."""
        fields, labels = self._selectors(route, query)
        limit = int(_number(query, "limit"))
        token = query.get("continue", "")
        plural = route.rtype.plural
        with self._lock:
            store = self._by_plural[plural]
            keys = sorted(store)
            if token:
                try:
                    start = json.loads(token)
                except ValueError:
                    start = None
                if not (isinstance(start, list) and len(start) == 2 and all(isinstance(p, str) for p in start)):
                    raise ApiFailure(400, f"invalid continue token {token!r}")
                keys = keys[bisect.bisect_right(keys, (plural, start[0], start[1])) :]
            items: list[StoredObject] = []
            extra: JSON = {}
            last_key = ("", "", "")
            for index, key in enumerate(keys):
                if route.namespace is not None and key[1] != route.namespace:
                    continue
                obj = store[key]
                if not self._selected(obj, fields, labels):
                    continue
                if 0 < limit == len(items):  # one more matches: the page is full
                    extra = {"continue": json.dumps(list(last_key[1:]))}
                    if not fields and not labels:
                        rest = keys[index:]
                        extra["remainingItemCount"] = sum(
                            1 for k in rest if route.namespace is None or k[1] == route.namespace
                        )
                    break
                items.append(obj)
                last_key = key
            return _Response(200, self._list_doc(route, items, extra))

    def _watch(self, route: _Route, query: Mapping[str, str]) -> _WatchStream:
        fields, labels = self._selectors(route, query)
        watcher = _Watcher(route.rtype, route.namespace, fields, labels)
        rv_param = query.get("resourceVersion", "")
        deadline = time.monotonic() + _number(query, "timeoutSeconds") if query.get("timeoutSeconds") else None
        with self._lock:
            if rv_param in ("", "0") or query.get("sendInitialEvents") == "true":
                for _, obj in sorted(self._by_plural[route.rtype.plural].items()):
                    if watcher.matches(obj):
                        watcher.events.put(_stored_event_line("ADDED", obj))
                if query.get("sendInitialEvents") == "true":
                    # WatchList (what kubectl wait and client-go reflectors use): the end of the initial
                    # events is a BOOKMARK annotated k8s.io/initial-events-end, at the current version.
                    watcher.events.put(_event_line("BOOKMARK", self._initial_events_end(route)))
            else:
                try:
                    since = int(rv_param)
                except ValueError as exc:
                    raise ApiFailure(400, f"invalid resource version: {rv_param!r}") from exc
                if since < self._history_floor:
                    expired = ApiFailure(410, f"too old resource version: {since} ({self._history_floor})")
                    watcher.events.put(_event_line("ERROR", expired.status()))
                    watcher.events.put(None)
                    return _WatchStream(watcher, deadline)
                for event in self._history:
                    if event.rv > since:
                        watcher.deliver(event)
            self._watchers.append(watcher)
        return _WatchStream(watcher, deadline)

    def _initial_events_end(self, route: _Route) -> JSON:
        return {
            "kind": route.rtype.kind,
            "apiVersion": route.group_version,
            "metadata": {
                "resourceVersion": str(self._rv),
                "annotations": {"k8s.io/initial-events-end": "true"},
            },
        }

    def _remove_watcher(self, watcher: _Watcher) -> None:
        with self._lock:
            if watcher in self._watchers:
                self._watchers.remove(watcher)

    # ------------------------------------------------------------------------------------ write verbs

    @staticmethod
    def _parse_body(headers: Mapping[str, str], body: bytes, content_type: str | None = None) -> Any:
        ctype = content_type or headers.get("content-type", "application/json").split(";")[0].strip().lower()
        try:
            if "yaml" in ctype:
                return yaml.safe_load(body.decode())
            return json.loads(body.decode() or "null")
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiFailure(400, f"the body of the request could not be decoded: {exc}") from exc

    def _check_type(self, route: _Route, obj: Any, *, require_type: bool = False) -> JSON:
        if not isinstance(obj, dict):
            raise ApiFailure(400, f"the body of the request must be a {route.rtype.kind} object")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if require_type and (not api_version or not kind):
            raise ApiFailure(400, "apiVersion and kind must be set in an applied object")
        if api_version and api_version != route.group_version:
            raise ApiFailure(
                400,
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({route.group_version})",
            )
        if kind and kind != route.rtype.kind:
            raise ApiFailure(
                400, f"the kind in the data ({kind}) does not match the expected kind ({route.rtype.kind})"
            )
        obj["apiVersion"], obj["kind"] = route.group_version, route.rtype.kind
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiFailure(400, "metadata must be an object")
        if route.rtype.namespaced:
            if meta.get("namespace") and meta["namespace"] != route.namespace:
                raise ApiFailure(
                    400, "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = route.namespace
        else:
            meta.pop("namespace", None)
        return obj

    def _check_name(self, route: _Route, obj: JSON) -> None:
        name = obj["metadata"].get("name")
        if name != route.name:
            raise ApiFailure(400, f"the name of the object ({name}) does not match the name on the URL ({route.name})")

    def _create(self, route: _Route, body: Any, dry_run: bool) -> _Response:
        obj = self._check_type(route, body)
        return _Response(201, self._create_locked(route, obj, dry_run))

    def _create_locked(self, route: _Route, obj: JSON, dry_run: bool) -> JSON:
        rtype, meta = route.rtype, obj["metadata"]
        if meta.get("resourceVersion"):
            raise ApiFailure(500, "resourceVersion should not be set on objects to be created")
        for field_name in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
        ):
            meta.pop(field_name, None)
        if rtype is RESOURCE_CLAIMS or (rtype.group == NVIDIA_GROUP and rtype.has_status):
            obj.pop("status", None)  # status can only be written through /status
        if rtype.group in CUSTOM_GROUPS:
            crd_schema.custom_schemas()[rtype.plural].normalize(obj)
        if rtype is NAMESPACES:
            obj.setdefault("spec", {})["finalizers"] = [NAMESPACE_FINALIZER]
            obj["status"] = {"phase": "Active"}
        with self._lock:
            self._refuse_create_while_terminating(rtype, obj)
            if not meta.get("name"):
                if not meta.get("generateName"):
                    raise self._invalid(
                        rtype,
                        obj,
                        [val.FieldError("metadata.name", "Required value", None, "name or generateName is required")],
                    )
                meta["name"] = self._generate_name(rtype, meta.get("namespace") or "", meta["generateName"])
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
            if rtype is RESOURCE_SLICES:
                val.drop_disabled_slice_fields(obj, None, _version_of(obj["apiVersion"]), self.feature_gates)
                if self.stamp_taint_times:
                    _default_taint_times(obj)
            errors = self._validation_errors(rtype, obj)
            if errors:
                raise self._invalid(rtype, obj, errors)
            key = self._key(rtype, meta)
            if key in self._objects:
                raise ApiFailure(
                    409,
                    f'{rtype.group_resource} "{meta["name"]}" already exists',
                    reason="AlreadyExists",
                    details={"name": meta["name"], "group": rtype.group, "kind": rtype.plural},
                )
            if dry_run:
                return obj
            return self._commit_put(rtype, key, obj)

    def _update(self, route: _Route, body: Any, dry_run: bool) -> _Response:
        obj = self._check_type(route, body)
        self._check_name(route, obj)
        with self._lock:
            key, stored = self._existing(route)
            old = stored.full()
            rv = obj["metadata"].get("resourceVersion")
            if not rv and not self.allow_unconditional_update:
                raise self._invalid(
                    route.rtype,
                    obj,
                    [val.FieldError("metadata.resourceVersion", "Invalid value", 0, "must be specified for an update")],
                )
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise self._conflict(route)
            return _Response(200, self._update_locked(route, key, old, obj, dry_run))

    def _patch(
        self, route: _Route, query: Mapping[str, str], headers: Mapping[str, str], body: bytes, dry_run: bool
    ) -> _Response:
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype not in (MERGE_PATCH, JSON_PATCH, APPLY_PATCH):
            raise ApiFailure(
                415,
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}",
            )
        patch = self._parse_body(headers, body, ctype)
        if ctype == APPLY_PATCH:
            if not query.get("fieldManager"):
                raise ApiFailure(400, "PATCH requests with apply-patch content type require fieldManager")
            patch = self._check_type(route, patch, require_type=True)
            self._check_name(route, patch)
        elif ctype == MERGE_PATCH and not isinstance(patch, dict):
            raise ApiFailure(400, "a merge patch must be a JSON object")
        with self._lock:
            key = (route.rtype.plural, route.namespace or "", route.name or "")
            if key not in self._objects and ctype == APPLY_PATCH and route.subresource is None:
                patch["metadata"].pop("resourceVersion", None)
                return _Response(201, self._create_locked(route, patch, dry_run))
            key, stored = self._existing(route)
            old = stored.full()
            if ctype == JSON_PATCH:
                new = json_patch(old, patch)
            else:
                rv = (patch.get("metadata") or {}).get("resourceVersion")
                if rv and rv != old["metadata"]["resourceVersion"]:
                    raise self._conflict(route)
                if ctype == APPLY_PATCH:
                    patch["apiVersion"] = old["apiVersion"]  # no conversion between versions
                new = _clone(merge_patch(old, patch))  # merge_patch shares untouched parts with old
            if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
                raise ApiFailure(422, "the patched object must be an object with metadata")
            if new["metadata"].get("resourceVersion") != old["metadata"]["resourceVersion"]:
                raise self._conflict(route)
            if new["metadata"].get("name") != route.name or new["metadata"].get("namespace") != old["metadata"].get(
                "namespace"
            ):
                raise ApiFailure(400, "metadata.name and metadata.namespace cannot be changed by a patch")
            return _Response(200, self._update_locked(route, key, old, new, dry_run))

    def _update_locked(self, route: _Route, key: tuple[str, str, str], old: JSON, new: JSON, dry_run: bool) -> JSON:
        rtype = route.rtype
        meta, old_meta = new["metadata"], old["metadata"]
        if meta.get("uid") and meta["uid"] != old_meta["uid"]:
            raise ApiFailure(
                409, f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {old_meta['uid']}"
            )
        if route.subresource == "status":
            status = new.get("status")
            new = _clone(old)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        else:
            self._carry_server_metadata(new, old)
            if rtype.has_status:
                if "status" in old:
                    new["status"] = _clone(old["status"])
                else:
                    new.pop("status", None)
            if rtype is RESOURCE_SLICES:
                val.drop_disabled_slice_fields(new, old, _version_of(new["apiVersion"]), self.feature_gates)
                if self.stamp_taint_times:
                    _default_taint_times(new)
        errors = val.validate_immutable(rtype.plural, new, old)
        if rtype.group in CUSTOM_GROUPS:
            schema = crd_schema.custom_schemas()[rtype.plural]
            schema.normalize(new)
            errors += schema.transition_errors(new, old)
        added = set(new["metadata"].get("finalizers") or []) - set(old_meta.get("finalizers") or [])
        if old_meta.get("deletionTimestamp") and added:
            errors.append(
                val.FieldError(
                    "metadata.finalizers",
                    "Forbidden",
                    None,
                    "no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers {sorted(added)}",
                )
            )
        errors += self._validation_errors(rtype, new)
        if errors:
            raise self._invalid(rtype, new, errors)
        if new == old or dry_run:
            return new
        # A terminating Namespace waits on spec.finalizers and what it holds (_advance_terminations), not here.
        if old_meta.get("deletionTimestamp") and not new["metadata"].get("finalizers") and rtype is not NAMESPACES:
            return self._commit_delete(rtype, key, "Background", final=new).full()
        return self._commit_put(rtype, key, new)

    def _delete(self, route: _Route, query: Mapping[str, str], body: bytes, dry_run: bool) -> _Response:
        options = self._delete_options(body)
        preconditions = options.get("preconditions") or {}
        propagation = self._propagation(query, options)
        with self._lock:
            key, old = self._existing(route)
            meta = old.meta
            if preconditions.get("uid") and preconditions["uid"] != meta["uid"]:
                raise ApiFailure(
                    409,
                    f"Precondition failed: UID in precondition: {preconditions['uid']}, "
                    f"UID in object meta: {meta['uid']}",
                )
            rv = preconditions.get("resourceVersion")
            if rv and rv != meta["resourceVersion"]:
                raise ApiFailure(
                    409,
                    f"Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: "
                    f"{meta['resourceVersion']}",
                )
            if dry_run:
                return _Response(200, self._deleted_status(route.rtype, old))
            result, remains = self._delete_one(route.rtype, key, propagation)
            if remains:  # still there: waiting for finalizers
                return _Response(200, result.object_bytes())
            return _Response(200, self._deleted_status(route.rtype, old))

    def _delete_collection(self, route: _Route, query: Mapping[str, str], body: bytes, dry_run: bool) -> _Response:
        """Delete every object matching the selectors; answers the list of the deleted objects (as they were
        deleted, or marked for deletion when finalizers remain), as a real API server does."""
        propagation = self._propagation(query, self._delete_options(body))
        with self._lock:
            items = []
            for key, obj in list(self._matching(route, query)):
                if key not in self._objects:
                    continue  # collected as a dependent of an object deleted before it
                if dry_run:
                    items.append(obj)
                    continue
                items.append(self._delete_one(route.rtype, key, propagation)[0])
            return _Response(200, self._list_doc(route, items))

    @staticmethod
    def _delete_options(body: bytes) -> JSON:
        try:
            options = json.loads(body.decode()) if body.strip() else {}
        except ValueError as exc:
            raise ApiFailure(400, f"the body of the request could not be decoded: {exc}") from exc
        if not isinstance(options, dict):
            raise ApiFailure(400, "DeleteOptions must be an object")
        return options

    @staticmethod
    def _propagation(query: Mapping[str, str], options: Mapping[str, Any]) -> str:
        """The propagationPolicy of a delete (query parameter or DeleteOptions); Foreground is served like
        Background (dependents are collected before the answer either way), Orphan keeps them."""
        policy = query.get("propagationPolicy") or options.get("propagationPolicy") or "Background"
        if policy not in PROPAGATION_POLICIES:
            raise ApiFailure(
                422,
                f'propagationPolicy: Unsupported value: "{policy}": supported values: '
                + ", ".join(f'"{p}"' for p in PROPAGATION_POLICIES),
            )
        return str(policy)

    @staticmethod
    def _deleted_status(rtype: ResourceType, obj: StoredObject) -> JSON:
        meta = obj.meta
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": meta["name"], "group": rtype.group, "kind": rtype.plural, "uid": meta["uid"]},
        }

    # --------------------------------------------------------------------------------------- storage

    @staticmethod
    def _key(rtype: ResourceType, meta: Mapping[str, Any]) -> tuple[str, str, str]:
        return (rtype.plural, (meta.get("namespace") or "") if rtype.namespaced else "", meta.get("name") or "")

    def _type_of(self, obj: Mapping[str, Any]) -> ResourceType:
        api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        group, _, version = api_version.rpartition("/")
        for rtype in self._served.get((group, version), {}).values():
            if rtype.kind == kind:
                return rtype
        raise ValueError(f"{api_version} {kind} is not served by this FakeApiServer")

    def _generate_name(self, rtype: ResourceType, namespace: str, prefix: str) -> str:
        while True:
            suffix = "".join(self._random.choice(_NAME_ALPHABET) for _ in range(5))
            name = prefix[:_MAX_GENERATED_PREFIX] + suffix
            if (rtype.plural, namespace, name) not in self._objects:
                return name

    @staticmethod
    def _carry_server_metadata(new: JSON, old: JSON) -> None:
        meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
        for key in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        meta.pop("managedFields", None)
        spec_changed = new.get("spec") != old.get("spec")
        meta["generation"] = int(old_meta.get("generation") or 1) + (1 if spec_changed else 0)

    def _commit_put(self, rtype: ResourceType, key: tuple[str, str, str], obj: JSON) -> JSON:
        """Store ``obj`` as the new version of ``key`` (the store keeps its own copy); returns ``obj``."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        old = self._objects.get(key)
        if old is not None:
            self._unindex(key, old.meta)
        stored = StoredObject.of(obj, rtype.field_values(obj))
        self._objects[key] = stored
        self._by_plural[key[0]][key] = stored
        self._index(key, stored.meta)
        self._emit(rtype, "MODIFIED" if old is not None else "ADDED", stored, old)
        return obj

    def _index(self, key: tuple[str, str, str], meta: JSON) -> None:
        self._uid_keys[meta["uid"]] = key
        for ref in meta.get("ownerReferences") or []:
            if ref.get("uid"):
                self._dependents.setdefault(ref["uid"], set()).add(key)

    def _unindex(self, key: tuple[str, str, str], meta: JSON) -> None:
        if self._uid_keys.get(meta["uid"]) == key:
            del self._uid_keys[meta["uid"]]
        for ref in meta.get("ownerReferences") or []:
            dependents = self._dependents.get(ref.get("uid") or "")
            if dependents is not None:
                dependents.discard(key)
                if not dependents:
                    del self._dependents[ref["uid"]]

    def _delete_one(
        self, rtype: ResourceType, key: tuple[str, str, str], propagation: str
    ) -> tuple[StoredObject, bool]:
        """Delete, or only mark for deletion when finalizers remain; returns the object as deleted or marked
        and whether it remains."""
        stored = self._objects[key]
        if rtype in (NAMESPACES, CRDS):
            return self._begin_termination(rtype, key)
        if not stored.meta.get("finalizers"):
            return self._commit_delete(rtype, key, propagation), False
        if stored.meta.get("deletionTimestamp"):
            return stored, True
        marked = stored.full()
        marked["metadata"].update(deletionTimestamp=_now(), deletionGracePeriodSeconds=0)
        self._commit_put(rtype, key, marked)
        return self._objects[key], True

    def _commit_delete(
        self, rtype: ResourceType, key: tuple[str, str, str], propagation: str, final: JSON | None = None
    ) -> StoredObject:
        stored = self._objects.pop(key)
        del self._by_plural[key[0]][key]
        self._unindex(key, stored.meta)
        last = StoredObject.of(final, rtype.field_values(final)) if final is not None else stored
        self._rv += 1
        deleted = last.with_meta(resourceVersion=str(self._rv))
        self._emit(rtype, "DELETED", deleted, None)
        if propagation != "Orphan":
            self._collect_garbage(deleted.meta["uid"])
        self._advance_terminations()
        return deleted

    # ------------------------------------------------------------------ namespace and CRD termination

    def _refuse_create_while_terminating(self, rtype: ResourceType, obj: JSON) -> None:
        """What kube-apiserver's NamespaceLifecycle admission and apiextensions-apiserver answer."""
        meta = obj["metadata"]
        namespace = self._objects.get(("namespaces", "", meta.get("namespace") or "")) if rtype.namespaced else None
        if namespace is not None and namespace.meta.get("deletionTimestamp"):
            raise ApiFailure(
                403,
                f'{rtype.group_resource} "{meta.get("name") or meta.get("generateName")}" is forbidden: unable to '
                f"create new content in namespace {meta['namespace']} because it is being terminated",
            )
        crd = self._objects.get(("customresourcedefinitions", "", rtype.group_resource))
        if crd is not None and crd.meta.get("deletionTimestamp"):
            raise ApiFailure(405, f'create is not supported on resources of kind "{rtype.group_resource}"')

    def _begin_termination(self, rtype: ResourceType, key: tuple[str, str, str]) -> tuple[StoredObject, bool]:
        """Mark a Namespace or CRD for deletion (once) and delete what it holds; it goes once that is gone."""
        stored = self._objects[key]
        if not stored.meta.get("deletionTimestamp"):
            marked = stored.full()
            marked["metadata"].update(deletionTimestamp=_now(), deletionGracePeriodSeconds=0)
            if rtype is NAMESPACES:
                marked["status"] = {"phase": "Terminating"}
            else:
                marked["metadata"]["finalizers"] = [
                    *(marked["metadata"].get("finalizers") or []),
                    CRD_CLEANUP_FINALIZER,
                ]
                condition = {"type": "Terminating", "status": "True", "reason": "InstanceDeletionInProgress"}
                marked.setdefault("status", {})["conditions"] = [condition]
            self._commit_put(rtype, key, marked)
            self._terminating.add(key)
            self._advance_terminations()
        remaining = self._objects.get(key)
        return (remaining, True) if remaining is not None else (stored, False)

    def _held_by(self, key: tuple[str, str, str]) -> list[tuple[str, str, str]]:
        """The objects a terminating Namespace or CRD waits for."""
        if key[0] == NAMESPACES.plural:
            return [k for k in self._objects if k[1] == key[2] and _TYPES[k[0]].namespaced]
        spec = self._objects[key].full().get("spec") or {}
        plural, group = (spec.get("names") or {}).get("plural", ""), spec.get("group")
        if plural not in _TYPES or _TYPES[plural].group != group:
            return []
        return list(self._by_plural.get(plural, {}))

    def _advance_terminations(self) -> None:
        """The namespace controller's and the CRD finalizer's work, done whenever an object goes: delete what a
        terminating Namespace or CRD holds (objects with finalizers are only marked), and finish those that hold
        nothing any more (a finished CRD's kind is no longer served)."""
        if self._advancing or not self._terminating:
            return
        self._advancing = True
        try:
            progress = True
            while progress:
                progress = False
                for key in sorted(self._terminating):
                    held = self._held_by(key)
                    for dependent in held:
                        if dependent in self._objects:
                            self._delete_one(_TYPES[dependent[0]], dependent, "Background")
                    if any(dependent in self._objects for dependent in held):
                        continue
                    self._finish_termination(key)
                    progress = True
        finally:
            self._advancing = False

    def _finish_termination(self, key: tuple[str, str, str]) -> None:
        self._terminating.discard(key)
        final = self._objects[key].full()
        if key[0] == NAMESPACES.plural:
            final["spec"]["finalizers"] = []
            self._commit_delete(NAMESPACES, key, "Background", final=final)
            return
        final["metadata"]["finalizers"] = [f for f in final["metadata"]["finalizers"] if f != CRD_CLEANUP_FINALIZER]
        self._commit_delete(CRDS, key, "Background", final=final)
        plural = final["spec"]["names"]["plural"]
        for group_version, types in list(self._served.items()):
            if group_version[0] == final["spec"]["group"] and types.pop(plural, None) is not None and not types:
                del self._served[group_version]

    def _collect_garbage(self, owner_uid: str) -> None:
        """Delete the dependents of a deleted owner that have no live owner left: O(its dependents)."""
        owned = self._dependents.pop(owner_uid, None)
        for key in sorted(owned or ()):
            obj = self._objects.get(key)
            if obj is None:
                continue
            owners = {ref.get("uid") for ref in obj.meta.get("ownerReferences") or []}
            if not any(uid in self._uid_keys for uid in owners):
                self._delete_one(_TYPES[key[0]], key, "Background")

    def _emit(self, rtype: ResourceType, kind: str, obj: StoredObject, old: StoredObject | None) -> None:
        event = _Event(self._rv, rtype.plural, kind, obj, old)
        if len(self._history) == self._history.maxlen:
            self._history_floor = self._history[0].rv  # about to fall out: older watches get 410 Expired
        self._history.append(event)
        for watcher in self._watchers:
            watcher.deliver(event)

    # ------------------------------------------------------------------------------------- validation

    def _validation_errors(self, rtype: ResourceType, obj: JSON) -> list[val.FieldError]:
        version = _version_of(obj.get("apiVersion", ""))
        errors = val.validate_metadata(obj.get("metadata") or {}, rtype.namespaced)
        if rtype is RESOURCE_SLICES:
            errors += val.validate_resource_slice(obj, version, self.minor)
        elif rtype is DEVICE_CLASSES:
            errors += val.validate_device_class(obj)
        elif rtype is RESOURCE_CLAIMS:
            errors += val.validate_resource_claim(obj, version)
        elif rtype is NODES:
            errors += val.validate_node(obj)
        elif rtype is PODS:
            errors += validate_pod(obj)
        if rtype.group in CUSTOM_GROUPS:  # custom resources: their CRD's own schema, always (it is cheap)
            return errors + crd_schema.custom_schemas()[rtype.plural].errors(obj)
        if not self.validate_schema:
            return errors
        try:
            schema_cache.validate(obj, self._validate_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(val.FieldError(_json_path(list(exc.absolute_path)), "Schema", None, str(exc.message)))
        except kubernetes_validate.SchemaNotFoundError as exc:
            errors.append(val.FieldError("<root>", "Schema", None, str(exc.message)))
        return errors

    def _invalid(self, rtype: ResourceType, obj: Mapping[str, Any], errors: list[val.FieldError]) -> ApiFailure:
        name = (obj.get("metadata") or {}).get("name") or ""
        text = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(str(e) for e in errors) + "]"
        return ApiFailure(
            422,
            f'{rtype.qualified_kind} "{name}" is invalid: {text}',
            details={
                "name": name,
                "group": rtype.group,
                "kind": rtype.kind,
                "causes": [{"reason": e.reason, "message": str(e), "field": e.field} for e in errors],
            },
        )

    def _raise_direct(self, rtype: ResourceType, obj: JSON) -> None:
        errors = self._validation_errors(rtype, obj)
        if errors:
            raise ValueError(self._invalid(rtype, obj, errors).message)

    def _conflict(self, route: _Route) -> ApiFailure:
        return ApiFailure(
            409,
            f'Operation cannot be fulfilled on {route.rtype.group_resource} "{route.name}": the object has been '
            "modified; please apply your changes to the latest version and try again",
            reason="Conflict",
            details={"name": route.name, "group": route.rtype.group, "kind": route.rtype.plural},
        )
