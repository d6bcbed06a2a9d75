"""MIG placement rules: which GPU-instance layouts fit a board, and a deterministic placement for them.

A GPU instance occupies a contiguous run of memory slices starting at one of its profile's allowed
start slots; instances may not overlap, the compute slices they use may not exceed the board's, and no
profile may exceed its instance limit. These are the rules the driver enforces when mig-parted or
``nvidia-smi mig -cgi`` creates instances.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fakegpu.sharing.catalog import GpuModel, MigProfile


class MigLayoutError(ValueError):
    """A layout the hardware would refuse; the message says which profile and why."""


@dataclass(frozen=True, order=True)
class Placement:
    """One GPU instance: its profile at a start slot (in memory slices)."""

    start: int
    profile: MigProfile

    @property
    def slots(self) -> range:
        return range(self.start, self.start + self.profile.memory_slices)


def _resolve(model: GpuModel, name: str) -> MigProfile:
    profile = model.profile(name)
    if profile is None:
        supported = ", ".join(p.name for p in model.mig_profiles) or "none (not MIG capable)"
        raise MigLayoutError(f"profile {name} is not supported by {model.product_name}; supported: {supported}")
    return profile


def check_placements(model: GpuModel, placements: Iterable[tuple[str, int]]) -> list[Placement]:
    """Validate explicit (profile, start) pairs exactly as the hardware would; return them sorted."""
    if not model.mig_capable:
        raise MigLayoutError(f"{model.product_name} is not MIG capable")
    resolved: list[Placement] = []
    used: dict[int, str] = {}
    for name, start in placements:
        profile = _resolve(model, name)
        if start not in profile.placements:
            allowed = ",".join(str(s) for s in profile.placements)
            raise MigLayoutError(
                f"profile {name} cannot start at memory slice {start} on {model.product_name}; "
                f"allowed start slices: {allowed}"
            )
        placement = Placement(start, profile)
        for slot in placement.slots:
            if slot in used:
                raise MigLayoutError(
                    f"profile {name} at memory slice {start} overlaps {used[slot]} (both need slice {slot})"
                )
            used[slot] = f"{name} at memory slice {start}"
        resolved.append(placement)
    _check_counts(model, Counter(p.profile.name for p in resolved))
    _check_engines(model, (p.profile for p in resolved))
    compute = sum(p.profile.compute_slices for p in resolved)
    if compute > model.compute_slices:
        raise MigLayoutError(
            f"layout needs {compute} compute slices but {model.product_name} has {model.compute_slices}"
        )
    return sorted(resolved)


_ENGINES = (
    ("copy_engines", "copy engines"),
    ("decoders", "decoders"),
    ("encoders", "encoders"),
    ("jpeg", "JPEG engines"),
    ("ofa", "OFA engines"),
)


def engine_budget(model: GpuModel) -> dict[str, int]:
    """The board's engines: the most any one profile owns (the full-GPU profile's, in every table)."""
    return {attr: max(getattr(p, attr) for p in model.mig_profiles) for attr, _ in _ENGINES}


def _check_engines(model: GpuModel, profiles: Iterable[MigProfile]) -> None:
    """Media engines are finite too: on A30 a 1g.6gb+me and a 2g.12gb+me would need two JPEG engines."""
    chosen = list(profiles)
    budget = engine_budget(model)
    for attr, label in _ENGINES:
        need = sum(getattr(p, attr) for p in chosen)
        if need > budget[attr]:
            raise MigLayoutError(f"layout needs {need} {label} but {model.product_name} has {budget[attr]}")


def _check_counts(model: GpuModel, counts: Mapping[str, int]) -> None:
    for name, count in counts.items():
        profile = _resolve(model, name)
        if count > profile.max_instances:
            raise MigLayoutError(
                f"profile {name}: at most {profile.max_instances} instance(s) fit on {model.product_name}, "
                f"{count} requested"
            )


def place(model: GpuModel, counts: Mapping[str, int]) -> list[Placement]:
    """Find a placement for ``{profile: count}``; the same request always gives the same placement.

    Larger instances are placed first, each at its lowest free allowed start slot, backtracking when a
    later instance no longer fits. The search is tiny (at most 8 slots), so it is exhaustive: a layout
    is rejected only when no placement exists.
    """
    if not model.mig_capable:
        raise MigLayoutError(f"{model.product_name} is not MIG capable")
    for name, count in counts.items():
        _resolve(model, name)
        if count < 0:
            raise MigLayoutError(f"profile {name}: count must be >= 0, got {count}")
    wanted = {name: count for name, count in counts.items() if count > 0}
    _check_counts(model, wanted)
    profiles = sorted(
        (_resolve(model, name) for name, count in wanted.items() for _ in range(count)),
        key=lambda p: (-p.memory_slices, -p.compute_slices, p.name),
    )
    memory = sum(p.memory_slices for p in profiles)
    if memory > model.memory_slices:
        raise MigLayoutError(
            f"{_describe(wanted)} needs {memory} memory slices but {model.product_name} has {model.memory_slices}"
        )
    compute = sum(p.compute_slices for p in profiles)
    if compute > model.compute_slices:
        raise MigLayoutError(
            f"{_describe(wanted)} needs {compute} compute slices but {model.product_name} has {model.compute_slices}"
        )
    _check_engines(model, profiles)
    found = _search(profiles, 0, frozenset(), [])
    if found is None:
        raise MigLayoutError(
            f"{_describe(wanted)} has no valid placement on {model.product_name}: the allowed start "
            "slices of these profiles overlap"
        )
    return sorted(found)


def _search(profiles: list[MigProfile], i: int, used: frozenset[int], acc: list[Placement]) -> list[Placement] | None:
    if i == len(profiles):
        return list(acc)
    profile = profiles[i]
    # Instances of the same profile are interchangeable: keep their starts increasing to prune.
    floor = acc[-1].start + 1 if acc and acc[-1].profile == profile else -1
    for start in profile.placements:
        if start < floor:
            continue
        placement = Placement(start, profile)
        slots = set(placement.slots)
        if slots & used:
            continue
        acc.append(placement)
        result = _search(profiles, i + 1, used | slots, acc)
        acc.pop()
        if result is not None:
            return result
    return None


def _describe(counts: Mapping[str, int]) -> str:
    return " + ".join(f"{count}x {name}" for name, count in sorted(counts.items()))


def max_instances(model: GpuModel, profile: MigProfile) -> int:
    """The most instances of one profile that fit at once (mig-parted's ``all-<profile>``)."""
    best = 0
    for count in range(1, profile.max_instances + 1):
        try:
            place(model, {profile.name: count})
        except MigLayoutError:
            break
        best = count
    return best
