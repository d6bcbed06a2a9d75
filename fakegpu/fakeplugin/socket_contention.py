"""Two plugins on one kubelet directory: wait for a live peer instead of fighting it, and pace re-serving.

A DaemonSet update with surge, or a demo started beside the DaemonSet, runs two ``fakegpu plugin`` processes
on one ``device-plugins/`` directory. Taking a socket over from a live peer makes the peer see its socket
removed, serve again and take it back, hundreds of times a minute, with the kubelet flipping between them.
So a plugin that finds its socket path served by a live process waits (``PeerWaits``: capped exponential
retries, each logged with its count and pause) until the path is free, and a socket removed again and again
is served again at a falling rate (``ReservePacing``): at once after the first removal, then after a doubling
pause while removals keep coming that no kubelet restart explains (each kubelet start wipes the directory:
the plugin manager starts a new series when ``kubelet.sock`` was re-created).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fakegpu.kube.backoff import retry_pause
from fakegpu.runtime.unix_socket import pid_text

PEER_RETRY = 1.0
"""Seconds before the first look at a socket path a live peer serves; the pause doubles up to ``PEER_RETRY_CAP``."""
PEER_RETRY_CAP = 10.0
"""The longest pause between looks: the waiting plugin takes over within this long once the peer stops."""
RESERVE_PAUSE = 0.5
"""The pause before serving a socket removed a second time in a row; it doubles up to ``RESERVE_PAUSE_CAP``."""
RESERVE_PAUSE_CAP = 10.0
RESERVE_CALM = 30.0
"""A removal this long after the last re-serve starts a new series (served again at once)."""


@dataclass
class PeerWait:
    """One resource waiting for the live process on its socket path."""

    path: Path
    pid: int
    attempts: int
    next_try: float
    pause: float

    def describe(self) -> str:
        return f"another plugin serves {self.path}{pid_text(self.pid)}; waiting for it to stop"


class PeerWaits:
    """The resources whose socket path a live peer serves, and when to look again (bounded backoff)."""

    def __init__(
        self, *, first: float = PEER_RETRY, cap: float = PEER_RETRY_CAP, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.first = first
        self.cap = cap
        self._clock = clock
        self.waiting: dict[str, PeerWait] = {}

    def found_peer(self, name: str, path: Path, pid: int) -> PeerWait:
        """Record one more look that found ``pid`` serving ``path``; the caller logs ``line(wait)``."""
        attempts = self.waiting[name].attempts + 1 if name in self.waiting else 1
        pause = retry_pause(attempts, first=self.first, cap=self.cap)
        wait = PeerWait(path, pid, attempts, self._clock() + pause, pause)
        self.waiting[name] = wait
        return wait

    def due(self) -> list[str]:
        """The waiting resources whose next look is due."""
        now = self._clock()
        return [name for name, wait in self.waiting.items() if now >= wait.next_try]

    def done(self, name: str) -> PeerWait | None:
        """``name`` serves (or is no longer wanted): it waits no more; returns what it waited for, if it did."""
        return self.waiting.pop(name, None)


def wait_line(wait: PeerWait) -> str:
    """``another plugin serves .../nvidia-gpu.sock (pid 1234); waiting for it to stop (attempt 3, next look
    in 4 s)``: the log line of each look."""
    return f"{wait.describe()} (attempt {wait.attempts}, next look in {wait.pause:g} s)"


class ReservePacing:
    """When a removed socket may be served again: at once, then after a doubling pause while removals repeat."""

    def __init__(
        self,
        *,
        first: float = RESERVE_PAUSE,
        cap: float = RESERVE_PAUSE_CAP,
        calm: float = RESERVE_CALM,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.first = first
        self.cap = cap
        self.calm = calm
        self._clock = clock
        self._series: dict[str, tuple[int, float]] = {}
        """Per resource: re-serves in the current series, and when the last one was."""

    def wait_before_reserving(self, name: str) -> float:
        """Seconds until ``name``'s removed socket may be served again (0: now)."""
        count, last = self._series.get(name, (0, 0.0))
        now = self._clock()
        if count == 0 or now - last >= self.calm:
            return 0.0
        return max(0.0, last + retry_pause(count, first=self.first, cap=self.cap) - now)

    def reserved(self, name: str) -> int:
        """Record a re-serve of ``name``; returns how many in a row (1 after a lone removal)."""
        count, last = self._series.get(name, (0, 0.0))
        now = self._clock()
        count = 1 if count == 0 or now - last >= self.calm else count + 1
        self._series[name] = (count, now)
        return count

    def forget(self, name: str) -> None:
        self._series.pop(name, None)
