"""``KubeletEmulator.wait_for`` polls through the one polling helper and keeps its contract: the seconds it
took, or a TimeoutError naming what it waited for and the last value seen (``FakeNode`` and the scenario
runner catch TimeoutError)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fakegpu.kubelet.emulator import KubeletEmulator


async def test_wait_for_returns_the_seconds_it_took(root: Path) -> None:
    kubelet = KubeletEmulator(root / "kubelet")
    flag: list[int] = []
    asyncio.get_running_loop().call_later(0.05, flag.append, 1)
    took = await kubelet.wait_for(lambda: bool(flag), what="the flag")
    assert flag == [1]
    assert 0.0 < took < 5.0


async def test_wait_for_raises_timeout_error_naming_what_and_the_last_value(root: Path) -> None:
    kubelet = KubeletEmulator(root / "kubelet")
    with pytest.raises(TimeoutError, match=r"^timed out after 0\.05s waiting for nothing; last value: False$"):
        await kubelet.wait_for(lambda: False, 0.05, "nothing")


async def test_an_assert_in_the_predicate_propagates_at_once(root: Path) -> None:
    """As before the one polling helper: a failing assert inside a predicate is a bug, not "not yet"."""
    kubelet = KubeletEmulator(root / "kubelet")

    def broken() -> bool:
        raise AssertionError("boom")

    with pytest.raises(AssertionError, match=r"^boom$"):
        await kubelet.wait_for(broken, 5.0, "a broken predicate")
