"""MIG profile names derived from memory, with go-nvlib's rounding, so names match real hardware."""

from __future__ import annotations

import math

_MIB = 1024 * 1024
_GIB = 1024 * _MIB


def profile_memory_gb(mig_memory_mib: int, total_memory_mib: int) -> int:
    """The ``<GB>`` in ``<G>g.<GB>gb``: memory rounded up to eighths of the card, times the card's GiB.

    go-nvlib computes ``round(ceil(mig/total*8)/8 * ceil(total/GiB))`` with Go's round-half-away-from-zero;
    using Python's banker's rounding here would turn 23.5 into 24 by luck and 22.5 into 22 by mistake.
    """
    total_bytes = total_memory_mib * _MIB
    eighths = math.ceil(mig_memory_mib * _MIB / total_bytes * 8)
    value = eighths / 8 * math.ceil(total_bytes / _GIB)
    return math.floor(value + 0.5)


def profile_name(compute_slices: int, mig_memory_mib: int, total_memory_mib: int, suffix: str = "") -> str:
    """``<G>g.<GB>gb`` plus an attribute suffix such as ``+me`` (for C == G profiles)."""
    return f"{compute_slices}g.{profile_memory_gb(mig_memory_mib, total_memory_mib)}gb{suffix}"


def resource_suffix(profile: str) -> str:
    """NVIDIA's mixed-strategy resource name part: ``+`` becomes ``.`` (``1g.10gb+me`` -> ``1g.10gb.me``)."""
    return profile.replace("+", ".")
