"""A ResourceClaim's device requests as the allocator reads them: one shape for ``exactly`` and each
``firstAvailable`` subrequest (resource.k8s.io v1 and v1beta2), and for v1beta1's flat requests.

Follows kubernetes ``staging/src/k8s.io/api/resource/v1/types.go`` (v1.36): ``allocationMode`` is
``ExactCount`` (``count``, default 1) or ``All``; a subrequest's results are named ``<request>/<subrequest>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, eq=False)
class Want:
    """One way to satisfy a request: a class, selectors and how many devices (equal only to itself)."""

    name: str
    """The name results carry: the request's, or ``<request>/<subrequest>``."""
    device_class: str
    selectors: tuple[str, ...]
    all_devices: bool
    count: int
    tolerations: tuple[Mapping[str, Any], ...] = ()
    capacity: Mapping[str, Any] | None = None
    """``capacity.requests``: amounts of the device's consumable capacity (KEP-5075)."""
    admin_access: bool = False


@dataclass(frozen=True)
class Request:
    name: str
    alternatives: tuple[Want, ...]
    """One for ``exactly``; the ``firstAvailable`` subrequests in order of preference."""


def _want(name: str, spec: Mapping[str, Any]) -> Want:
    mode = spec.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise ValueError(f"request {name}: allocationMode must be ExactCount or All, found {mode!r}")
    count = spec.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"request {name}: count must be a positive integer, found {count!r}")
    selectors = tuple(
        str((s.get("cel") or {}).get("expression", "")) for s in spec.get("selectors") or [] if s.get("cel")
    )
    capacity = (spec.get("capacity") or {}).get("requests")
    return Want(
        name,
        str(spec.get("deviceClassName") or ""),
        selectors,
        mode == "All",
        count,
        tuple(spec.get("tolerations") or ()),
        dict(capacity) if capacity else None,
        bool(spec.get("adminAccess")),
    )


def claim_requests(claim: Mapping[str, Any]) -> list[Request]:
    """The claim's requests in order; ValueError naming the request when one has neither form."""
    out = []
    for raw in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        name = str(raw.get("name", ""))
        if raw.get("exactly"):
            out.append(Request(name, (_want(name, raw["exactly"]),)))
        elif raw.get("firstAvailable"):
            subs = tuple(_want(f"{name}/{s.get('name', '')}", s) for s in raw["firstAvailable"])
            out.append(Request(name, subs))
        elif raw.get("deviceClassName"):  # resource.k8s.io/v1beta1
            out.append(Request(name, (_want(name, raw),)))
        else:
            raise ValueError(f"request {name}: neither exactly nor firstAvailable")
    return out
