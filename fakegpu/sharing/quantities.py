"""Kubernetes resource quantities: the one parser, and written the way the API server writes them back.

The API server stores every quantity in canonical form (``40960Mi`` comes back as ``40Gi``, ``1000``
as ``1k``). Publishing canonical strings means a slice read back from the server compares equal to
the one we built, so a publisher never sees a phantom difference and never loops on updates.

Parsing follows ``Quantity.UnmarshalJSON``: surrounding whitespace is trimmed, then a number with a
binary suffix, a decimal suffix or a decimal exponent, nothing else. Like a ``Quantity``, a value is
rounded away from zero to whole nanos and none may exceed 2^63-1. The magnitude is checked before any
exact arithmetic, so ``1e999999`` (or ``1e-999999``) costs nothing instead of a million-digit integer
(it once took 30 s of CPU).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, Final

from fakegpu.sharing.errors import shorten

_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = ("", "k", "M", "G", "T", "P", "E")
_BINARY: Final = {s: 1024**i for i, s in enumerate(_BINARY_SUFFIXES) if s}
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, **{s: 3 * i for i, s in enumerate(_DECIMAL_SUFFIXES) if s}}
"""Decimal suffix -> its power of ten."""
_QUANTITY: Final = re.compile(
    r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"  # number
    r"(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"  # suffix or decimal exponent
)
MAX_QUANTITY: Final = 2**63 - 1
_MAX_QUANTITY_DIGITS: Final = 19
_NANO: Final = Fraction(1, 10**9)
_BELOW_NANO_DIGITS: Final = -11
"""A non-zero number whose leading digit sits this far below the point (after scaling) is under 1n."""


def parse_quantity(value: Any) -> Fraction:
    """The exact value of a quantity (``10Gi``, ``1.5k``, ``100m``, ``1e3``, or a JSON integer).

    Errors say why, e.g. ``'lots' is not a quantity (expected e.g. 10Gi, 512Mi, 1G)``."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{value!r} is not a quantity")
    text = str(value)
    shown = shorten(repr(text), 60)
    m = _QUANTITY.fullmatch(text.strip())
    if not m:
        raise ValueError(f"{shown} is not a quantity (expected e.g. 10Gi, 512Mi, 1G)")
    suffix = m.group(2) or ""
    try:
        number = Decimal(m.group(1))
        if suffix in _BINARY:
            scale = len(str(_BINARY[suffix])) - 1
        elif suffix in _DECIMAL:
            scale = _DECIMAL[suffix]
        else:
            scale = int(suffix[1:]) if suffix else 0
        if number and number.adjusted() + scale > _MAX_QUANTITY_DIGITS:
            raise ValueError(f"{shown} is larger than any Kubernetes quantity (at most 2^63-1)")
    except (InvalidOperation, OverflowError) as exc:
        raise ValueError(f"{shown} is not a quantity") from exc
    if number and number.adjusted() + scale <= _BELOW_NANO_DIGITS:
        return _NANO if number > 0 else -_NANO
    exact = Fraction(number)
    if suffix in _BINARY:
        exact *= _BINARY[suffix]
    elif suffix:
        exact *= Fraction(10) ** scale
    if exact > MAX_QUANTITY:
        raise ValueError(f"{shown} is larger than any Kubernetes quantity (at most 2^63-1)")
    nanos = exact / _NANO
    if nanos.denominator != 1:  # Kubernetes rounds what it cannot hold up, away from zero
        exact = (math.ceil(nanos) if nanos > 0 else math.floor(nanos)) * _NANO
    return exact


def quantity_value(value: Any) -> int:
    """A quantity as an integer, rounded up like ``Quantity.Value()`` (``100m`` -> 1)."""
    return math.ceil(parse_quantity(value))


def same_quantity(have: Any, want: str) -> bool:
    """Whether a quantity read back from the API server (a string or a JSON number; None when absent)
    is the amount ``want`` names, however either is written (``262144Mi`` is ``256Gi``)."""
    if have is None:
        return False
    try:
        return parse_quantity(str(have)) == parse_quantity(want)
    except ValueError:
        return str(have) == want


def decimal_quantity(value: int) -> str:
    """Canonical DecimalSI form of a non-negative integer: ``132`` -> ``132``, ``2000`` -> ``2k``."""
    if value < 0:
        raise ValueError(f"quantity must not be negative, got {value}")
    exponent = 0
    while value and value % 1000 == 0 and exponent < len(_DECIMAL_SUFFIXES) - 1:
        value //= 1000
        exponent += 1
    return f"{value}{_DECIMAL_SUFFIXES[exponent]}"


def binary_quantity(value: int) -> str:
    """Canonical BinarySI form of a non-negative integer (bytes): ``85520809984`` -> ``81559Mi``.

    Like the API server, values below 1024 fall back to the decimal form."""
    if value < 0:
        raise ValueError(f"quantity must not be negative, got {value}")
    if value < 1024:
        return decimal_quantity(value)
    exponent = 0
    while value % 1024 == 0 and exponent < len(_BINARY_SUFFIXES) - 1:
        value //= 1024
        exponent += 1
    return f"{value}{_BINARY_SUFFIXES[exponent]}"


def mebibytes(mib: int) -> str:
    """A memory size given in MiB (what NVML and nvidia-smi report), as a canonical quantity."""
    return binary_quantity(mib * 1024 * 1024)


def count_or_quantity(value: int | str) -> str:
    """A count as its canonical DecimalSI quantity; a string is taken as already a canonical quantity."""
    return value if isinstance(value, str) else decimal_quantity(value)
