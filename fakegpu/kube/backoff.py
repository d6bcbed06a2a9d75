"""The one pause policy for following the API server again after a failure: capped exponential, jittered.

Doubling keeps a daemon from hammering an API server that is down; the cap bounds how stale it can be once
the server is back; the jitter keeps the daemons of many nodes that lost the server together from all
coming back in the same instant.
"""

from __future__ import annotations

import random
from collections.abc import Callable

RETRY_PAUSE = 1.0
"""The pause after the first failure in a row, in seconds; it doubles with each further one."""
MAX_RETRY_PAUSE = 30.0
"""The longest pause, in seconds."""
JITTER = 0.5
"""Up to this fraction of a pause is taken off at random."""


def retry_pause(failures: int, *, first: float = RETRY_PAUSE, cap: float = MAX_RETRY_PAUSE) -> float:
    """The longest pause after ``failures`` failures in a row (1 or more): ``first`` doubled, at most ``cap``."""
    return min(first * 2.0 ** min(failures - 1, 32), cap)


def jittered_pause(
    failures: int,
    *,
    first: float = RETRY_PAUSE,
    cap: float = MAX_RETRY_PAUSE,
    rand: Callable[[], float] = random.random,
) -> float:
    """The pause to take: ``retry_pause`` less a random part of up to ``JITTER`` of it."""
    longest = retry_pause(failures, first=first, cap=cap)
    return longest * (1.0 - JITTER * rand())


def retry_note(attempt: int, pause: float) -> str:
    """``attempt 3, next in 4 s``: what a retried failure's log line says, so a reader sees it back off."""
    shown = f"{pause:.0f}" if pause >= 10 else f"{pause:.1f}".removesuffix(".0")
    return f"attempt {attempt}, next in {shown} s"
