"""Kubernetes resource quantities, written the way the API server writes them back.

The API server stores every quantity in canonical form (``40960Mi`` comes back as ``40Gi``, ``1000``
as ``1k``). Publishing canonical strings means a slice read back from the server compares equal to
the one we built, so a publisher never sees a phantom difference and never loops on updates.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = ("", "k", "M", "G", "T", "P", "E")
_SUFFIX_VALUES: dict[str, Fraction] = {
    **{s: Fraction(1024**i) for i, s in enumerate(_BINARY_SUFFIXES) if s},
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    **{s: Fraction(1000**i) for i, s in enumerate(_DECIMAL_SUFFIXES) if s},
}
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"  # number
    r"(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"  # decimal exponent or suffix
)


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


def parse_quantity(text: str) -> Fraction:
    """The exact value of a quantity string (``10Gi``, ``1.5k``, ``100m``, ``1e3``)."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, exponent, suffix = match.groups()
    value = Fraction(number)
    if exponent is not None:
        return value * Fraction(10) ** int(exponent[1:])
    return value * _SUFFIX_VALUES[suffix or ""]
