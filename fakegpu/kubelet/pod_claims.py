"""A pod's ResourceClaims as the emulator takes them: the claim's identity and, without an API server,
the drivers of its allocation results.

A real kubelet reads each claim of a pod from the API server and asks every driver named in
``status.allocation.devices.results`` to prepare it. The emulator does that when it has an API client;
without one the caller names the drivers (``NS/NAME/UID=DRIVER[,DRIVER]`` on the command line).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PodClaim:
    namespace: str
    name: str
    uid: str
    """The claim's UID; may be "" when the emulator reads the claim from the API server."""
    drivers: tuple[str, ...] = ()
    """The drivers of its allocation results; () to read them from the API server."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def as_dict(self) -> dict[str, object]:
        return {"namespace": self.namespace, "name": self.name, "uid": self.uid, "drivers": list(self.drivers)}


def pod_claim(value: PodClaim | tuple[str, ...]) -> PodClaim:
    """A :class:`PodClaim` from one, or from ``(namespace, name, uid, *drivers)``."""
    if isinstance(value, PodClaim):
        claim = value
    else:
        if len(value) < 3:
            raise ValueError(f"a claim is (namespace, name, uid, *drivers), found {value!r}")
        claim = PodClaim(value[0], value[1], value[2], tuple(value[3:]))
    if not claim.namespace or not claim.name:
        raise ValueError(f"claim {claim.namespace}/{claim.name}: namespace and name must not be empty")
    if any(not d for d in claim.drivers):
        raise ValueError(f"claim {claim.namespace}/{claim.name}: a driver name is empty")
    return claim


def parse_claim(text: str, option: str = "--claim") -> PodClaim:
    """``NS/NAME/UID=DRIVER[,DRIVER]`` (or ``NS/NAME/UID``, ``NS/NAME`` with an API server)."""
    ref, _, drivers = text.partition("=")
    parts = ref.split("/")
    if len(parts) not in (2, 3) or not all(parts[:2]):
        raise ValueError(
            f"{option} {text!r}: expected NAMESPACE/NAME/UID=DRIVER[,DRIVER], e.g. default/c1/1234=gpu.nvidia.com"
        )
    names = tuple(d.strip() for d in drivers.split(",")) if drivers else ()
    if any(not d for d in names):
        raise ValueError(f"{option} {text!r}: a driver name after '=' is empty")
    return PodClaim(parts[0], parts[1], parts[2] if len(parts) == 3 else "", names)
