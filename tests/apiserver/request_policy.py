"""The API server's checks of a device capacity's ``requestPolicy`` (consumable capacity, KEP-5075).

Follows kubernetes ``pkg/apis/resource/validation/validation.go`` (v1.36): ``validateMultiAllocatableDeviceCapacity``,
``validateSingleAllocatableDeviceCapacity``, ``validateRequestPolicy`` and its range and valid-values checks,
with their texts (as tuples, to keep this module free of the one that imports it), so a driver publishing a
policy the real API server refuses fails here too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from fakegpu.sharing.quantities import parse_quantity

Problem = tuple[str, str, Any, str]
"""(field, error type, value, detail): what ``tests.apiserver.k8s_validation.FieldError`` is built from."""

MAX_VALID_VALUES = 10
"""``CapacityRequestPolicyDiscreteMaxOptions``."""


def _q(value: Any) -> Fraction | None:
    try:
        return parse_quantity(value) if value is not None else None
    except ValueError:
        return None


def request_policy_problems(capacity: Mapping[str, Any], multiple: bool, path: str) -> list[Problem]:
    """``path`` is ``...capacity[<name>]``; ``multiple`` is the device's ``allowMultipleAllocations``."""
    policy = capacity.get("requestPolicy")
    if policy is None:
        return []
    where = f"{path}.requestPolicy"
    if not multiple:
        return [(where, "Forbidden", None, "allowMultipleAllocations must be true")]
    if not isinstance(policy, Mapping):
        return [(where, "Invalid value", policy, "must be an object")]
    values, valid_range = policy.get("validValues") or [], policy.get("validRange")
    if values and valid_range is not None:
        detail = 'exactly one policy can be specified, cannot specify "validValues" and "validRange" at the same time'
        return [(where, "Forbidden", None, detail)]
    maximum, default = _q(capacity.get("value")), _q(policy.get("default"))
    if maximum is None or (not values and valid_range is None):
        return []
    kind = "validValues" if values else "validRange"
    if default is None:
        return [(f"{where}.default", "Required value", None, f"required when {kind} is defined")]
    if values:
        return _valid_values(values, default, maximum, f"{where}.validValues")
    return _valid_range(valid_range or {}, default, maximum, f"{where}.validRange")


def _valid_values(values: list[Any], default: Fraction, maximum: Fraction, where: str) -> list[Problem]:
    if len(values) > MAX_VALID_VALUES:
        return [(where, "Too many", len(values), str(MAX_VALID_VALUES))]
    errs: list[Problem] = []
    amounts = [_q(v) or Fraction(0) for v in values]
    for i in range(len(amounts) - 1):
        if amounts[i] > amounts[i + 1]:
            errs.append(
                (f"{where}[{i + 1}]", "Invalid value", values[i + 1], "values must be sorted in ascending order")
            )
    for i, amount in enumerate(amounts):
        if amount > maximum:
            errs.append((f"{where}[{i}]", "Invalid value", values[i], "option is larger than capacity value"))
    if default not in amounts:
        errs.append((where, "Invalid value", str(default), "default value is not valid according to the requestPolicy"))
    return errs


def _valid_range(valid_range: Mapping[str, Any], default: Fraction, maximum: Fraction, where: str) -> list[Problem]:
    low, high, step = _q(valid_range.get("min")), _q(valid_range.get("max")), _q(valid_range.get("step"))
    if low is None:
        return [(f"{where}.min", "Required value", None, "required when validRange is defined")]
    checks: list[tuple[bool, str, Any, str]] = [
        (low > maximum, "min", valid_range.get("min"), "min is larger than capacity value"),
        (default < low, "min", str(default), "default is less than min"),
    ]
    if high is not None:
        checks += [
            (low > high, "max", valid_range.get("min"), "min is larger than max"),
            (high > maximum, "max", valid_range.get("max"), "max is larger than capacity value"),
            (default > high, "max", str(default), "default is more than max"),
        ]
    if step is not None:
        off_step: Callable[[Fraction], bool] = lambda v: step != 0 and (v - low) % step != 0  # noqa: E731
        checks += [
            (low + step > maximum, "step", valid_range.get("step"), "one step is larger than capacity value"),
            (off_step(default), "step", str(default), "value is not a multiple of a given step"),
            (
                high is not None and off_step(high),
                "step",
                valid_range.get("max"),
                "value is not a multiple of a given step",
            ),
        ]
    return [(f"{where}.{name}", "Invalid value", value, detail) for bad, name, value, detail in checks if bad]
