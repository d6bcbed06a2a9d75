"""MIG placement follows the hardware's rules: fits are accepted, overlaps and excess rejected."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakegpu.sharing.catalog import CATALOG, GpuModel
from fakegpu.sharing.mig_geometry import MigLayoutError, check_placements, place
from fakegpu.sharing.node import gi_id

H100 = CATALOG["h100-80gb"]
A100 = CATALOG["a100-40gb"]
A30 = CATALOG["a30"]


@pytest.mark.parametrize(
    ("model", "counts", "message"),
    [
        (H100, {"1g.10gb": 8}, "profile 1g.10gb: at most 7 instance(s) fit on NVIDIA H100 80GB HBM3, 8 requested"),
        (H100, {"4g.40gb": 2}, "profile 4g.40gb: at most 1 instance(s)"),
        (H100, {"2g.10gb": 1}, "profile 2g.10gb is not supported by NVIDIA H100 80GB HBM3; supported: 1g.10gb"),
        (H100, {"7g.80gb": 1, "1g.10gb": 1}, "needs 9 memory slices but NVIDIA H100 80GB HBM3 has 8"),
        (H100, {"3g.40gb": 2, "1g.10gb": 1}, "needs 9 memory slices"),
        (A100, {"1g.10gb": 4, "1g.5gb": 1}, "needs 9 memory slices"),
        (H100, {"4g.40gb": 1, "2g.20gb": 2}, "needs 8 compute slices but NVIDIA H100 80GB HBM3 has 7"),
        (A30, {"1g.6gb": 5}, "at most 4 instance(s)"),
        (CATALOG["t4"], {"1g.5gb": 1}, "Tesla T4 is not MIG capable"),
        (H100, {"1g.10gb+me": 2}, "profile 1g.10gb+me: at most 1 instance(s)"),
        (A30, {"1g.6gb+me": 1, "2g.12gb+me": 1}, "layout needs 2 JPEG engines but NVIDIA A30 has 1"),
    ],
)
def test_impossible_layouts_are_rejected(model, counts, message):
    with pytest.raises(MigLayoutError) as err:
        place(model, counts)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("model", "counts", "expected"),
    [
        (H100, {"1g.10gb": 7}, [(s, "1g.10gb") for s in range(7)]),
        (H100, {"3g.40gb": 1, "4g.40gb": 1}, [(0, "4g.40gb"), (4, "3g.40gb")]),
        (
            H100,
            {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
            [(0, "2g.20gb"), (2, "1g.10gb"), (3, "1g.10gb"), (4, "3g.40gb")],
        ),
        (A100, {"1g.10gb": 4}, [(0, "1g.10gb"), (2, "1g.10gb"), (4, "1g.10gb"), (6, "1g.10gb")]),
        (A30, {"2g.12gb": 1, "1g.6gb": 2}, [(0, "2g.12gb"), (2, "1g.6gb"), (3, "1g.6gb")]),
        (H100, {"2g.20gb": 3, "1g.10gb": 1}, [(0, "2g.20gb"), (2, "2g.20gb"), (4, "2g.20gb"), (6, "1g.10gb")]),
    ],
)
def test_valid_layouts_are_placed_deterministically(model, counts, expected):
    got = [(p.start, p.profile.name) for p in place(model, counts)]
    assert got == expected
    assert [(p.start, p.profile.name) for p in place(model, dict(reversed(list(counts.items()))))] == expected


def test_explicit_placement_errors_name_the_profile_and_reason():
    with pytest.raises(MigLayoutError, match=r"3g.40gb cannot start at memory slice 2 .* allowed start slices: 0,4"):
        check_placements(H100, [("3g.40gb", 2)])
    with pytest.raises(MigLayoutError, match=r"1g.10gb at memory slice 5 overlaps 3g.40gb at memory slice 4"):
        check_placements(H100, [("3g.40gb", 4), ("1g.10gb", 5)])


def test_gi_ids_follow_the_driver_numbering():
    ids = {(p.profile.name, p.start): gi_id(A100, p) for p in place(A100, {"1g.5gb": 7})}
    assert sorted(ids.values()) == list(range(7, 14))
    assert [gi_id(A100, p) for p in place(A100, {"3g.20gb": 2})] == [1, 2]
    assert [gi_id(A100, p) for p in place(A100, {"7g.40gb": 1})] == [0]
    assert [gi_id(A30, p) for p in place(A30, {"1g.6gb": 4})] == [3, 4, 5, 6]


MIG_MODELS = [m for m in CATALOG.values() if m.mig_capable]


@st.composite
def candidate_layouts(draw: st.DrawFn) -> tuple[GpuModel, list[tuple[str, int]]]:
    model = draw(st.sampled_from(MIG_MODELS))
    pairs = draw(
        st.lists(
            st.sampled_from([(p.name, s) for p in model.mig_profiles for s in p.placements]), min_size=1, max_size=9
        )
    )
    return model, pairs


def _hardware_accepts(model: GpuModel, pairs: list[tuple[str, int]]) -> bool:
    """An independent statement of the rules: disjoint slots, instance limits, compute budget."""
    slots: list[int] = []
    compute = 0
    for name, start in pairs:
        p = model.profile(name)
        assert p is not None
        slots.extend(range(start, start + p.memory_slices))
        compute += p.compute_slices
    counts = Counter(name for name, _ in pairs)
    limits_ok = all(counts[n] <= model.profile(n).max_instances for n in counts)  # type: ignore[union-attr]
    # Engines: no more of any engine than the full-GPU profile owns (written out, not via engine_budget).
    full = max(model.mig_profiles, key=lambda p: p.memory_slices)
    chosen = [model.profile(n) for n, _ in pairs]
    engines_ok = (
        all(
            sum(getattr(p, attr) for p in chosen) <= max(getattr(q, attr) for q in model.mig_profiles)
            for attr in ("copy_engines", "decoders", "encoders", "jpeg", "ofa")
        )
        and full is not None
    )
    return len(slots) == len(set(slots)) and compute <= model.compute_slices and limits_ok and engines_ok


@settings(max_examples=400, deadline=None)
@given(candidate_layouts())
def test_explicit_layout_accepted_iff_hardware_accepts(case):
    model, pairs = case
    ok = _hardware_accepts(model, pairs)
    if ok:
        placed = check_placements(model, pairs)
        assert sorted((p.profile.name, p.start) for p in placed) == sorted(pairs)
    else:
        with pytest.raises(MigLayoutError):
            check_placements(model, pairs)


@settings(max_examples=400, deadline=None)
@given(candidate_layouts())
def test_counts_that_fit_somewhere_are_always_placed(case):
    """``place`` is complete: whenever some placement of the counts exists, it finds one, and it is valid."""
    model, pairs = case
    counts = Counter(name for name, _ in pairs)
    if _hardware_accepts(model, pairs):
        placed = place(model, counts)
        check_placements(model, [(p.profile.name, p.start) for p in placed])
        assert Counter(p.profile.name for p in placed) == counts
    else:
        try:
            placed = place(model, counts)
        except MigLayoutError:
            return
        # Another arrangement of the same counts may fit: it must then be valid.
        assert _hardware_accepts(model, [(p.profile.name, p.start) for p in placed])
