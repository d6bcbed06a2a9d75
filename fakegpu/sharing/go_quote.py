"""Go's ``%q`` of a string, for error texts that must read as NVIDIA's and the kubelet's Go code prints them.

Several copied texts quote a user's value (a flag, a service name); one quoting rule keeps them alike.
"""

from __future__ import annotations


def go_quote(text: str) -> str:
    """``strconv.Quote`` for the texts a flag or a name can hold: backslash and double quote escaped, a
    character that is not printable as ``\\xNN``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in escaped) + '"'
