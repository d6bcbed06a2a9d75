"""Callbacks that run after a piece of node state changes (the live inventory, the GPUs' sharing policies).

The daemons' watchers (ListAndWatch, slice republishing, nvidia-smi files) subscribe to these pure objects
instead of polling them; one small class so every such object subscribes and announces alike.
"""

from __future__ import annotations

from collections.abc import Callable

Listener = Callable[[], None]


class ChangeListeners:
    """The listeners of one object, called in subscription order after each change it announces."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` after every change; returns a function that unsubscribes."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def announce(self) -> None:
        """Call every listener; one that unsubscribes while being called does not disturb the others."""
        for listener in list(self._listeners):
            listener()
