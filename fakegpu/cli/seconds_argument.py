"""Seconds given on the command line, up to an hour: one parser, so every flag refuses the same way."""

from __future__ import annotations

import argparse

MAX_SECONDS = 3600.0


def _number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return -1.0  # refused below with the flag's range


def seconds_from_zero(value: str) -> float:
    """An argparse ``type``: 0 to 3600 seconds (0: no pause)."""
    seconds = _number(value)
    if not 0.0 <= seconds <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"expected seconds between 0 and {MAX_SECONDS:g}, found {value!r}")
    return seconds


def positive_seconds(value: str) -> float:
    """An argparse ``type``: more than 0 and at most 3600 seconds."""
    seconds = _number(value)
    if not 0.0 < seconds <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"expected seconds above 0 and at most {MAX_SECONDS:g}, found {value!r}")
    return seconds
