"""Consumable capacity (KEP-5075, DRAConsumableCapacity): what one allocation takes of a device that
allows multiple allocations, and whether it still fits.

Follows kubernetes ``staging/src/k8s.io/dynamic-resource-allocation/structured/internal/incubating/
consumable_capacity.go`` (v1.36): every capacity of the device is consumed by each allocation, the
requested amount rounded up by the capacity's ``requestPolicy`` (``validRange`` from ``min`` in
``step``s, or the next of ``validValues``), its ``default`` when the request names none, the whole
value without a policy default; an amount outside the policy, or one that with what is already consumed
exceeds the value, does not fit the device (the allocator tries the next). A request naming a capacity
the device lacks does not fit either. A device that does not allow multiple allocations has to offer at
least what is requested. Request names without a domain mean the driver's domain, as in the scheduler.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from fakegpu.sharing.quantities import parse_quantity


def _q(value: Any) -> Fraction:
    return parse_quantity(str(value))


def _resolve(requests: Mapping[str, Any], driver: str, capacity: Mapping[str, Any]) -> dict[str, Fraction] | None:
    """Requested amounts keyed by the device's own capacity names; None if one names no capacity of it."""
    out: dict[str, Fraction] = {}
    for name, amount in requests.items():
        candidates = [name, name.removeprefix(driver + "/"), f"{driver}/{name}"]
        found = next((c for c in candidates if c in capacity), None)
        if found is None:
            return None
        out[found] = _q(amount)
    return out


def _rounded(requested: Fraction | None, cap: Mapping[str, Any]) -> Fraction:
    policy = cap.get("requestPolicy")
    if requested is None:
        if policy and policy.get("default") is not None:
            return _q(policy["default"])
        return _q(cap.get("value", "0"))
    if not policy:
        return requested
    valid_range = policy.get("validRange")
    if valid_range and valid_range.get("min") is not None:
        low = _q(valid_range["min"])
        if requested <= low:
            return low
        step = valid_range.get("step")
        if step is None:
            return requested
        size = _q(step)
        return low + math.ceil((requested - low) / size) * size
    values = sorted(_q(v) for v in policy.get("validValues") or [])
    return next((v for v in values if v >= requested), requested)


def _violates(amount: Fraction, cap: Mapping[str, Any]) -> bool:
    policy = cap.get("requestPolicy") or {}
    valid_range = policy.get("validRange")
    if valid_range:
        if valid_range.get("min") is not None and amount < _q(valid_range["min"]):
            return True
        if valid_range.get("max") is not None and amount > _q(valid_range["max"]):
            return True
    values = policy.get("validValues") or []
    return bool(values) and amount not in {_q(v) for v in values}


def consumed_capacity(
    device: Mapping[str, Any], driver: str, requests: Mapping[str, Any], already: Mapping[str, Fraction]
) -> dict[str, Fraction] | None:
    """What an allocation with capacity ``requests`` takes of a multiple-allocation ``device`` (by capacity
    name), or None when it does not fit next to what is ``already`` consumed."""
    capacity = device.get("capacity") or {}
    resolved = _resolve(requests, driver, capacity)
    if resolved is None:
        return None
    taken: dict[str, Fraction] = {}
    for name, cap in capacity.items():
        amount = _rounded(resolved.get(name), cap)
        if amount < 0 or _violates(amount, cap):
            return None
        if already.get(name, Fraction(0)) + amount > _q(cap.get("value", "0")):
            return None
        taken[name] = amount
    return taken


def offers_at_least(device: Mapping[str, Any], driver: str, requests: Mapping[str, Any]) -> bool:
    """For a device taken whole: whether it has every requested capacity, at least as much as requested."""
    capacity = device.get("capacity") or {}
    resolved = _resolve(requests, driver, capacity)
    if resolved is None:
        return False
    return all(_q(capacity[name].get("value", "0")) >= amount for name, amount in resolved.items())
