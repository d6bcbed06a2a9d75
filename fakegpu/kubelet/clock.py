"""The emulator's clock: monotonic time that a test or scenario can move forward."""

from __future__ import annotations

import time


class EmulatorClock:
    """Grace periods (5 min for a vanished plugin) are measured on this clock, so a test can
    ``advance(300)`` instead of waiting five minutes."""

    def __init__(self) -> None:
        self._offset = 0.0

    def now(self) -> float:
        return time.monotonic() + self._offset

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        self._offset += seconds
