"""Wall-clock limits fail a test only when ``--timing`` enforces them."""

from __future__ import annotations

import pytest

from tests.timing import Timing


def test_an_enforced_limit_fails_naming_what_and_the_limit():
    with pytest.raises(AssertionError, match=r"the restart took 1\.500s \(limit 1\.0s, enforced by --timing\)"):
        Timing(enforced=True).within(1.5, 1.0, "the restart")
    Timing(enforced=True).within(0.5, 1.0, "the restart")


def test_limits_are_not_checked_by_default():
    Timing(enforced=False).within(100.0, 1.0, "the restart")
    with Timing(enforced=False).at_most(0.0, "anything"):
        pass


def test_at_most_times_the_block():
    with pytest.raises(AssertionError, match="the block took"), Timing(enforced=True).at_most(0.0, "the block"):
        pass
