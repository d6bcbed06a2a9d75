"""GFD's ``--sleep-interval``: a Go duration (``60s``, ``1m30s``) or ``infinite`` (label once per run).

GFD reads the flag (env ``GFD_SLEEP_INTERVAL``, config ``flags.gfd.sleepInterval``) as a Go
``time.Duration``; ``infinite`` asks for the labels to be written once per run and never refreshed. (The GFD
``cmd/gpu-feature-discovery/main.go`` read for this parses the flag with urfave/cli's ``DurationFlag``, which
knows no ``infinite``: the README's "Differences from NVIDIA" says so.) The duration grammar is Go's
``time.ParseDuration`` (decimal numbers, each with a unit ``ns``, ``us``, ``µs``, ``ms``, ``s``, ``m``, ``h``;
``0`` alone needs none), so a value a DaemonSet passes GFD means the same here. A config file may also give a
number, which NVIDIA's ``api/config/v1/duration.go`` reads as nanoseconds.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

from fakegpu.sharing.errors import SpecError

INFINITE: Final = "infinite"
DEFAULT: Final = "60s"
"""GFD's default (``cmd/gpu-feature-discovery/main.go``: ``60 * time.Second``)."""

_NANOSECONDS: Final = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_TERM = re.compile(r"([0-9]*(?:\.[0-9]*)?)([^0-9.]*)")
_MAX_NANOSECONDS: Final = 1 << 63
"""Go accumulates a duration in a uint64 and refuses more than 2^63 ns on the way (``-2^63`` is the least
``time.Duration``), then more than ``2^63 - 1`` for a positive one: ``time: invalid duration``."""


def go_duration_seconds(text: str) -> float:
    """Seconds of a Go duration; ValueError with Go's own text (``time: invalid duration "x"``) if not one."""
    body = text
    sign = 1.0
    if body[:1] in ("-", "+"):
        sign = -1.0 if body[0] == "-" else 1.0
        body = body[1:]
    if body == "0":
        return 0.0
    if not body:
        raise ValueError(f'time: invalid duration "{text}"')
    total = Decimal(0)  # Go counts whole nanoseconds; exact decimals keep 30000000000ns at 30 s
    position = 0
    while position < len(body):
        match = _TERM.match(body, position)
        assert match is not None  # the pattern matches the empty string
        number, unit = match.groups()
        if number in ("", "."):
            raise ValueError(f'time: invalid duration "{text}"')
        if not unit:
            raise ValueError(f'time: missing unit in duration "{text}"')
        if unit not in _NANOSECONDS:
            raise ValueError(f'time: unknown unit "{unit}" in duration "{text}"')
        whole, _, fraction = number.partition(".")
        if int(whole or "0") > _MAX_NANOSECONDS // _NANOSECONDS[unit]:  # before Decimal's 28 digits round it
            raise ValueError(f'time: invalid duration "{text}"')
        total += (int(whole or "0") + Decimal(f"0.{fraction or 0}")) * _NANOSECONDS[unit]
        if total > _MAX_NANOSECONDS:
            raise ValueError(f'time: invalid duration "{text}"')
        position = match.end()
    if sign > 0 and total > _MAX_NANOSECONDS - 1:
        raise ValueError(f'time: invalid duration "{text}"')
    return sign * float(total / 1_000_000_000)


def sleep_interval_seconds(value: str, origin: str) -> float | None:
    """The pause between labelling passes, None for ``infinite``; a SpecError naming ``origin`` otherwise.

    GFD would spin on a zero or negative interval (``time.After`` fires at once); fakegpu refuses it."""
    if value == INFINITE:
        return None
    try:
        seconds = go_duration_seconds(value)
    except ValueError as exc:
        raise SpecError(
            origin, f"invalid sleep interval {value!r}: {exc} (expected a Go duration such as 60s, or {INFINITE})"
        ) from None
    if seconds <= 0:
        raise SpecError(origin, f"invalid sleep interval {value!r}: must be positive, or {INFINITE}")
    return seconds


def from_config_file(value: str | int | float) -> str:
    """A ``flags.gfd.sleepInterval`` value as flag text: a number is nanoseconds, as NVIDIA decodes it."""
    if isinstance(value, str):
        return value
    return f"{value}ns"
