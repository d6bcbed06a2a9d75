"""The RPCs the device plugins received, in order: what ``fakegpu ctl status`` shows and tests assert on.

One log for the daemon and the test fixture, passed as the ``PluginManager``'s ``on_call``: the daemon
bounds it (a long-running process keeps only the last calls), the fixture keeps every call so a test can
assert on the whole sequence.
"""

from __future__ import annotations

from collections.abc import Iterable

DAEMON_CALL_LIMIT = 500
"""How many of the last calls a daemon keeps for ``fakegpu ctl status``."""

Call = tuple[str, str, tuple[str, ...]]
"""(resource, method, device IDs)."""


class CallLog:
    """Every RPC the plugins received, in order, or with ``limit`` the last ``limit`` of them."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self.calls: list[Call] = []

    def record(self, resource: str, method: str, ids: Iterable[str]) -> None:
        self.calls.append((resource, method, tuple(ids)))
        if self.limit is not None and len(self.calls) > self.limit:
            del self.calls[0]  # a list, not a deque, so a test compares it with one; 500 pointers moved is nothing

    def methods(self, resource: str | None = None) -> list[str]:
        """The methods called, in order, of one resource or of all."""
        return [m for r, m, _ in self.calls if resource is None or r == resource]
