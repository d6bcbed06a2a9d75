"""The core/v1 Events the compute-domain controller records on a ComputeDomain, so ``kubectl describe
computedomain`` shows when it became Ready or NotReady (and on which nodes), or why it cannot be set up."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from fakegpu.dra.compute_domain.resources import API_VERSION

COMPONENT = "compute-domain-controller"
READY_REASON = "ComputeDomainReady"
NOT_READY_REASON = "ComputeDomainNotReady"
COLLISION_REASON = "ResourceClaimTemplateExists"


def domain_event(domain: dict[str, Any], reason: str, message: str, *, warning: bool = False) -> dict[str, Any]:
    """An Event about ``domain`` in its namespace, named as client-go's recorder names them."""
    meta = domain["metadata"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": "ComputeDomain",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message,
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": COMPONENT,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
