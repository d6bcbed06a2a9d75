"""The DRAPlugin gRPC service in both versions the kubelet speaks (v1 first, v1beta1 for 1.32-1.33).

Every claim in a request gets an entry in the response, keyed by UID: a failure of one claim is its
``error`` text, never a gRPC error for the whole call (which would make the kubelet drop every
answer and retry them all).

A claim whose namespace, name or UID no Kubernetes object can have (the kubelet never sends one) is
refused before the API server is asked: such a name would otherwise become a different request (an
empty name lists the namespace's claims) or an invalid URL, and an error text quotes at most
``SHOWN_LIMIT`` characters of it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import weakref
from collections.abc import Sequence
from typing import Protocol

import grpc

from fakegpu.control.injected_faults import apply_fault
from fakegpu.dra.claim_error import ClaimError
from fakegpu.dra.metrics import DraMetrics
from fakegpu.dra.prepare_plan import PreparedResult
from fakegpu.dra.prepared_claims import CheckpointCorrupted, ClaimRef
from fakegpu.kubeletapi.dra.v1 import api_pb2 as v1
from fakegpu.kubeletapi.dra.v1 import api_pb2_grpc as v1_grpc
from fakegpu.kubeletapi.dra.v1beta1 import api_pb2 as v1beta1
from fakegpu.kubeletapi.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from fakegpu.sharing.label_syntax import DNS1123_LABEL, DNS1123_SUBDOMAIN
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.rpc_metrics import observed_unary

log = logging.getLogger(__name__)

Outcome = tuple[tuple[PreparedResult, ...], str]


class Preparer(Protocol):
    """What the service needs of a driver's preparer: the GPU driver's (``fakegpu.dra.gpu_prepare``) or the
    compute-domain driver's (``fakegpu.dra.compute_domain.domain_prepare``)."""

    driver: str
    metrics: DraMetrics
    live: LiveInventory

    async def prepare(self, ref: ClaimRef) -> tuple[PreparedResult, ...]: ...

    async def unprepare(self, ref: ClaimRef) -> None: ...


_UID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
MAX_NAMESPACE = 63
MAX_NAME = 253
MAX_UID = 128
"""Kubernetes UIDs are 36-character UUIDs; the UID also names the claim's CDI spec file."""
SHOWN_LIMIT = 80


def _shown(value: str) -> str:
    """A value as error texts and logs quote it: in quotes, cut after ``SHOWN_LIMIT`` characters."""
    if len(value) <= SHOWN_LIMIT:
        return repr(value)
    return f"{value[:SHOWN_LIMIT]!r}... ({len(value)} characters)"


def _part(value: str) -> str:
    return value if len(value) <= SHOWN_LIMIT and value.isprintable() else _shown(value)


def _claim(ref: ClaimRef) -> str:
    """``namespace/name (uid)`` for logs, each part quoted and cut if it is absurdly long."""
    return f"{_part(ref.namespace)}/{_part(ref.name)} ({_part(ref.uid)})"


def uid_problem(uid: str) -> str | None:
    """Why no Kubernetes object can have this UID (it also names the CDI spec file); None if one can."""
    if len(uid) > MAX_UID or not _UID.fullmatch(uid) or ".." in uid:
        return (
            f"invalid claim UID {_shown(uid)}: expected at most {MAX_UID} letters, digits, '-', '_' and '.' "
            "(a Kubernetes UID)"
        )
    return None


def claim_ref_problem(ref: ClaimRef) -> str | None:
    """Why no ResourceClaim can have this namespace, name or UID; None if one can."""
    if len(ref.namespace) > MAX_NAMESPACE or not DNS1123_LABEL.fullmatch(ref.namespace):
        return (
            f"invalid claim namespace {_shown(ref.namespace)}: expected a DNS label "
            f"(at most {MAX_NAMESPACE} lowercase letters, digits and '-')"
        )
    if len(ref.name) > MAX_NAME or not DNS1123_SUBDOMAIN.fullmatch(ref.name):
        return (
            f"invalid claim name {_shown(ref.name)}: expected a DNS subdomain "
            f"(at most {MAX_NAME} lowercase letters, digits, '-' and '.')"
        )
    return uid_problem(ref.uid)


MAX_CONCURRENT_PREPARES = 32
"""Claim preparations in flight per driver, across all calls. Each reads its claim from the API server,
and the HTTP client gives up on a request that waits over 10 s for one of its 100 connections
(``PoolTimeout``): thousands of claims at once used to fail that way. Beyond this many, claims wait
here, with no deadline but the kubelet's."""

_slots: weakref.WeakKeyDictionary[Preparer, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _prepare_slots(preparer: Preparer) -> asyncio.Semaphore:
    slots = _slots.get(preparer)
    if slots is None:
        slots = _slots[preparer] = asyncio.Semaphore(MAX_CONCURRENT_PREPARES)
    return slots


async def prepare_all(preparer: Preparer, claims: Sequence[ClaimRef]) -> dict[str, Outcome]:
    """Prepare claims concurrently (their API reads overlap, keeping well under the kubelet's 45 s;
    at most ``MAX_CONCURRENT_PREPARES`` at a time); any failure of one claim becomes that claim's error
    text, never a failure of the whole call. Answers are keyed by UID, so of two claims sharing one UID
    the later in the request wins."""
    slots = _prepare_slots(preparer)

    async def one(ref: ClaimRef) -> Outcome:
        problem = claim_ref_problem(ref)
        if problem is not None:
            log.error("refusing to prepare claim %s: %s", _claim(ref), problem)
            preparer.metrics.prepared(ok=False)
            return (), problem
        try:
            async with slots:
                results = await preparer.prepare(ref)
            preparer.metrics.prepared(ok=True)
            # One served call for each GPU the claim uses: an armed GPU fault (after_calls) counts it down.
            preparer.live.note_call({r.uuid for r in results})
            return results, ""
        except (ClaimError, CheckpointCorrupted, ValueError, OSError) as exc:
            message = str(exc)
        except Exception as exc:  # an API server hiccup or anything unforeseen: still one answer per claim
            log.exception("preparing claim %s failed unexpectedly", _claim(ref))
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            message = f"preparing claim {ref.namespace}/{ref.name} failed: {detail}"
        log.error("preparing claim %s failed: %s", _claim(ref), message)
        preparer.metrics.prepared(ok=False)
        return (), message

    distinct = list(dict.fromkeys(claims))  # a claim listed twice is prepared (and read) once
    outcomes = dict(zip(distinct, await asyncio.gather(*(one(ref) for ref in distinct)), strict=True))
    return {ref.uid: outcomes[ref] for ref in claims}


async def unprepare_all(preparer: Preparer, claims: Sequence[ClaimRef]) -> dict[str, str]:
    """Unprepare claims one by one; only the UID matters (the claim may be gone from the API server)."""
    out: dict[str, str] = {}
    for ref in claims:
        problem = uid_problem(ref.uid)
        if problem is not None:
            preparer.metrics.unprepared(ok=False)
            log.error("refusing to unprepare claim %s: %s", _claim(ref), problem)
            out[ref.uid] = problem
            continue
        try:
            await preparer.unprepare(ref)
            out[ref.uid] = ""
            preparer.metrics.unprepared(ok=True)
        except Exception as exc:
            preparer.metrics.unprepared(ok=False)
            log.error("unpreparing claim %s failed: %s", _claim(ref), exc)
            out[ref.uid] = f"unpreparing claim {_part(ref.namespace)}/{_part(ref.name)} failed: {exc}"
    return out


def _refs(claims: Sequence[v1.Claim] | Sequence[v1beta1.Claim]) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


class DraPluginV1(v1_grpc.DRAPluginServicer):
    def __init__(self, preparer: Preparer) -> None:
        self.preparer = preparer
        self.rpc_observer = preparer.metrics.rpc.observer(preparer.driver)

    @observed_unary
    async def NodePrepareResources(
        self,
        request: v1.NodePrepareResourcesRequest,
        context: grpc.aio.ServicerContext[v1.NodePrepareResourcesRequest, v1.NodePrepareResourcesResponse],
    ) -> v1.NodePrepareResourcesResponse:
        await apply_fault(self.preparer.live.faults, "NodePrepareResources", self.preparer.driver, context)
        response = v1.NodePrepareResourcesResponse()
        for uid, (results, error) in (await prepare_all(self.preparer, _refs(request.claims))).items():
            entry = response.claims[uid]
            entry.error = error
            for r in results:
                device = entry.devices.add(
                    request_names=[r.request_name], pool_name=r.pool, device_name=r.device, cdi_device_ids=r.cdi_ids
                )
                if r.share_id:
                    device.share_id = r.share_id
        return response

    @observed_unary
    async def NodeUnprepareResources(
        self,
        request: v1.NodeUnprepareResourcesRequest,
        context: grpc.aio.ServicerContext[v1.NodeUnprepareResourcesRequest, v1.NodeUnprepareResourcesResponse],
    ) -> v1.NodeUnprepareResourcesResponse:
        await apply_fault(self.preparer.live.faults, "NodeUnprepareResources", self.preparer.driver, context)
        response = v1.NodeUnprepareResourcesResponse()
        for uid, error in (await unprepare_all(self.preparer, _refs(request.claims))).items():
            response.claims[uid].error = error
        return response


class DraPluginV1beta1(v1beta1_grpc.DRAPluginServicer):
    def __init__(self, preparer: Preparer) -> None:
        self.preparer = preparer
        self.rpc_observer = preparer.metrics.rpc.observer(preparer.driver)

    @observed_unary
    async def NodePrepareResources(
        self,
        request: v1beta1.NodePrepareResourcesRequest,
        context: grpc.aio.ServicerContext[v1beta1.NodePrepareResourcesRequest, v1beta1.NodePrepareResourcesResponse],
    ) -> v1beta1.NodePrepareResourcesResponse:
        await apply_fault(self.preparer.live.faults, "NodePrepareResources", self.preparer.driver, context)
        response = v1beta1.NodePrepareResourcesResponse()
        for uid, (results, error) in (await prepare_all(self.preparer, _refs(request.claims))).items():
            entry = response.claims[uid]
            entry.error = error
            for r in results:
                entry.devices.add(
                    request_names=[r.request_name], pool_name=r.pool, device_name=r.device, cdi_device_ids=r.cdi_ids
                )
        return response

    @observed_unary
    async def NodeUnprepareResources(
        self,
        request: v1beta1.NodeUnprepareResourcesRequest,
        context: grpc.aio.ServicerContext[
            v1beta1.NodeUnprepareResourcesRequest, v1beta1.NodeUnprepareResourcesResponse
        ],
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        await apply_fault(self.preparer.live.faults, "NodeUnprepareResources", self.preparer.driver, context)
        response = v1beta1.NodeUnprepareResourcesResponse()
        for uid, error in (await unprepare_all(self.preparer, _refs(request.claims))).items():
            response.claims[uid].error = error
        return response
