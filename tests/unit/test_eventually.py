"""The suite's one polling helper: it returns once a check holds and fails loudly, naming it, when none does."""

from __future__ import annotations

import pytest

from tests.eventually import WaitTimeout, eventually


async def test_returns_the_first_truthy_value():
    calls = []

    def check() -> list[int]:
        calls.append(1)
        return calls if len(calls) == 3 else []

    assert await eventually(check, "three calls", interval=0.001) == [1, 1, 1]


async def test_an_async_check_is_awaited():
    seen = []

    async def check() -> bool:
        seen.append(1)
        return len(seen) > 1

    assert await eventually(check, "two calls", interval=0.001) is True


async def test_times_out_naming_what_the_timeout_and_the_last_value():
    with pytest.raises(AssertionError) as failure:
        await eventually(lambda: 0, "the answer", 0.05, interval=0.01)
    assert str(failure.value) == "timed out after 0.05s waiting for the answer; last value: 0"


async def test_a_predicate_returning_none_keeps_polling():
    """``labels.get(key)`` is None while the label is missing: that is not yet, not a pass."""
    labels: dict[str, str] = {}
    with pytest.raises(AssertionError, match="last value: None"):
        await eventually(lambda: labels.get("gpu"), "the label", 0.05, interval=0.01)


async def test_an_assert_style_check_holds_once_it_stops_raising():
    calls = []

    async def check() -> None:
        calls.append(1)
        assert len(calls) >= 3, f"only {len(calls)} call(s)"

    await eventually(check, "three calls", interval=0.001)
    assert len(calls) == 3


async def test_the_last_assertion_and_the_detail_are_in_the_failure():
    def check() -> None:
        raise AssertionError("still one")

    with pytest.raises(AssertionError) as failure:
        await eventually(check, "two", 0.05, interval=0.01, detail=lambda: "the daemon's log")
    assert "waiting for two; last assertion: still one" in str(failure.value)
    assert str(failure.value).endswith("\nthe daemon's log")


async def test_any_other_exception_fails_at_once():
    calls = []

    def check() -> bool:
        calls.append(1)
        raise RuntimeError("the daemon exited")

    with pytest.raises(RuntimeError, match="the daemon exited"):
        await eventually(check, "anything", 5.0)
    assert len(calls) == 1


async def test_a_timeout_is_its_own_assertion_error():
    """Code that turns a timeout into an answer catches WaitTimeout, never an assert of its own predicate."""
    with pytest.raises(WaitTimeout) as caught:
        await eventually(lambda: False, "never", 0.05)
    assert isinstance(caught.value, AssertionError)


async def test_an_assert_in_a_predicate_fails_at_once_when_asked():
    calls = []

    def broken() -> bool:
        calls.append(1)
        raise AssertionError("a bug in the predicate")

    with pytest.raises(AssertionError, match="a bug in the predicate") as caught:
        await eventually(broken, "something", 5.0, assertions_mean_not_yet=False)
    assert not isinstance(caught.value, WaitTimeout)
    assert calls == [1]
