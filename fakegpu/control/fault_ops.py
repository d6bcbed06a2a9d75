"""The fault ops both faces share: plan and clear scripted RPC faults, and show them in status.

Each face serves its own RPCs and so exports its own :class:`FaultableRpcs` (the device plugin its
v1beta1 ``DevicePlugin`` RPCs, the DRA driver ``NodePrepareResources``/``NodeUnprepareResources``); a fault
for an RPC the face does not serve is refused here, since it could never fire. The plan itself is pure
state in ``fakegpu.sharing.faults``, where both faces' servers read it; so is :class:`FaultSpec`, whose
fields the ``fault`` op takes after the RPC's name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fakegpu.control.protocol import AdminError, Op, takes_model
from fakegpu.sharing.faults import FaultPlan, FaultSpec


@dataclass(frozen=True)
class FaultableRpcs:
    """The RPCs one face serves, so the ones a fault can name there."""

    kind: str
    """The face's daemon kind, as its ``status`` op reports it (``device-plugin``, ``dra``)."""
    face: str
    """The face in a sentence: ``the device plugin``."""
    rpcs: tuple[str, ...]

    def check(self, method: str) -> None:
        """AdminError when this face does not serve ``method`` (a fault for it could never fire)."""
        if method not in self.rpcs:
            raise AdminError(
                f"this daemon does not serve {method!r}; faults can be injected into: {', '.join(self.rpcs)}"
            )


def fault_ops(plan: FaultPlan, faultable: FaultableRpcs, scopes: Callable[[], Sequence[str]]) -> dict[str, Op]:
    """The ``fault`` and ``clear-faults`` ops of a daemon serving ``faultable`` for the resources (or driver)
    ``scopes()`` names; both daemons use these."""

    @takes_model(FaultSpec, "spec")
    async def fault(method: str, spec: FaultSpec) -> dict[str, Any]:
        """Plan a fault for an RPC this daemon serves, scoped to one of its resources (or drivers)."""
        faultable.check(method)
        served = scopes()
        if spec.resource is not None and spec.resource not in served:
            raise AdminError(
                f"unknown resource {spec.resource!r}; this daemon serves: {', '.join(served) or 'nothing'}"
            )
        return plan.inject(method, spec).described("times")

    async def clear_faults(method: str | None = None) -> int:
        """Drop the planned faults (of one RPC, or all); how many were dropped."""
        if method is not None:
            faultable.check(method)
        return plan.clear(method)

    return {"fault": fault, "clear-faults": clear_faults}


def fault_status(plan: FaultPlan) -> dict[str, Any]:
    """Pending and fired faults, for status."""
    return {
        "pending": [f.described("remaining") for f in plan.faults],
        "fired": [{"method": m, "what": what} for m, what in plan.fired],
    }
