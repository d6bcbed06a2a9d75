"""The DRAPlugin gRPC service in both versions the kubelet speaks (v1 first, v1beta1 for 1.32-1.33).

Every claim in a request gets an entry in the response, keyed by UID: a failure of one claim is its
``error`` text, never a gRPC error for the whole call (which would make the kubelet drop every
answer and retry them all).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import grpc

from dra.claim_devices import ClaimError, PreparedResult
from dra.claim_preparer import ClaimPreparer
from dra.prepared_claims import CheckpointCorrupted, ClaimRef
from kubeletapi.dra.v1 import api_pb2 as v1
from kubeletapi.dra.v1 import api_pb2_grpc as v1_grpc
from kubeletapi.dra.v1beta1 import api_pb2 as v1beta1
from kubeletapi.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from kubeletapi.injected_faults import apply_fault
from telemetry.rpc_metrics import observed_unary

log = logging.getLogger(__name__)

Outcome = tuple[tuple[PreparedResult, ...], str]


async def prepare_all(preparer: ClaimPreparer, claims: Sequence[ClaimRef]) -> dict[str, Outcome]:
    """Prepare claims concurrently (their API reads overlap, keeping well under the kubelet's 45 s);
    any failure of one claim becomes that claim's error text, never a failure of the whole call."""

    async def one(ref: ClaimRef) -> Outcome:
        try:
            results = await preparer.prepare(ref)
            preparer.metrics.prepared(ok=True)
            return results, ""
        except (ClaimError, CheckpointCorrupted, ValueError, OSError) as exc:
            message = str(exc)
        except Exception as exc:  # an API server hiccup or anything unforeseen: still one answer per claim
            log.exception("preparing claim %s/%s (%s) failed unexpectedly", ref.namespace, ref.name, ref.uid)
            message = f"preparing claim {ref.namespace}/{ref.name} failed: {type(exc).__name__}: {exc}"
        log.error("preparing claim %s/%s (%s) failed: %s", ref.namespace, ref.name, ref.uid, message)
        preparer.metrics.prepared(ok=False)
        return (), message

    outcomes = await asyncio.gather(*(one(ref) for ref in claims))
    return {ref.uid: outcome for ref, outcome in zip(claims, outcomes, strict=True)}


async def unprepare_all(preparer: ClaimPreparer, claims: Sequence[ClaimRef]) -> dict[str, str]:
    out: dict[str, str] = {}
    for ref in claims:
        try:
            await preparer.unprepare(ref)
            out[ref.uid] = ""
            preparer.metrics.unprepared(ok=True)
        except Exception as exc:
            preparer.metrics.unprepared(ok=False)
            log.error("unpreparing claim %s/%s (%s) failed: %s", ref.namespace, ref.name, ref.uid, exc)
            out[ref.uid] = f"unpreparing claim {ref.namespace}/{ref.name} failed: {exc}"
    return out


def _refs(claims: Sequence[v1.Claim] | Sequence[v1beta1.Claim]) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


class DraPluginV1(v1_grpc.DRAPluginServicer):
    def __init__(self, preparer: ClaimPreparer) -> None:
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
    def __init__(self, preparer: ClaimPreparer) -> None:
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
