"""Which prepared claims hold a device, and whether another claim may be prepared on it too.

NVIDIA's ``Prepare`` refuses a claim whose devices an already prepared claim holds
(``validateNoOverlappingPreparedDevices`` in ``cmd/gpu-kubelet-plugin/device_state.go``,
kubernetes-sigs/dra-driver-nvidia-gpu main, after kubernetes/kubernetes#136269: a scheduler race or a
force-deleted pod can hand a device out twice). Devices allocated with ``adminAccess`` are left out on both
sides. With consumable shares (``fakegpu.dra.consumable_shares``) a GPU or MIG device may be held by several
claims, each by its own ``shareID``, as long as their normalized opaque configs are the same: two claims asking
for different time-slice intervals on one GPU would fight over it. ``Unprepare`` then leaves what the device
still serves to the other claims alone (``isGpuUUIDInUseByOtherClaims``): a GPU's time slice goes back to
``Default`` only with its last share (``fakegpu.dra.sharing_settings``); the other shares keep their CDI specs
and checkpoint entries.
"""

from __future__ import annotations

from collections.abc import Iterable

from fakegpu.dra.claim_error import ClaimError
from fakegpu.dra.prepare_plan import PreparedResult, PreparePlan
from fakegpu.dra.prepared_claims import PreparedClaim


def _others(prepared: Iterable[PreparedClaim], uid: str, driver: str) -> list[PreparedClaim]:
    """Completely prepared claims of ``driver`` other than ``uid``: a half-prepared one holds nothing yet."""
    return sorted((c for c in prepared if c.uid != uid and c.completed and c.driver == driver), key=lambda c: c.uid)


def check_no_overlap(plan: PreparePlan, prepared: Iterable[PreparedClaim], *, shares: bool) -> None:
    """Refuse ``plan`` when a device it needs is held by another prepared claim, unless ``shares`` (consumable
    shares are on) and both claims configure the device alike; NVIDIA's texts."""
    wanted = {r.device: r for r in plan.results if not r.admin_access}
    if not wanted:
        return
    for other in _others(prepared, plan.uid, plan.driver):
        held = {r.device: r for r in other.devices if not r.admin_access}
        for device, mine in wanted.items():
            theirs = held.get(device)
            if theirs is None:
                continue
            if not shares:
                problem = f"requested device {device} is already allocated to different claim {other.uid}"
            elif theirs.config_key != mine.config_key:
                problem = (
                    f"requested device {device} has conflicting configuration with already prepared claim {other.uid}"
                )
            else:
                continue
            raise ClaimError(f"unable to prepare claim {plan.uid}: {problem}")


def held_by_others(prepared: Iterable[PreparedClaim], claim: PreparedClaim) -> list[PreparedResult]:
    """The devices other prepared claims hold without admin access: what a claim's unprepare must leave as it is
    (NVIDIA's ``isGpuUUIDInUseByOtherClaims``, asked only with consumable shares)."""
    return [r for c in _others(prepared, claim.uid, claim.driver) for r in c.devices if not r.admin_access]


def other_holders(prepared: Iterable[PreparedClaim], uid: str, driver: str, device: str) -> list[str]:
    """The other prepared claims (UIDs) that hold ``device`` without admin access: while there are any, a
    shared device's state stays as it is (NVIDIA's ``isGpuUUIDInUseByOtherClaims``)."""
    return [
        c.uid
        for c in _others(prepared, uid, driver)
        if any(r.device == device and not r.admin_access for r in c.devices)
    ]
