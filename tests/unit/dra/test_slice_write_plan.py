"""The one plan both slice writers (the DRA publisher, the virtual nodes) bring a node's pool in line with."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakegpu.dra.slice_digest import SliceKey
from fakegpu.dra.slice_write_plan import (
    PoolWish,
    SliceWrite,
    SliceWritePlan,
    dropped_fields,
    dropped_fields_warning,
    plan_slice_writes,
    take_over,
)

GPU = "gpu.nvidia.com"
CD = "compute-domain.nvidia.com"
OLD = "old.example.com"
"""A driver name the pool has no slices of (a slice written under an earlier --driver-name)."""
NODE = "node-a"
UID = "uid-a"


def key(name: str, driver: str = GPU, *, generation: int = 1, digest: str | None = "d1", **kw: str | None) -> SliceKey:
    """A stored slice of NODE's pool, written for the wish ``d1`` unless told otherwise."""
    return SliceKey(
        name=name,
        resource_version=f"rv-{name}",
        node=str(kw.get("node", NODE)),
        driver=driver,
        pool=str(kw.get("pool", NODE)),
        generation=generation,
        digest=digest,
        owner_uid=kw.get("owner", UID),
        labels={},
    )


def wish(*wanted: str, digest: str = "d1", pool: bool = True) -> PoolWish:
    drivers = frozenset({GPU, CD} if CD in wanted else {GPU})
    return PoolWish(wanted, drivers, digest, UID, (NODE, NODE) if pool else None)


def reused(plan: SliceWritePlan) -> list[tuple[int, str | None]]:
    return [(w.index, w.replaces.name if w.replaces else None) for w in plan.writes]


def test_stored_names_are_reused_in_name_order_with_their_resource_versions():
    plan = plan_slice_writes(wish(GPU, GPU, digest="d2"), [key("s-b"), key("s-a")])
    assert reused(plan) == [(0, "s-a"), (1, "s-b")]
    assert [w.replaces.resource_version for w in plan.writes if w.replaces] == ["rv-s-a", "rv-s-b"]
    assert plan.deletes == () and plan.generation == 2 and not plan.empty


def test_a_shrinking_pool_updates_the_first_names_and_deletes_the_rest_in_name_order():
    plan = plan_slice_writes(wish(GPU, digest="d2"), [key("s-c"), key("s-a"), key("s-b")])
    assert reused(plan) == [(0, "s-a")]
    assert plan.deletes == ("s-b", "s-c")


def test_a_growing_pool_updates_what_is_stored_then_creates_the_rest():
    plan = plan_slice_writes(wish(GPU, GPU, GPU, digest="d2"), [key("s-a")])
    assert reused(plan) == [(0, "s-a"), (1, None), (2, None)]
    assert [w.index for w in plan.replaces] == [0] and [w.index for w in plan.creates] == [1, 2]


def test_an_empty_pool_is_created_at_generation_one():
    plan = plan_slice_writes(wish(GPU, GPU), [])
    assert plan == SliceWritePlan(1, (SliceWrite(0, None), SliceWrite(1, None)), ())


def test_a_slice_is_only_reused_for_one_of_its_own_driver_and_updates_come_before_creates():
    """The compute-domain slice is written last but updated first: no GPU slice is left to update."""
    plan = plan_slice_writes(wish(GPU, GPU, CD, digest="d2"), [key("z-cd", CD), key("a-gpu")])
    assert reused(plan) == [(0, "a-gpu"), (2, "z-cd"), (1, None)]


def test_a_slice_of_another_node_or_pool_is_replaced_not_updated_unless_any_pool_will_do():
    stored = [key("s-a", pool="other"), key("s-b", node="node-b"), key("s-c")]
    plan = plan_slice_writes(wish(GPU, GPU, GPU, digest="d2"), stored)
    assert reused(plan) == [(0, "s-c"), (1, None), (2, None)]
    assert plan.deletes == ("s-a", "s-b")
    anywhere = plan_slice_writes(wish(GPU, GPU, GPU, digest="d2", pool=False), stored)
    assert reused(anywhere) == [(0, "s-a"), (1, "s-b"), (2, "s-c")] and anywhere.deletes == ()


def test_slices_of_a_driver_outside_the_pool_are_deleted_first_in_the_order_listed():
    stored = [key("s-z", OLD), key("s-c"), key("s-a", OLD), key("s-b")]
    plan = plan_slice_writes(wish(GPU), stored)
    assert reused(plan) == [(0, "s-b")]
    assert plan.deletes == ("s-z", "s-a", "s-c")


def test_a_node_that_should_have_no_slices_loses_all_of_them():
    stored = [key("s-b"), key("s-a", CD)]
    plan = plan_slice_writes(PoolWish((), frozenset(), "", UID), stored)
    assert plan.writes == () and plan.deletes == ("s-b", "s-a")
    assert plan_slice_writes(PoolWish((), frozenset(), "", UID), []).empty


def test_the_generation_is_one_above_the_highest_of_the_pool_or_the_writers_last():
    stored = [key("s-a", generation=3), key("s-b", generation=5), key("s-c", OLD, generation=9)]
    assert plan_slice_writes(wish(GPU, GPU, digest="d2"), stored).generation == 6
    assert plan_slice_writes(wish(GPU, GPU, digest="d2"), stored, last_generation=7).generation == 8
    assert plan_slice_writes(wish(GPU), [], last_generation=4).generation == 5


def test_nothing_is_written_when_the_stored_slices_hold_the_wish():
    stored = [key("s-a", generation=4), key("s-b", generation=4)]
    plan = plan_slice_writes(wish(GPU, GPU), stored, last_generation=2)
    assert plan.empty and plan == SliceWritePlan(4, (), ())


@pytest.mark.parametrize(
    "stored",
    [
        [key("s-a"), key("s-b", digest="d0")],  # a slice of another wish
        [key("s-a"), key("s-b", digest=None)],  # written by someone else
        [key("s-a"), key("s-b", owner="uid-old")],  # owned by a Node of that name deleted since
        [key("s-a"), key("s-b", generation=2)],  # two writes mixed
        [key("s-a")],  # one missing
        [key("s-a"), key("s-b"), key("s-c")],  # one too many
        [key("s-a"), key("s-b"), key("s-c", OLD)],  # one of another driver
    ],
)
def test_every_slice_is_rewritten_when_the_stored_ones_do_not_hold_the_wish(stored):
    plan = plan_slice_writes(wish(GPU, GPU), stored)
    assert [w.index for w in plan.writes] == [0, 1]
    assert plan.generation == max(k.generation for k in stored if k.driver == GPU) + 1


def test_bad_wishes_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match=r"^wished slices of drivers \['compute-domain.nvidia.com'\] outside"):
        PoolWish((GPU, CD), frozenset({GPU}), "d1", UID)
    with pytest.raises(ValueError, match=r"^the last pool generation must be >= 0, got -1$"):
        plan_slice_writes(wish(GPU), [], last_generation=-1)


def test_take_over_names_the_write_after_the_stored_slice():
    metadata = {"generateName": "node-a-gpu.nvidia.com-", "labels": {"a": "b"}}
    take_over(metadata, key("s-a"))
    assert metadata == {"labels": {"a": "b"}, "name": "s-a", "resourceVersion": "rv-s-a"}


# -- what the server kept --------------------------------------------------------------------------------------

SENT = {
    "pool": {"name": NODE, "generation": 2, "resourceSliceCount": 1},
    "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
    "devices": [{"name": "gpu-0", "taints": [{"key": "k", "effect": "NoSchedule"}]}],
}
WARNING = (
    "the API server dropped fields of the ResourceSlices (partitionable devices, device taints or consumable "
    "capacity need the DRAPartitionableDevices / DRADeviceTaints / DRAConsumableCapacity feature gates before "
    "Kubernetes 1.36); the scheduler will not see MIG counters, taints or shared devices"
)


def test_what_the_server_fills_in_is_not_a_dropped_field():
    stored = {
        "pool": {"name": NODE, "generation": 7, "resourceSliceCount": 1},
        "sharedCounters": SENT["sharedCounters"],
        "devices": [{"name": "gpu-0", "taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "2026-01-01"}]}],
    }
    assert not dropped_fields(SENT, stored)
    assert dropped_fields_warning(SENT, stored, NODE) is None


@pytest.mark.parametrize("dropped", ["sharedCounters", "devices"])
def test_a_dropped_field_gets_the_one_warning_text(dropped):
    stored = {k: v for k, v in SENT.items() if k != dropped}
    assert dropped_fields(SENT, stored)
    assert dropped_fields_warning(SENT, stored) == WARNING
    of_node = WARNING.replace("ResourceSlices", f"ResourceSlices for node {NODE}")
    assert dropped_fields_warning(SENT, stored, NODE) == of_node


# -- properties ------------------------------------------------------------------------------------------------

STORED = st.lists(
    st.builds(
        key,
        st.text("abcdef", min_size=1, max_size=3),
        st.sampled_from([GPU, CD, OLD]),
        generation=st.integers(0, 5),
        digest=st.sampled_from(["d1", "d2", None]),
        node=st.sampled_from([NODE, "node-b"]),
        pool=st.sampled_from([NODE, "other"]),
        owner=st.sampled_from([UID, "uid-old", None]),
    ),
    max_size=8,
    unique_by=lambda k: k.name,
)
WISHES = st.builds(
    lambda gpus, fabric, digest, pool: wish(*[GPU] * gpus, *[CD] * fabric, digest=digest, pool=pool),
    st.integers(1, 4),
    st.integers(0, 1),
    st.sampled_from(["d1", "d2"]),
    st.booleans(),
)


def _written(wanted: PoolWish, plan: SliceWritePlan, stored: list[SliceKey]) -> list[SliceKey]:
    """The stored slices after the plan's writes, as a server would keep them."""
    gone = {w.replaces.name for w in plan.writes if w.replaces} | set(plan.deletes)
    out = [k for k in stored if k.name not in gone]
    for w in plan.writes:
        name = w.replaces.name if w.replaces else f"new-{w.index}"
        driver = wanted.wanted[w.index]
        out.append(key(name, driver, generation=plan.generation, digest=wanted.digest))
    return out


@given(WISHES, STORED, st.integers(0, 6))
def test_writing_the_plan_leaves_a_pool_that_needs_no_more_writes(wanted, stored, last):
    plan = plan_slice_writes(wanted, stored, last_generation=last)
    after = _written(wanted, plan, stored)
    assert plan_slice_writes(wanted, after, last_generation=plan.generation).empty
    if not plan.empty:
        assert sorted(w.index for w in plan.writes) == list(range(len(wanted.wanted)))
        assert plan.generation > max([last, *(k.generation for k in stored if k.driver in wanted.drivers)])


@given(WISHES, STORED)
def test_every_stored_slice_is_reused_once_or_deleted_once(wanted, stored):
    plan = plan_slice_writes(wanted, stored)
    if plan.empty:
        return
    taken = [w.replaces.name for w in plan.writes if w.replaces]
    assert sorted(taken + list(plan.deletes)) == sorted(k.name for k in stored)
    for w in plan.writes:
        if w.replaces is not None:
            assert w.replaces.driver == wanted.wanted[w.index]
            assert wanted.pool is None or (w.replaces.node, w.replaces.pool) == wanted.pool


@given(WISHES, STORED)
def test_the_first_names_of_a_driver_are_reused_in_order_and_nothing_is_created_while_one_is_left(wanted, stored):
    plan = plan_slice_writes(wanted, stored)
    if plan.empty:
        return
    assert [w.replaces is None for w in plan.writes] == sorted(w.replaces is None for w in plan.writes)
    for driver in wanted.drivers:
        reusable = sorted(
            k.name for k in stored if k.driver == driver and (wanted.pool is None or (k.node, k.pool) == wanted.pool)
        )
        ours = sorted((w for w in plan.writes if wanted.wanted[w.index] == driver), key=lambda w: w.index)
        taken = [w.replaces.name for w in ours if w.replaces]
        assert taken == reusable[: len(taken)]
        assert len(taken) == min(len(ours), len(reusable))


def per_slice(*digests: str, pool: bool = True) -> PoolWish:
    """A wish whose slices carry a digest each (the virtual nodes'): compared slice by slice."""
    return PoolWish((GPU,) * len(digests), frozenset({GPU}), "pool", UID, (NODE, NODE) if pool else None, digests)


def test_one_changed_slice_is_updated_alone_at_the_same_generation():
    """Follows kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/resourceslice/
    resourceslicecontroller.go @ 6d8b41f: no slice added and at most one changed keeps the pool generation and
    updates that slice in place; the slices stored in any name order."""
    stored = [
        key("s-c", digest="c", generation=4),
        key("s-a", digest="a", generation=4),
        key("s-b", digest="b", generation=4),
    ]
    assert plan_slice_writes(per_slice("a", "b", "c"), stored).empty
    plan = plan_slice_writes(per_slice("a", "B", "c"), stored)
    assert reused(plan) == [(1, "s-b")] and plan.deletes == () and plan.generation == 4


@pytest.mark.parametrize(
    ("wished", "stored"),
    [
        (("a", "B", "C"), [key("s-a", digest="a"), key("s-b", digest="b"), key("s-c", digest="c")]),  # two changed
        (("a", "b", "c"), [key("s-a", digest="a"), key("s-b", digest="b")]),  # one added
        (("a", "b"), [key("s-a", digest="a"), key("s-b", digest="b"), key("s-c", digest="c")]),  # one removed
        (("a", "B"), [key("s-a", digest="a"), key("s-b", digest="b", generation=0)]),  # a torn pool
        (("a", "B"), [key("s-a", digest="a"), key("s-b", digest="b", owner="other")]),  # another owner's
        (("a", "B"), [key("s-a", digest="a"), key("s-b", digest="b", node="node-b")]),  # of another pool
        (("a", "B"), [key("s-a", digest="a"), key("s-b", OLD, digest="b")]),  # of another driver
    ],
)
def test_any_other_change_writes_the_pool_anew_at_the_next_generation(wished, stored):
    """The same controller bumps the generation and rewrites the pool for anything more than one update."""
    plan = plan_slice_writes(per_slice(*wished), stored)
    assert len(plan.writes) == len(wished) and plan.generation == 2


def test_one_digest_for_the_pool_rewrites_it_whole():
    """The DRA daemon's publisher stamps every slice with the pool's digest: a change rewrites the pool (the
    controller's rule needs a per-slice comparison the publisher does not make)."""
    plan = plan_slice_writes(wish(GPU, GPU, GPU, digest="d2"), [key("s-a"), key("s-b"), key("s-c")])
    assert len(plan.replaces) == 3 and plan.generation == 2


def test_slice_digests_must_match_the_wished_slices():
    with pytest.raises(ValueError, match="2 slice digests for 1 wished slices"):
        PoolWish((GPU,), frozenset({GPU}), "pool", UID, None, ("a", "b"))
