"""How hard the reliability suites push: a short profile for CI, a long one on demand (``--soak``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    kubelet_restarts: int
    plugin_restarts: int
    dra_restarts: int
    concurrent_allocates: int
    concurrent_streams: int
    concurrent_prepares: int
    fuzz_examples: int


SHORT = Profile(
    name="short",
    kubelet_restarts=100,
    plugin_restarts=10,
    dra_restarts=10,
    concurrent_allocates=1000,
    concurrent_streams=100,
    concurrent_prepares=200,
    fuzz_examples=60,
)
LONG = Profile(
    name="long",
    kubelet_restarts=100,
    plugin_restarts=100,
    dra_restarts=100,
    concurrent_allocates=1000,
    concurrent_streams=100,
    concurrent_prepares=200,
    fuzz_examples=600,
)


LONG_SIZES = (1_000, 100_000, 1_000_000)
"""Lengths of the over-long strings the RPC fuzzer sends (device IDs, names), in characters."""
BIG_COUNTS = (1_000, 10_000)
"""Sizes of the over-large lists the RPC fuzzer sends (device IDs, claims)."""
