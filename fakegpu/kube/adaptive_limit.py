"""How many requests a bulk job keeps in flight, adapting to what the API server allows.

API Priority and Fairness answers an overloaded flow with 429 and ``Retry-After``; a client that keeps the
same number of requests in flight just queues more of them behind the pause. So, as TCP does, the limit is
halved on a 429 and grows by one after as many successes in a row as the limit is (additive increase,
multiplicative decrease), between 1 and the ``--concurrency`` the user gave.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress


class AdaptiveLimit:
    def __init__(self, ceiling: int) -> None:
        if ceiling < 1:
            raise ValueError(f"concurrency must be at least 1, got {ceiling}")
        self.ceiling = ceiling
        self.limit = ceiling
        self.lowest = ceiling
        """The lowest the limit went: what the server allowed at its busiest."""
        self.throttles = 0
        self._in_flight = 0
        self._streak = 0
        self._changed = asyncio.Condition()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self._changed:
            await self._changed.wait_for(lambda: self._in_flight < self.limit)
            self._in_flight += 1
        try:
            yield
        finally:
            async with self._changed:
                self._in_flight -= 1
                self._changed.notify()  # one slot freed: one waiter (waking all costs O(waiters) per release)

    def throttled(self) -> None:
        """The server answered 429: halve the limit."""
        self.throttles += 1
        self._streak = 0
        self.limit = max(1, self.limit // 2)
        self.lowest = min(self.lowest, self.limit)

    def succeeded(self) -> None:
        self._streak += 1
        if self._streak >= self.limit and self.limit < self.ceiling:
            self._streak = 0
            self.limit += 1
            self._wake()  # the new slot

    def _wake(self) -> None:
        async def notify() -> None:
            async with self._changed:
                self._changed.notify()

        with suppress(RuntimeError):  # no loop running: nobody can be waiting
            asyncio.get_running_loop().create_task(notify())
