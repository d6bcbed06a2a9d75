"""Reading the ResourceClaim the kubelet names: the kubelet sends only the claim's identity, so both DRA
drivers (the GPU driver and the compute-domain driver) read the claim from the API server, and refuse it when
the claim of that name is another one (its UID changed: deleted and created again).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources import resource_v1, resource_v1beta1, resource_v1beta2

from fakegpu.dra.claim_error import ClaimError
from fakegpu.dra.prepared_claims import ClaimRef
from fakegpu.sharing.errors import shorten

CLAIM_KINDS: dict[str, Any] = {
    "resource.k8s.io/v1": resource_v1.ResourceClaim,
    "resource.k8s.io/v1beta2": resource_v1beta2.ResourceClaim,
    "resource.k8s.io/v1beta1": resource_v1beta1.ResourceClaim,
}
"""The lightkube ResourceClaim class of each resource.k8s.io version the driver may settle on."""


class ClaimReader(Protocol):
    async def get(self, namespace: str, name: str) -> Mapping[str, Any]: ...


class LightkubeClaimReader:
    """Reads ResourceClaims from the API server; the kubelet sends only the claim's identity."""

    def __init__(self, client: AsyncClient, api_version: str = "resource.k8s.io/v1") -> None:
        self.client = client
        self.api_version = api_version

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        try:
            claim = await self.client.get(CLAIM_KINDS[self.api_version], name, namespace=namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                raise ClaimError(f"claim {namespace}/{name} not found") from None
            raise ClaimError(f"reading claim {namespace}/{name} failed: {exc.status.message}") from None
        except Exception as exc:  # unreachable server, or an answer lightkube cannot read as a ResourceClaim
            reason = shorten(" ".join(str(exc).split()) or type(exc).__name__, 200)
            raise ClaimError(f"claim {namespace}/{name}: reading it from the API server failed: {reason}") from None
        data: dict[str, Any] = claim.to_dict()
        return data


async def read_claim(reader: ClaimReader, ref: ClaimRef) -> Mapping[str, Any]:
    """The claim the kubelet names, refused when the API server's claim of that name has another UID."""
    claim = await reader.get(ref.namespace, ref.name)
    uid = str((claim.get("metadata") or {}).get("uid", ""))
    if uid != ref.uid:
        raise ClaimError(
            f"claim {ref.namespace}/{ref.name} got replaced: the API server has UID {uid or '(none)'}, "
            f"the kubelet asked for {ref.uid}"
        )
    return claim
