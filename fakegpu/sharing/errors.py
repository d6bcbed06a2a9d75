"""One error type for every rejected input, so callers can print a single clear line and exit 2."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


class SpecError(ValueError):
    """An input was rejected.

    Carries where it came from (a file, a CLI flag, an environment variable), where in it (a field path
    such as ``gpus[1].migDevices``) and what was wrong, so the printed message needs no traceback.
    """

    def __init__(self, source: str, message: str, location: str | None = None) -> None:
        self.source = source
        self.location = location
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.source}: {self.location}" if self.location else self.source
        return f"{shorten(where, MAX_PART)}: {shorten(self.message, MAX_PART)}"


MAX_PART = 400
"""Longest source or message printed: a huge value echoed back would bury the one line that matters."""


def shorten(text: str, limit: int) -> str:
    """One line, at most ``limit`` characters: the start and end kept, the middle elided."""
    text = " ".join(text.split()) if "\n" in text else text
    if len(text) <= limit:
        return text
    keep = (limit - 5) // 2
    return f"{text[:keep]} ... {text[-keep:]}"


def format_location(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic location tuple as a field path: ``gpus[1].migDevices``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def from_validation_error(source: str, exc: ValidationError) -> SpecError:
    """Turn pydantic's multi-line report into one line naming each bad field and what was expected."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = format_location(tuple(p for p in err["loc"] if not _is_union_tag(p)))
        msg = error_message(err)
        parts.append(f"{loc}: {msg}" if loc else msg)
    first, rest = parts[0], parts[1:]
    if not rest:
        location, _, message = first.partition(": ")
        if message:
            return SpecError(source, message, location)
        return SpecError(source, first)
    return SpecError(source, "; ".join(parts))


def error_message(err: Any) -> str:
    """One pydantic error as a person reads it: our validators' own texts (NVIDIA's, mostly) without
    pydantic's "Value error, " prefix, "unknown field" for extras, and the value that was found."""
    msg = str(err["msg"])
    if err["type"] == "value_error":
        msg = str(err.get("ctx", {}).get("error", msg.removeprefix("Value error, ")))
    elif err["type"] == "extra_forbidden":
        msg = "unknown field"
    elif "input" in err and err["type"] != "missing" and not isinstance(err["input"], (dict, list)):
        msg = f"{msg} (found {shorten(repr(err['input']), 80)})"
    return msg


def _is_union_tag(part: int | str) -> bool:
    # pydantic inserts the name of the union member it tried ("list[...]", "function-after[...]").
    return isinstance(part, str) and ("[" in part or part in ("int", "str", "bool"))
