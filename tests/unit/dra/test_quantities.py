"""Quantities come out in the API server's canonical form, so read-back slices compare equal."""

from __future__ import annotations

from fractions import Fraction

import pytest

from fakegpu.dra.quantities import binary_quantity, decimal_quantity, mebibytes, parse_quantity


@pytest.mark.parametrize(
    ("mib", "text"),
    [(81559, "81559Mi"), (40960, "40Gi"), (4864, "4864Mi"), (1024 * 1024, "1Ti"), (143771, "143771Mi")],
)
def test_mebibytes_are_canonical(mib, text):
    assert mebibytes(mib) == text
    assert parse_quantity(text) == mib * 2**20


def test_small_and_decimal_values():
    assert binary_quantity(0) == "0"
    assert binary_quantity(1) == "1"
    assert binary_quantity(1000) == "1k"
    assert binary_quantity(1023) == "1023"
    assert binary_quantity(1024) == "1Ki"
    assert decimal_quantity(132) == "132"
    assert decimal_quantity(2000) == "2k"
    assert decimal_quantity(1500) == "1500"
    with pytest.raises(ValueError):
        decimal_quantity(-1)


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", 1), ("1.5k", 1500), ("100m", Fraction(1, 10)), ("1e3", 1000), ("2Gi", 2 * 2**30), (".5", Fraction(1, 2))],
)
def test_parse(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "1 Gi", "1gi", "1.2.3"])
def test_parse_rejects_garbage(text):
    with pytest.raises(ValueError):
        parse_quantity(text)
