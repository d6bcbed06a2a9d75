"""Applying a scripted fault inside a gRPC handler: stall, then fail with the chosen status."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from fakegpu.sharing.faults import FaultPlan


async def apply_fault(
    faults: FaultPlan, method: str, scope: str | None, context: grpc.aio.ServicerContext[Any, Any]
) -> None:
    """Consume the next fault for ``method`` (and this resource or driver), if one is planned."""
    fault = faults.take(method, scope)
    if fault is None:
        return
    spec = fault.spec
    if spec.delay:
        await asyncio.sleep(spec.delay)
    if spec.code is not None:
        await context.abort(getattr(grpc.StatusCode, spec.code), spec.status_message(method))
