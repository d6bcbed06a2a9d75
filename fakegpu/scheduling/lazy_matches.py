"""A request's matching devices, found as the search needs them.

The scheduler evaluates a request's selectors device by device while it fills the request and stops once
the request is met (kubernetes ``staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/
allocator_stable.go`` ``allocateOne``, v1.36): a selector that fails at run time on a later device only
aborts the allocation if the search gets that far. Matches found stay cached for the next look.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from fakegpu.scheduling.device_pools import Device


class LazyMatches:
    """The devices of ``source`` that pass ``test``, in order, tested only when asked for."""

    def __init__(self, source: Iterable[Device], test: Callable[[Device], bool]) -> None:
        self._source: Iterator[Device] = iter(source)
        self._test = test
        self._found: list[Device] = []
        self._done = False

    def at(self, index: int) -> Device | None:
        """The ``index``-th matching device, or None when there are fewer."""
        while len(self._found) <= index and not self._done:
            device = next(self._source, None)
            if device is None:
                self._done = True
            elif self._test(device):
                self._found.append(device)
        return self._found[index] if index < len(self._found) else None

    def all(self) -> list[Device]:
        """Every matching device (tests them all)."""
        while not self._done:
            self.at(len(self._found))
        return list(self._found)
