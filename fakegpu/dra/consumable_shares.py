"""NVIDIA's consumable shares: several ResourceClaims on one GPU or MIG device (KEP-5075, consumable capacity).

NVIDIA's gpu-kubelet-plugin takes ``--consumable-shares`` (env ``CONSUMABLE_SHARES``, the chart's
``consumableShares``), accepted only with its ``ConsumableShares`` feature gate (alpha, off); ``main.go``
validates it at start and ``consumable_shares.go`` turns it into the advertisement, in
kubernetes-sigs/dra-driver-nvidia-gpu (main, v0.5.0-dev). Every full GPU and MIG device then says
``allowMultipleAllocations: true``, so the scheduler may give it to several claims, each result with its own
``shareID`` and ``consumedCapacity``, and its ``memory`` capacity (rounded down to whole MiB, as the API
server wants max and default to be multiples of the step) gets a request policy:

* ``unlimited``: default 0, range 0..memory in 1Mi steps: a claim that asks for no memory takes none, so any
  number of claims fit;
* ``memory``: default all of it, range 1Mi..memory: a claim that asks for no memory takes the whole device,
  a claim asking ``capacity.requests.memory: 4Gi`` takes 4Gi;
* a positive integer N: memory as for ``unlimited``, plus a ``shares`` capacity of N (default 1, range
  1..N, step 1), so at most N claims that ask for nothing share a device.

Nothing limits a container to its share: NVIDIA's claims on a shared device get the same CDI edits as a claim
that has the device alone (and MPS is refused, ``fakegpu.dra.shared_devices``). The fields exist from
Kubernetes 1.34 (gate ``DRAConsumableCapacity``, beta and on from 1.36); older API servers have none of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from fakegpu.dra.feature_gates import KNOWN_GATES, FeatureGates
from fakegpu.sharing.go_quote import go_quote
from fakegpu.sharing.quantities import binary_quantity, decimal_quantity, quantity_value

CONSUMABLE_SHARES_GATE: Final = "ConsumableShares"
FLAG: Final = "--consumable-shares"
ENV: Final = "CONSUMABLE_SHARES"
DISABLED: Final = "disabled"
FIRST_MINOR_WITH_CONSUMABLE_CAPACITY: Final = 34
"""resource.k8s.io gained ``allowMultipleAllocations`` and ``requestPolicy`` in Kubernetes 1.34."""
MEMORY: Final = "memory"
SHARES: Final = "shares"
STEP_BYTES: Final = 1024 * 1024
"""NVIDIA's step for memory requests: 1Mi."""
MAX_ATTRIBUTES_AND_CAPACITIES: Final = 32
_ATOI: Final = re.compile(r"[+-]?[0-9]+")
"""What Go's ``strconv.Atoi`` accepts."""
_INT64_MAX: Final = 2**63 - 1

Mode = Literal["disabled", "memory", "unlimited", "count"]

assert CONSUMABLE_SHARES_GATE in KNOWN_GATES


@dataclass(frozen=True)
class ConsumableShares:
    """The ``--consumable-shares`` setting once validated: off, ``memory``, ``unlimited`` or ``count`` shares."""

    mode: Mode = "disabled"
    count: int | None = None
    """The N of ``--consumable-shares=N``; None for the other modes."""

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"

    def __str__(self) -> str:
        return str(self.count) if self.mode == "count" else self.mode


OFF: Final = ConsumableShares()


def _atoi(text: str) -> int | None:
    if not _ATOI.fullmatch(text):
        return None
    value = int(text)
    return value if -_INT64_MAX - 1 <= value <= _INT64_MAX else None


def parse_consumable_shares(value: str, gates: FeatureGates) -> ConsumableShares:
    """NVIDIA's ``validateCLIFlags`` for the flag, with its texts; ``main.go`` runs it after the feature gates'
    own validation. Like NVIDIA, the value is checked as given: ``" 4"`` is not a positive integer."""
    if value != DISABLED and not gates.enabled(CONSUMABLE_SHARES_GATE):
        raise ValueError(f"invalid CLI flags: {FLAG} requires feature gate {CONSUMABLE_SHARES_GATE} to be enabled")
    if value == DISABLED:
        return OFF
    if value in ("memory", "unlimited"):
        return ConsumableShares(value)  # type: ignore[arg-type]
    count = _atoi(value)
    if count is None or count <= 0:
        raise ValueError(
            f"invalid CLI flags: invalid value for {FLAG}: {go_quote(value)} "
            "(must be 'disabled', 'memory', 'unlimited', or a positive integer)"
        )
    return ConsumableShares("count", count)


def _range_policy(default: str, minimum: str, maximum: str, step: str) -> dict[str, Any]:
    return {"default": default, "validRange": {"min": minimum, "max": maximum, "step": step}}


def advertised(device: Mapping[str, Any], shares: ConsumableShares, server_minor: int) -> dict[str, Any]:
    """``device`` (a flat v1 device of this driver: a full GPU or a MIG device) as NVIDIA's
    ``applyConsumableShares`` leaves it; unchanged when shares are off or the API server has no such fields."""
    out = dict(device)
    if not shares.enabled or server_minor < FIRST_MINOR_WITH_CONSUMABLE_CAPACITY:
        return out
    out["allowMultipleAllocations"] = True
    capacity: dict[str, Any] = {name: dict(value) for name, value in (device.get("capacity") or {}).items()}
    if MEMORY not in capacity:
        return out
    whole = quantity_value(capacity[MEMORY]["value"]) // STEP_BYTES * STEP_BYTES
    memory = binary_quantity(whole)
    step = binary_quantity(STEP_BYTES)
    capacity[MEMORY]["value"] = memory
    if shares.mode == "memory":
        capacity[MEMORY]["requestPolicy"] = _range_policy(memory, step, memory, step)
    else:
        capacity[MEMORY]["requestPolicy"] = _range_policy("0", "0", memory, step)
    if shares.mode == "count" and shares.count is not None:
        n = decimal_quantity(shares.count)
        capacity[SHARES] = {"value": n, "requestPolicy": _range_policy("1", "1", n, "1")}
    out["capacity"] = {name: capacity[name] for name in sorted(capacity)}
    if len(out.get("attributes") or {}) + len(out["capacity"]) > MAX_ATTRIBUTES_AND_CAPACITIES:
        raise ValueError(
            f"device {device.get('name')} would have more than {MAX_ATTRIBUTES_AND_CAPACITIES} attributes and "
            f"capacities with {FLAG}={shares}"
        )
    return out
