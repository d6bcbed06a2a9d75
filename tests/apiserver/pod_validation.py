"""The API server's check of a pod's ``allocatedResourcesStatus`` (KEP-4680), which no JSON schema expresses.

Follows ``validateContainerStatusAllocatedResourcesStatus`` in kubernetes ``pkg/apis/core/validation/validation.go``
(v1.36): per container status whose container exists, each entry's ``name`` is either ``claim:<pod claim
name>`` or ``claim:<pod claim name>/<request>`` matching one of the container's ``resources.claims``, or one of
the container's resource requests; the ``resourceID`` values of one entry are unique and each ``health`` is
Healthy, Unhealthy or Unknown. The real server defaults a container's requests from its limits before it
validates; this server does not default, so a limit counts as a request here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.apiserver.k8s_validation import FieldError

HEALTHS = ("Healthy", "Unhealthy", "Unknown")
CLAIM_DETAIL = (
    "must match one of the container's resource claims in a format 'claim:<claimName>/<request>' or "
    "'claim:<claimName>' if request is empty"
)
REQUEST_DETAIL = "must match one of the container's resource requests"


def _names(container: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """The container's claim entry names (``claim:...``) and its requested resource names."""
    resources = container.get("resources") or {}
    claims = {
        f"claim:{c.get('name')}/{c['request']}" if c.get("request") else f"claim:{c.get('name')}"
        for c in resources.get("claims") or []
    }
    return claims, {*(resources.get("requests") or {}), *(resources.get("limits") or {})}


def validate_pod(obj: Mapping[str, Any]) -> list[FieldError]:
    spec: Mapping[str, Any] = obj.get("spec") or {}
    containers = {c.get("name"): c for c in spec.get("containers") or []}
    errs: list[FieldError] = []
    for i, status in enumerate((obj.get("status") or {}).get("containerStatuses") or []):
        container = containers.get(status.get("name"))
        for j, entry in enumerate(status.get("allocatedResourcesStatus") or []):
            path = f"status.containerStatuses[{i}].allocatedResourcesStatus[{j}]"
            name = str(entry.get("name", ""))
            if container is not None:  # a missing container is ignored (kubernetes#124915)
                claims, requests = _names(container)
                known, detail = (
                    (name in claims, CLAIM_DETAIL) if name.startswith("claim:") else (name in requests, REQUEST_DETAIL)
                )
                if not known:
                    errs.append(FieldError(f"{path}.name", "Invalid value", name, detail))
            seen: set[str] = set()
            for k, resource in enumerate(entry.get("resources") or []):
                health = resource.get("health") or ""
                if health not in HEALTHS:
                    errs.append(
                        FieldError(
                            f"{path}.resources[{k}].health",
                            "Unsupported value",
                            health,
                            "supported values: " + ", ".join(f'"{h}"' for h in HEALTHS),
                        )
                    )
                rid = resource.get("resourceID")
                if rid in seen:
                    errs.append(FieldError(f"{path}.resources[{k}].resourceID", "Duplicate value", rid))
                seen.add(rid)
    return errs
