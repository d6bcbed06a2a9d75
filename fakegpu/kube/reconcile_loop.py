"""The one reconcile loop: work again when asked or every resync period, and back off while it fails.

The DRA driver's slice publisher and the device plugin's node sync both keep API objects as they should
be: a change marks them dirty, a timer catches what no event said, and a failed attempt is retried by the
one backoff policy (``fakegpu.kube.backoff``) until it succeeds, without hammering a server that is down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fakegpu.kube.backoff import RETRY_PAUSE, jittered_pause
from fakegpu.kube.event_wait import wait_event


async def reconcile_forever(
    dirty: asyncio.Event,
    resync_interval: float,
    reconcile: Callable[[], Awaitable[object]],
    on_failure: Callable[[Exception, int, float], object],
    *,
    first_pause: float = RETRY_PAUSE,
) -> None:
    """Run ``reconcile`` (its result is not used) whenever ``dirty`` is set, or ``resync_interval`` seconds
    after the last run.

    A failure is reported to ``on_failure(exc, attempt, pause)`` (which logs and counts it: ``attempt`` is
    the count of failures in a row, ``pause`` the seconds before the next try, see ``retry_note``), then
    retried after that pause; the failure count resets on success. Runs until cancelled.
    """
    failures = 0
    while True:
        await wait_event(dirty, resync_interval)
        dirty.clear()
        try:
            await reconcile()
        except Exception as exc:
            failures += 1
            pause = jittered_pause(failures, first=first_pause)
            on_failure(exc, failures, pause)
        else:
            failures = 0
            continue
        await asyncio.sleep(pause)
        dirty.set()
