"""GetPreferredAllocation: which devices NVIDIA's plugin would hint kubelet to pick.

Mirrors k8s-device-plugin v0.20.0 (``internal/rm/nvml_manager.go``, ``allocate.go``): whole GPUs get a
topology-aligned best-effort choice (go-gpuallocator style, scored on our NVLink groups and NUMA nodes);
replicas and MIG devices get the greedy ``distributed`` / ``packed`` policy. Pure: no I/O, no gRPC.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import combinations
from math import comb

from fakegpu.fakeplugin.allocation_error import AllocationError
from fakegpu.sharing.inventory import Device, Resource
from fakegpu.sharing.node import Node

DISTRIBUTED = "distributed"
PACKED = "packed"
POLICIES = (DISTRIBUTED, PACKED)

NVLINK_SCORE = 10_000
"""Score of an NVLink-connected pair; above any sum of NUMA bonuses (64 GPUs have 2016 pairs), so links win."""
SAME_NUMA_SCORE = 1
"""Score of a pair on the same NUMA node; only breaks ties between equally linked sets."""
EXHAUSTIVE_LIMIT = 5000
"""Up to this many candidate sets the aligned choice is exact; beyond it we fall back to greedy."""

NOT_ENOUGH = "not enough available devices to satisfy allocation"
"""NVIDIA's text, so clients matching on it see the same failure."""
SHOWN_ID_LIMIT = 200
"""Longest device ID quoted whole in an error. gRPC sends the error text in a trailer, and a client
drops a call whose trailers exceed 16 KiB ("received metadata size exceeds hard limit"), so an
unknown ID of any length must still give a readable refusal."""


def shown_id(device_id: str) -> str:
    """A device ID as error texts quote it: whole (as NVIDIA does) unless absurdly long."""
    if len(device_id) <= SHOWN_ID_LIMIT:
        return device_id
    return f"{device_id[:SHOWN_ID_LIMIT]}... ({len(device_id)} characters)"


def preferred_allocation(
    resource: Resource,
    node: Node,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    policy: str,
) -> list[str]:
    """The device IDs to prefer for one container: ``must_include`` first, then the chosen rest.

    Raises ``AllocationError`` for requests NVIDIA would refuse (or that cannot be met), since kubelet
    turns an RPC error into a failed admission and tests must be able to reproduce that.
    """
    if policy not in POLICIES:
        raise AllocationError(f"unknown allocation policy {policy!r}; expected one of: {', '.join(POLICIES)}")
    if size <= 0:
        raise AllocationError(f"allocation size must be positive, found {size}")
    by_id = {d.id: d for d in resource.devices}
    avail = list(dict.fromkeys(available))
    required = list(dict.fromkeys(must_include))
    for device_id in [*avail, *required]:
        if device_id not in by_id:
            raise AllocationError(f"unknown device: {shown_id(device_id)}")
    avail_set = set(avail)
    for device_id in required:
        if device_id not in avail_set:
            raise AllocationError(f"must-include device {shown_id(device_id)} is not among the available devices")

    aligned = all(not d.is_mig for d in resource.devices) and all("::" not in i for i in avail)
    if aligned:
        if size < len(required) or size > len(avail):
            raise AllocationError(NOT_ENOUGH)
        return _aligned(node, [by_id[i] for i in avail], [by_id[i] for i in required], size)
    return _shared(resource, [by_id[i] for i in avail], [by_id[i] for i in required], size, policy)


def _pair_score(node: Node, a: Device, b: Device) -> int:
    """How much two GPUs gain from sharing a container: NVLink dominates, same NUMA breaks ties."""
    score = NVLINK_SCORE if node.nvlinked(a.parent_index, b.parent_index) else 0
    if a.numa is not None and a.numa == b.numa:
        score += SAME_NUMA_SCORE
    return score


def _aligned(node: Node, available: list[Device], required: list[Device], size: int) -> list[str]:
    """Best-effort topology-aligned whole GPUs: the best-scoring set, lowest indices on ties."""
    chosen_ids = {d.id for d in required}
    candidates = sorted((d for d in available if d.id not in chosen_ids), key=lambda d: d.parent_index)
    need = size - len(required)
    if need == 0:
        return [d.id for d in required]
    if comb(len(candidates), need) <= EXHAUSTIVE_LIMIT:
        picked = _best_combination(node, candidates, required, need)
    else:
        picked = _greedy(node, candidates, required, need)
    return [d.id for d in required] + [d.id for d in sorted(picked, key=lambda d: d.parent_index)]


def _best_combination(node: Node, candidates: list[Device], required: list[Device], need: int) -> list[Device]:
    """Exact search; ``combinations`` yields index-lexicographic order, so the first best wins ties."""
    best: tuple[Device, ...] = ()
    best_score = -1
    for combo in combinations(candidates, need):
        members = [*required, *combo]
        score = sum(_pair_score(node, a, b) for a, b in combinations(members, 2))
        if score > best_score:
            best, best_score = combo, score
    return list(best)


def _greedy(node: Node, candidates: list[Device], required: list[Device], need: int) -> list[Device]:
    """Add, one at a time, the GPU scoring best against those already chosen (lowest index on ties)."""
    chosen = list(required)
    remaining = list(candidates)
    picked: list[Device] = []
    for _ in range(need):
        best = max(remaining, key=lambda c: (sum(_pair_score(node, c, x) for x in chosen), -c.parent_index))
        remaining.remove(best)
        chosen.append(best)
        picked.append(best)
    return picked


def _shared(resource: Resource, available: list[Device], required: list[Device], size: int, policy: str) -> list[str]:
    """NVIDIA's greedy replica/MIG policy as k8s-device-plugin v0.20.0 has it (``internal/rm/allocate.go``).

    Replicas are grouped by the device they replicate (NVIDIA's ``AnnotatedID.GetID()``): a GPU for
    time-sliced GPUs, a MIG device for time-sliced MIG devices; plain MIG devices are groups of one.
    A group's allocated count is its replicas in the resource minus its candidates still unpicked, so
    must-include devices count as allocated. One pick at a time: ``distributed`` takes the group with the
    fewest allocated, ``packed`` the most; equal counts go to the group picked least often in this call
    (#1788), so a pod spreads over distinct physical GPUs. Must-include devices are not picks there (v0.20.0
    does not seed that count with them). Groups still tied NVIDIA orders by Go map iteration, i.e. at
    random; fakegpu then takes the group holding fewer must-include devices (as NVIDIA's later main seeds
    the count), then the resource's order (lowest GPU, then lowest replica): always one of v0.20.0's answers.
    """
    chosen_ids = {d.id for d in required}
    candidates = [d for d in available if d.id not in chosen_ids]
    needed = size - len(required)
    if len(candidates) < needed:
        raise AllocationError(NOT_ENOUGH)
    order = {d.id: n for n, d in enumerate(resource.devices)}
    total = Counter(d.base_id for d in resource.devices)
    unpicked = Counter(d.base_id for d in candidates)
    picked_from: Counter[str] = Counter()
    held = Counter(d.base_id for d in required)
    sign = 1 if policy == DISTRIBUTED else -1

    def rank(d: Device) -> tuple[int, int, int, int]:
        allocated = total[d.base_id] - unpicked[d.base_id]
        return (sign * allocated, picked_from[d.base_id], held[d.base_id], order[d.id])

    picked: list[str] = []
    for _ in range(needed):
        best = min(candidates, key=rank)
        candidates.remove(best)
        unpicked[best.base_id] -= 1
        picked_from[best.base_id] += 1
        picked.append(best.id)
    return [d.id for d in required] + picked
