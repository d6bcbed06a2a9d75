"""The bulk-job concurrency limit: halved on a 429, grown back by one after a streak of successes."""

from __future__ import annotations

import asyncio

import pytest

from fakegpu.kube.adaptive_limit import AdaptiveLimit


def test_a_429_halves_the_limit_down_to_one_and_successes_grow_it_back():
    limit = AdaptiveLimit(16)
    limit.throttled()
    assert limit.limit == 8
    for _ in range(5):
        limit.throttled()
    assert limit.limit == 1 and limit.lowest == 1 and limit.throttles == 6
    limit.succeeded()  # a streak as long as the limit (1) grows it by one
    assert limit.limit == 2
    limit.succeeded()
    assert limit.limit == 2
    limit.succeeded()
    assert limit.limit == 3
    for _ in range(1000):
        limit.succeeded()
    assert limit.limit == 16  # never above the ceiling


def test_the_ceiling_must_be_at_least_one():
    with pytest.raises(ValueError, match="at least 1"):
        AdaptiveLimit(0)


async def test_slots_never_exceed_the_limit_in_force():
    limit = AdaptiveLimit(4)
    limit.throttled()  # 2
    in_flight = 0
    highest = 0

    async def job() -> None:
        nonlocal in_flight, highest
        async with limit.slot():
            in_flight += 1
            highest = max(highest, in_flight)
            await asyncio.sleep(0.001)  # time passing: the job holds its slot a while, so others queue
            in_flight -= 1

    await asyncio.gather(*(job() for _ in range(20)))
    assert highest == 2
