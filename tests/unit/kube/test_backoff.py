"""The one retry policy: doubling from RETRY_PAUSE up to MAX_RETRY_PAUSE, less a random part of up to half."""

from __future__ import annotations

import pytest

from fakegpu.kube.backoff import JITTER, MAX_RETRY_PAUSE, RETRY_PAUSE, jittered_pause, retry_pause


def test_failed_watches_back_off_exponentially_up_to_a_cap():
    assert [retry_pause(n) for n in (1, 2, 3)] == [RETRY_PAUSE, 2 * RETRY_PAUSE, 4 * RETRY_PAUSE]
    assert retry_pause(50) == retry_pause(10_000) == MAX_RETRY_PAUSE == 30.0


def test_a_faster_first_pause_doubles_the_same_way():
    assert [retry_pause(n, first=0.1, cap=0.3) for n in (1, 2, 3)] == [0.1, 0.2, 0.3]


@pytest.mark.parametrize("failures", [1, 2, 5, 50])
def test_the_jitter_takes_off_at_most_half(failures):
    longest = retry_pause(failures)
    assert jittered_pause(failures, rand=lambda: 0.0) == longest
    assert jittered_pause(failures, rand=lambda: 1.0) == longest * (1 - JITTER) == longest / 2
    assert all(longest / 2 <= jittered_pause(failures) <= longest for _ in range(100))


def test_pauses_of_many_daemons_are_spread():
    """Daemons that lost the API server together do not all come back in the same instant."""
    assert len({jittered_pause(3) for _ in range(20)}) > 10
