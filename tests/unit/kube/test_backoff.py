"""The one retry policy: doubling from RETRY_PAUSE up to MAX_RETRY_PAUSE, less a random part of up to half."""

from __future__ import annotations

import pytest

from fakegpu.kube.backoff import JITTER, MAX_RETRY_PAUSE, RETRY_PAUSE, jittered_pause, retry_note, retry_pause


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


def test_a_retry_note_shows_the_count_and_the_pause():
    assert retry_note(3, 4.0) == "attempt 3, next in 4 s"
    assert retry_note(1, 0.5) == "attempt 1, next in 0.5 s"
    assert retry_note(1, 0.4499) == "attempt 1, next in 0.4 s"
    assert retry_note(9, 27.6) == "attempt 9, next in 28 s"
