"""What other claims already hold on the node: devices taken whole, capacity consumed on shared devices
(with their share IDs) and shared counters consumed (partitionable devices).

The scheduler builds the same from every allocated ResourceClaim (kubernetes
``staging/src/k8s.io/dynamic-resource-allocation/structured/internal/allocatedstate.go``, v1.36): a
result with a ``shareID`` is one share of a device that allows multiple allocations and consumes its
``consumedCapacity``; any other result (except ``adminAccess``) takes the device whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from fakegpu.scheduling.device_pools import Device, DeviceId
from fakegpu.sharing.quantities import parse_quantity

CounterKey = tuple[str, str, str, str]
"""(driver, pool, counter set, counter)."""


@dataclass
class AllocatedState:
    exclusive: set[DeviceId] = field(default_factory=set)
    consumed: dict[DeviceId, dict[str, Fraction]] = field(default_factory=dict)
    share_ids: dict[DeviceId, set[str]] = field(default_factory=dict)
    counters: dict[CounterKey, Fraction] = field(default_factory=dict)
    counted: set[DeviceId] = field(default_factory=set)
    """Devices whose counters are in ``counters``: a shared device consumes them once, whatever its shares."""

    def count(self, device: Device) -> None:
        """Add what ``device`` consumes of its shared counters, once per device."""
        if device.id in self.counted:
            return
        self.counted.add(device.id)
        for key, amount in device_counters(device).items():
            self.counters[key] = self.counters.get(key, Fraction(0)) + amount


def device_counters(device: Device) -> dict[CounterKey, Fraction]:
    """The shared counters one allocation of ``device`` consumes."""
    out: dict[CounterKey, Fraction] = {}
    for entry in device.spec.get("consumesCounters") or []:
        for name, counter in (entry.get("counters") or {}).items():
            key = (device.id.driver, device.id.pool, str(entry.get("counterSet")), name)
            out[key] = out.get(key, Fraction(0)) + parse_quantity(str(counter.get("value", "0")))
    return out


def allocated_state(claims: Iterable[Mapping[str, Any]], devices: Iterable[Device]) -> AllocatedState:
    """The state left by the allocated ``claims`` on the node's ``devices``."""
    by_id = {d.id: d for d in devices}
    state = AllocatedState()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("adminAccess"):
                continue
            did = DeviceId(str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            device = by_id.get(did)
            share = result.get("shareID")
            if share:
                state.share_ids.setdefault(did, set()).add(str(share))
                used = state.consumed.setdefault(did, {})
                for name, amount in (result.get("consumedCapacity") or {}).items():
                    key = _capacity_key(name, did.driver, device)
                    used[key] = used.get(key, Fraction(0)) + parse_quantity(str(amount))
            else:
                state.exclusive.add(did)
            if device is not None:
                state.count(device)
    return state


def _capacity_key(name: str, driver: str, device: Device | None) -> str:
    """The device's own spelling of a capacity name from a claim's status (with or without the domain)."""
    capacity = device.spec.get("capacity") or {} if device is not None else {}
    for candidate in (name, name.removeprefix(driver + "/"), f"{driver}/{name}"):
        if candidate in capacity:
            return candidate
    return name
