"""How a node's stored ResourceSlices are brought in line with a wish: one plan for every writer of slices.

The DRA driver's publisher (``fakegpu.dra.slice_publisher``) and the virtual nodes
(``fakegpu.virtual_nodes.controller``) write a node's pool the same way, and this module is that way, without
the I/O: each writer lists its slices, asks ``plan_slice_writes`` what to write, and does it with its own
client. The rules:

- Nothing is written when the stored slices hold the wish (``fakegpu.dra.slice_digest.holds_slices``: as
  many as wished, of one generation, stamped with the wished digests and owned by the node) and none is of a
  driver outside the pool's.
- When the wish gives a digest per slice (``PoolWish.digests``) and the stored pool is complete (as many
  slices as wished, of one generation, all owned by the node and of the pool's drivers) with exactly one
  slice whose digest is not wished, that slice alone is updated in place at the same generation, as
  Kubernetes' ResourceSlice controller does when no slice is added and at most one changes
  (kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/resourceslice/
  resourceslicecontroller.go @ 6d8b41f, "Kept generation because at most one update API call is necessary").
- Otherwise every wished slice is written, with the pool generation one above the highest stored (or the
  writer's own last one, when it remembers a higher one), so a reader never mixes two writes of a pool.
- A stored slice is reused (updated in place, keeping its name) for a wished slice of its own driver, the
  stored ones in name order, the wished in order; the writer may restrict reuse to one node and pool name.
  A wished slice left without one is created. Updates go first, then creates, then deletes: the pool is
  never emptier than it must be.
- Deleted: stored slices of a driver outside the pool's (in the order given), then the unused rest (in name
  order).

What the server kept of a write is checked once by the writer (``dropped_fields_warning``): a server with a
feature gate off drops its fields from the stored slice and keeps the rest, so the scheduler does not see
them; fakegpu cannot fix that, only say it.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fakegpu.dra.slice_digest import SliceKey, holds_slices


@dataclass(frozen=True)
class PoolWish:
    """What planning a pool's writes needs to know of the wish (its slices are the writer's business)."""

    wanted: tuple[str, ...]
    """The driver of each wished slice, in write order (empty: the node should have no slices)."""
    drivers: frozenset[str]
    """The drivers whose stored slices make up the pool (every one of ``wanted`` among them); a stored slice of
    another driver is deleted."""
    digest: str
    """The wish's digest (``fakegpu.dra.slice_digest.plan_digest``), stamped on every slice written unless
    ``digests`` gives each its own."""
    owner_uid: str | None
    """The UID of the Node that owns the slices."""
    pool: tuple[str, str] | None = None
    """(node name, pool name) a stored slice needs to be reused; None reuses any slice of the driver."""
    digests: tuple[str, ...] | None = None
    """Each wished slice's own digest, in ``wanted`` order, stamped on that slice instead of ``digest``: the
    pool is then compared slice by slice, and one changed slice is updated alone. None: one digest for all."""

    def __post_init__(self) -> None:
        stray = sorted(set(self.wanted) - self.drivers)
        if stray:
            raise ValueError(f"wished slices of drivers {stray} outside the pool's drivers {sorted(self.drivers)}")
        if self.digests is not None and len(self.digests) != len(self.wanted):
            raise ValueError(f"{len(self.digests)} slice digests for {len(self.wanted)} wished slices")

    def slice_digests(self) -> tuple[str, ...]:
        """The digest each wished slice is stamped with."""
        return self.digests if self.digests is not None else (self.digest,) * len(self.wanted)


@dataclass(frozen=True, slots=True)
class SliceWrite:
    """One wished slice to write: updated over a stored slice (its name and resourceVersion), or created."""

    index: int
    """The wished slice's position in ``PoolWish.wanted``."""
    replaces: SliceKey | None
    """The stored slice it takes the name of; None when it is created."""


@dataclass(frozen=True)
class SliceWritePlan:
    """The writes that bring a node's stored slices in line with a wish, in the order to do them."""

    generation: int
    """The pool generation the writes carry (the stored one when there is nothing to write)."""
    writes: tuple[SliceWrite, ...]
    """Updates (in wished order), then creates (in wished order)."""
    deletes: tuple[str, ...]
    """Names of stored slices to delete after the writes."""

    @property
    def empty(self) -> bool:
        """Whether the stored slices already hold the wish."""
        return not self.writes and not self.deletes

    @property
    def replaces(self) -> tuple[SliceWrite, ...]:
        return tuple(w for w in self.writes if w.replaces is not None)

    @property
    def creates(self) -> tuple[SliceWrite, ...]:
        return tuple(w for w in self.writes if w.replaces is None)


def plan_slice_writes(wish: PoolWish, stored: Sequence[SliceKey], *, last_generation: int = 0) -> SliceWritePlan:
    """The writes from ``stored`` (a node's slices as listed, names unique) to ``wish``.

    ``last_generation``: the pool generation this writer last wrote, for a writer that outlives its writes
    (the publisher): a pool whose slices were all deleted since is not written at a generation already used."""
    if last_generation < 0:
        raise ValueError(f"the last pool generation must be >= 0, got {last_generation}")
    foreign = [k.name for k in stored if k.driver not in wish.drivers]
    rest = [k for k in stored if k.driver in wish.drivers]
    generation = max([last_generation, *(k.generation for k in rest)])
    if not foreign and holds_slices(rest, wish.slice_digests(), wish.owner_uid):
        return SliceWritePlan(generation, (), ())
    if not foreign and wish.digests is not None:
        single = _one_changed(wish, rest, generation)
        if single is not None:
            return single
    rest.sort(key=lambda k: k.name)
    reusable: dict[str, collections.deque[SliceKey]] = collections.defaultdict(collections.deque)
    for key in rest:
        if wish.pool is None or (key.node, key.pool) == wish.pool:
            reusable[key.driver].append(key)
    replaces: list[SliceWrite] = []
    creates: list[SliceWrite] = []
    for index, driver in enumerate(wish.wanted):
        queue = reusable[driver]
        if queue:
            replaces.append(SliceWrite(index, queue.popleft()))
        else:
            creates.append(SliceWrite(index, None))
    kept = {w.replaces.name for w in replaces if w.replaces is not None}
    deletes = foreign + [k.name for k in rest if k.name not in kept]
    return SliceWritePlan(generation + 1, (*replaces, *creates), tuple(deletes))


def _one_changed(wish: PoolWish, rest: Sequence[SliceKey], generation: int) -> SliceWritePlan | None:
    """The in-place update of the one stored slice whose digest is not wished, at the stored generation; None
    unless the stored pool is complete, of that one generation, owned by the node and reusable, with exactly one
    slice changed (anything else is a new generation of the whole pool)."""
    digests = wish.slice_digests()
    if len(rest) != len(digests) or any(k.generation != generation or k.owner_uid != wish.owner_uid for k in rest):
        return None
    unmatched = collections.Counter(digests)
    stale: list[SliceKey] = []
    for key in sorted(rest, key=lambda k: k.name):
        if key.digest is not None and unmatched[key.digest] > 0:
            unmatched[key.digest] -= 1
        else:
            stale.append(key)
    left = [d for d, n in unmatched.items() for _ in range(n)]
    if len(stale) != 1 or len(left) != 1:
        return None
    (old,) = stale
    index = digests.index(left[0])
    if old.driver != wish.wanted[index] or (wish.pool is not None and (old.node, old.pool) != wish.pool):
        return None
    return SliceWritePlan(generation, (SliceWrite(index, old),), ())


def take_over(metadata: dict[str, Any], stored: SliceKey) -> None:
    """Point a wished slice's metadata at the stored slice it updates: that name and resourceVersion (a
    conflict if someone wrote it since), and no ``generateName``."""
    metadata["name"] = stored.name
    metadata["resourceVersion"] = stored.resource_version
    metadata.pop("generateName", None)


def spec_as_wished(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A slice spec without what the server fills in for the same wish: the pool generation and taints'
    ``timeAdded``. Comparing what was sent with what is stored this way tells whether fields were dropped."""
    out: dict[str, Any] = json.loads(json.dumps(spec))
    out.get("pool", {}).pop("generation", None)
    for device in out.get("devices") or []:
        for taint in device.get("basic", device).get("taints") or []:
            taint.pop("timeAdded", None)
    return out


def dropped_fields(sent: Mapping[str, Any], stored: Mapping[str, Any]) -> bool:
    """Whether the server kept less of a slice spec than was sent (the fields of a disabled feature gate)."""
    return spec_as_wished(sent) != spec_as_wished(stored)


def dropped_fields_warning(sent: Mapping[str, Any], stored: Mapping[str, Any], node: str | None = None) -> str | None:
    """What to tell the user when the server stored less of a slice spec than was sent; None when it kept it
    all. ``node`` names the node the slices are of (the driver's publisher has one; a fleet says it once)."""
    if not dropped_fields(sent, stored):
        return None
    of = f" for node {node}" if node is not None else ""
    return (
        f"the API server dropped fields of the ResourceSlices{of} (partitionable devices, device taints or "
        "consumable capacity need the DRAPartitionableDevices / DRADeviceTaints / DRAConsumableCapacity feature "
        "gates before Kubernetes 1.36); the scheduler will not see MIG counters, taints or shared devices"
    )
