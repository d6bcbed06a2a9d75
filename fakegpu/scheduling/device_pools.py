"""The devices a node can use, gathered from ResourceSlices as the scheduler gathers its pools.

Follows kubernetes ``staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/pools_stable.go``
(``GatherPools``, v1.36): a slice counts for the node when its ``nodeName`` is the node, it is for
``allNodes``, its ``nodeSelector`` matches the node's labels, or (``perDeviceNodeSelection``) one of its
devices does; within a pool only the slices of the newest generation count, and a pool lacks slices
while fewer than ``resourceSliceCount`` are seen. Where the scheduler walks pools in map order,
fakegpu walks them sorted by driver and pool, and slices by name, so the first fit is reproducible.
Shared counters (partitionable devices, KEP-4815) are gathered per pool and counter set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from fakegpu.sharing.quantities import parse_quantity


@dataclass(frozen=True)
class DeviceId:
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True)
class Device:
    """One device entry of a slice, with where it comes from."""

    id: DeviceId
    spec: Mapping[str, Any]
    """The slice's device entry as published (attributes, capacity, taints, consumesCounters ...)."""
    node_local: bool
    """From a slice (or a device) bound to one node by name or selector: the allocation then names the node."""

    @property
    def allow_multiple(self) -> bool:
        return bool(self.spec.get("allowMultipleAllocations"))


@dataclass
class Pool:
    driver: str
    name: str
    generation: int
    slice_count: int
    slices: list[Mapping[str, Any]] = field(default_factory=list)

    @property
    def incomplete(self) -> bool:
        return len(self.slices) != self.slice_count


@dataclass(frozen=True)
class NodeDevices:
    """The node's pools, their devices in first-fit order and the shared counters they may consume."""

    pools: tuple[Pool, ...]
    devices: tuple[Device, ...]
    counters: Mapping[tuple[str, str, str, str], Fraction]
    """(driver, pool, counter set, counter) -> what the counter set holds."""


def _selector_matches(selector: Mapping[str, Any] | None, node: str, labels: Mapping[str, str]) -> bool:
    """A core/v1 NodeSelector: any term whose expressions (on labels) and fields (metadata.name) all hold."""
    for term in (selector or {}).get("nodeSelectorTerms") or []:
        checks = [(e, labels.get(e.get("key", ""))) for e in term.get("matchExpressions") or []]
        checks += [(f, node if f.get("key") == "metadata.name" else None) for f in term.get("matchFields") or []]
        if all(_requirement_holds(r, value) for r, value in checks):
            return True
    return False


def _requirement_holds(requirement: Mapping[str, Any], value: str | None) -> bool:
    operator = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    holds = {
        "In": value is not None and value in values,
        "NotIn": value is None or value not in values,
        "Exists": value is not None,
        "DoesNotExist": value is None,
        "Gt": value is not None and value.isdigit() and bool(values) and int(value) > int(values[0]),
        "Lt": value is not None and value.isdigit() and bool(values) and int(value) < int(values[0]),
    }
    return holds.get(str(operator), False)


def _placement(holder: Mapping[str, Any], node: str, labels: Mapping[str, str]) -> bool | None:
    """Whether a slice (or a device of a per-device slice) is for the node: True node-local, False for
    all nodes, None not for this node."""
    if holder.get("nodeName"):
        return True if holder["nodeName"] == node else None
    if holder.get("allNodes"):
        return False
    if holder.get("nodeSelector") is not None:
        return True if _selector_matches(holder["nodeSelector"], node, labels) else None
    return None


def gather(slices: Iterable[Mapping[str, Any]], node: str, labels: Mapping[str, str] | None = None) -> NodeDevices:
    """The pools and devices ``node`` (with its ``labels``) can use, from every ResourceSlice given."""
    labels = labels or {}
    pools: dict[tuple[str, str], Pool] = {}
    for obj in sorted(slices, key=lambda s: str((s.get("metadata") or {}).get("name", ""))):
        spec = obj.get("spec") or {}
        per_device = bool(spec.get("perDeviceNodeSelection"))
        if not per_device and _placement(spec, node, labels) is None:
            continue
        if per_device and not any(_placement(d, node, labels) is not None for d in spec.get("devices") or []):
            continue
        pool_spec = spec.get("pool") or {}
        key = (str(spec.get("driver", "")), str(pool_spec.get("name", "")))
        generation = int(pool_spec.get("generation", 0))
        pool = pools.get(key)
        if pool is None or generation > pool.generation:
            pool = pools[key] = Pool(key[0], key[1], generation, int(pool_spec.get("resourceSliceCount", 1)))
        if generation == pool.generation:
            pool.slices.append(obj)
    ordered = tuple(pools[k] for k in sorted(pools))
    devices: list[Device] = []
    counters: dict[tuple[str, str, str, str], Fraction] = {}
    for pool in ordered:
        for obj in pool.slices:
            devices.extend(_slice_devices(pool, obj["spec"], node, labels))
            for counter_set in obj["spec"].get("sharedCounters") or []:
                for name, counter in (counter_set.get("counters") or {}).items():
                    key4 = (pool.driver, pool.name, str(counter_set.get("name")), name)
                    counters[key4] = parse_quantity(str(counter.get("value", "0")))
    return NodeDevices(ordered, tuple(devices), counters)


def _slice_devices(pool: Pool, spec: Mapping[str, Any], node: str, labels: Mapping[str, str]) -> list[Device]:
    out = []
    slice_place = None if spec.get("perDeviceNodeSelection") else _placement(spec, node, labels)
    for entry in spec.get("devices") or []:
        place = _placement(entry, node, labels) if spec.get("perDeviceNodeSelection") else slice_place
        if place is None:
            continue
        out.append(Device(DeviceId(pool.driver, pool.name, str(entry.get("name"))), entry, place))
    return out
