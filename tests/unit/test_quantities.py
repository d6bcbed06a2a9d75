"""Quantities: one parser (exact, guarded against huge exponents) and the API server's canonical form."""

from __future__ import annotations

from fractions import Fraction

import pytest

from fakegpu.sharing.quantities import (
    binary_quantity,
    count_or_quantity,
    decimal_quantity,
    mebibytes,
    parse_quantity,
    quantity_value,
    same_quantity,
)


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


def test_surrounding_whitespace_is_trimmed_like_unmarshal_json():
    assert parse_quantity(" 256Gi\n") == 256 * 2**30


def test_values_are_rounded_away_from_zero_to_whole_nanos():
    assert parse_quantity("1.5n") == Fraction(2, 10**9)
    assert parse_quantity("-1.5n") == Fraction(-2, 10**9)
    assert parse_quantity("1e-30") == Fraction(1, 10**9)
    assert parse_quantity("0e-30") == 0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10Gi", 10 * 2**30),
        ("512Mi", 512 * 2**20),
        ("1G", 10**9),
        ("1.5Gi", 3 * 2**29),
        ("1e3", 1000),
        ("1E3", 1000),
        ("2E", 2 * 10**18),
        ("100m", 1),
        (1073741824, 2**30),
        ("9223372036854775807", 2**63 - 1),
    ],
)
def test_value_is_rounded_up_to_an_integer(value, expected):
    assert quantity_value(value) == expected


@pytest.mark.parametrize("value", ["", "Gi", "1 Gi", "1GB", True, 1.5, None])
def test_bad_quantities(value):
    with pytest.raises(ValueError, match="is not a quantity"):
        quantity_value(value)


@pytest.mark.parametrize("value", ["1e999999", "1e999999999", "9223372036854775808", "8Ei", "1e5000"])
def test_huge_quantities_are_refused_at_once(value, timing):
    with (
        timing.at_most(1.0, f"refusing {value}"),
        pytest.raises(ValueError, match=r"is larger than any Kubernetes quantity \(at most 2\^63-1\)"),
    ):
        parse_quantity(value)


def test_tiny_exponents_cost_nothing(timing):
    with timing.at_most(1.0, "parsing 1e-999999999"):
        assert quantity_value("1e-999999999") == 1


def test_quantities_compare_by_value_not_by_text():
    assert same_quantity("1k", "1000") and same_quantity("262144Mi", "256Gi") and same_quantity(8, "8")
    assert not same_quantity("1k", "1001") and not same_quantity(None, "1")
    assert same_quantity("weird", "weird") and not same_quantity("weird", "1")


def test_counts_become_quantities_and_quantities_stay():
    assert count_or_quantity(2000) == "2k"
    assert count_or_quantity("40Gi") == "40Gi"
