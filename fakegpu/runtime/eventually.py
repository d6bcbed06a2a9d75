"""The one polling helper: wait until a condition holds, or fail naming it.

Daemons, watchers and kubelets react in their own tasks, so whoever waits for their effects (a test, the
kubelet emulator's ``wait_for``, the pytest fixture) polls. Every poll goes through :func:`eventually` so
that a condition that never holds always fails the same loud way (an ``AssertionError`` naming what was
awaited, how long, and what was seen last) and never hangs or returns quietly. It lives here, below the
harness, because product code cannot import ``tests/``; the test suite imports it from ``tests/eventually.py``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

_SHOWN = 500  # characters of the last value or assertion kept in the failure message


class WaitTimeout(AssertionError):
    """The condition never held: an ``AssertionError``, so a test that waits fails as an assertion does, and
    its own class, so code that turns a timeout into an answer catches the timeout and nothing else."""


@overload
async def eventually(
    check: Callable[[], Awaitable[T]],
    what: str,
    timeout: float = ...,
    *,
    interval: float = ...,
    detail: Callable[[], object] | None = ...,
    assertions_mean_not_yet: bool = ...,
) -> T: ...


@overload
async def eventually(
    check: Callable[[], T],
    what: str,
    timeout: float = ...,
    *,
    interval: float = ...,
    detail: Callable[[], object] | None = ...,
    assertions_mean_not_yet: bool = ...,
) -> T: ...


async def eventually(
    check: Callable[[], Any],
    what: str,
    timeout: float = 5.0,
    *,
    interval: float = 0.02,
    detail: Callable[[], object] | None = None,
    assertions_mean_not_yet: bool = True,
) -> Any:
    """Call ``check`` (sync or async) every ``interval`` seconds until it holds; return what it returned.

    An ``AssertionError`` from the check means "not yet" (with ``assertions_mean_not_yet=False`` it fails
    at once, like any other exception: for predicates, whose asserts are bugs, not conditions). A check
    declared ``-> None`` (assert-style) holds once it returns without one; any other check holds once it
    returns a truthy value, so a predicate that returns ``None`` (``labels.get(key)``) keeps polling instead
    of passing by accident.
    Any other exception is not "not yet" but a failure: it propagates at once (a check can fail fast
    that way, e.g. when the daemon it waits on has exited).

    After ``timeout`` seconds it raises :class:`WaitTimeout` (an ``AssertionError``) naming ``what``, the
    timeout, the last value or assertion seen, and, if given, ``detail()`` (e.g. a daemon's last log lines).
    """
    asserts_only = _declared_none(check)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            result = check()
            value = await result if inspect.isawaitable(result) else result
        except AssertionError as exc:
            if not assertions_mean_not_yet:
                raise
            last = f"last assertion: {exc}"
        else:
            if value or (asserts_only and value is None):
                return value
            last = f"last value: {value!r}"
        if loop.time() >= deadline:
            message = f"timed out after {timeout}s waiting for {what}; {last[:_SHOWN]}"
            if detail is not None:
                message += f"\n{detail()}"
            raise WaitTimeout(message)
        await asyncio.sleep(interval)


def _declared_none(check: Callable[..., object]) -> bool:
    """Whether ``check`` is declared to return ``None`` (a string under ``from __future__ import annotations``)."""
    try:
        declared = inspect.signature(check).return_annotation
    except (TypeError, ValueError):  # a builtin or a callable object without a signature
        return False
    return declared is None or declared == "None"
