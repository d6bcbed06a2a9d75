"""CEL for DeviceClass and request selectors, evaluated as the scheduler does (KEP-4381).

Follows kubernetes ``staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go`` (v1.36): an
expression sees one variable, ``device``, with ``driver``, ``attributes`` and ``capacity`` (maps by
domain, then by name; an unqualified name belongs to the driver's domain), and
``allowMultipleAllocations``. Version attributes are semver values, capacities are quantities, and the
Kubernetes CEL libraries the demos use are provided: ``quantity()`` with ``compareTo``,
``isGreaterThan``, ``isLessThan``, ``asInteger``, ``asApproximateFloat``, ``isInteger``, ``sign``,
``add``, ``sub``; ``semver()`` / ``isSemver()`` with ``major``, ``minor``, ``patch``, ``compareTo``,
``isGreaterThan``, ``isLessThan``; the strings extension's ``lowerAscii`` and ``upperAscii``.

The evaluator is ``cel-python`` (``celpy``), from the ``pytest`` extra (only the test harness allocates);
a missing attribute or domain is a runtime error ("no such key"), as in the scheduler, where it aborts
the allocation instead of skipping the device.
"""

from __future__ import annotations

import functools
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

try:
    import celpy
    from celpy import celtypes
    from celpy.celparser import CELParseError
    from celpy.evaluation import CELEvalError
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "fakegpu.scheduling evaluates CEL selectors with cel-python, which the daemons do not need: "
        "install fakegpu[pytest] (pip install 'fakegpu[pytest]')"
    ) from exc

from fakegpu.sharing.quantities import parse_quantity


class CelError(ValueError):
    """An expression that does not compile, or failed while evaluating for one device."""


class CelCompileError(CelError):
    """An expression that does not compile: the same for every device, so reported without one."""


@functools.total_ordering
@dataclass(frozen=True)
class Quantity:
    """A Kubernetes quantity inside CEL (``device.capacity[...]`` and ``quantity('10Gi')``)."""

    value: Fraction

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value < other.value


_SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?"
)


@dataclass(frozen=True)
class Semver:
    """A semantic version inside CEL (version attributes and ``semver('1.2.3')``): ordered by
    major, minor, patch, and a pre-release before its release."""

    major: int
    minor: int
    patch: int
    pre: str = ""

    def key(self) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
        parts = tuple((0, int(p)) if p.isdigit() else (1, p) for p in self.pre.split(".")) if self.pre else ()
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, parts)


def parse_semver(text: str) -> Semver:
    match = _SEMVER.fullmatch(text)
    if match is None:
        raise CelError(f"{text!r} is not a semantic version (expected e.g. 1.2.3)")
    return Semver(int(match[1]), int(match[2]), int(match[3]), match[4] or "")


def _cmp(a: Any, b: Any) -> int:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.value > b.value) - (a.value < b.value)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return (a.key() > b.key()) - (a.key() < b.key())
    raise CelError(f"cannot compare {type(a).__name__} with {type(b).__name__}")


def _quantity(text: Any) -> Quantity:
    try:
        return Quantity(parse_quantity(str(text)))
    except ValueError as exc:
        raise CelError(f"quantity(): {exc}") from None


def _semver(text: Any) -> Semver:
    return parse_semver(str(text))


def _is_semver(text: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_SEMVER.fullmatch(str(text)) is not None)


def _q(value: Any) -> Quantity:
    if not isinstance(value, Quantity):
        raise CelError(f"expected a quantity, found {type(value).__name__}")
    return value


FUNCTIONS: dict[str, Any] = {
    "quantity": _quantity,
    "isQuantity": lambda t: celtypes.BoolType(_is_quantity(t)),
    "compareTo": lambda a, b: celtypes.IntType(_cmp(a, b)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_cmp(a, b) > 0),
    "isLessThan": lambda a, b: celtypes.BoolType(_cmp(a, b) < 0),
    "asInteger": lambda q: celtypes.IntType(math.ceil(_q(q).value)),
    "asApproximateFloat": lambda q: celtypes.DoubleType(float(_q(q).value)),
    "isInteger": lambda q: celtypes.BoolType(_q(q).value.denominator == 1),
    "sign": lambda q: celtypes.IntType((_q(q).value > 0) - (_q(q).value < 0)),
    "add": lambda a, b: Quantity(_q(a).value + (_q(b).value if isinstance(b, Quantity) else Fraction(int(b)))),
    "sub": lambda a, b: Quantity(_q(a).value - (_q(b).value if isinstance(b, Quantity) else Fraction(int(b)))),
    "semver": _semver,
    "isSemver": _is_semver,
    "major": lambda v: celtypes.IntType(v.major),
    "minor": lambda v: celtypes.IntType(v.minor),
    "patch": lambda v: celtypes.IntType(v.patch),
    "lowerAscii": lambda s: celtypes.StringType(str(s).lower()),
    "upperAscii": lambda s: celtypes.StringType(str(s).upper()),
}
"""The Kubernetes CEL library functions a DRA selector may call (member calls arrive as ``f(target, args)``)."""


def _is_quantity(text: Any) -> bool:
    try:
        parse_quantity(str(text))
    except ValueError:
        return False
    return True


def _environment() -> Any:
    """cel-python's environment, without its side effect: ``celpy.Environment()`` raises the interpreter's
    recursion limit to 2500 for everyone, which changes how deep the user's (and fakegpu's own) recursive
    parsers go before ``RecursionError``. Selectors are shallow; the process keeps its own limit."""
    limit = sys.getrecursionlimit()
    try:
        return celpy.Environment()
    finally:
        sys.setrecursionlimit(limit)


_ENV = _environment()


@functools.lru_cache(maxsize=512)
def compile_selector(expression: str) -> Any:
    """The compiled program of one selector; CelError with the parser's message if it does not compile."""
    try:
        return _ENV.program(_ENV.compile(expression), functions=FUNCTIONS)
    except CELParseError as exc:
        column = getattr(exc, "column", None)
        where = f" at column {column}" if column else ""
        raise CelCompileError(f"syntax error{where} of {expression!r}") from None


def _attribute_value(value: Mapping[str, Any]) -> Any:
    if "bool" in value:
        return celtypes.BoolType(bool(value["bool"]))
    if "int" in value:
        return celtypes.IntType(int(value["int"]))
    if "version" in value:
        return parse_semver(str(value["version"]))
    return celtypes.StringType(str(value.get("string", "")))


def _by_domain(entries: Mapping[str, Any], driver: str, convert: Any) -> celtypes.MapType:
    """``{"domain/name": v, "name": v}`` as ``{domain: {name: v}}``, unqualified names in the driver's domain."""
    domains: dict[str, dict[celtypes.StringType, Any]] = {}
    for name, value in entries.items():
        domain, _, ident = name.rpartition("/")
        domains.setdefault(domain or driver, {})[celtypes.StringType(ident)] = convert(value)
    return celtypes.MapType({celtypes.StringType(d): celtypes.MapType(v) for d, v in domains.items()})


def device_variable(driver: str, device: Mapping[str, Any]) -> celtypes.MapType:
    """The ``device`` variable for one ResourceSlice device entry of ``driver``."""
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    return celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("attributes"): _by_domain(attributes, driver, _attribute_value),
            celtypes.StringType("capacity"): _by_domain(capacity, driver, lambda c: _quantity(c.get("value", "0"))),
            celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                bool(device.get("allowMultipleAllocations"))
            ),
        }
    )


def selector_matches(expression: str, device: celtypes.MapType) -> bool:
    """Whether the selector holds for ``device`` (from :func:`device_variable`). CelError when it does not
    compile, fails at run time (a missing attribute: "no such key: index"), or is not a boolean."""
    program = compile_selector(expression)
    try:
        result = program.evaluate({"device": device})
    except (CELEvalError, CelError) as exc:
        raise CelError(_eval_message(exc)) from None
    if isinstance(result, CELEvalError):
        raise CelError(_eval_message(result))
    if not isinstance(result, celtypes.BoolType):
        raise CelError(f"must evaluate to bool, found {type(result).__name__}")
    return bool(result)


_MISSING = re.compile(r"no such (?:member in mapping|key)\W+(?:StringType\()?'([^'\\]+)")


def _eval_message(exc: Exception) -> str:
    """cel-go's text for a missing map key (``no such key: index``), also when cel-python reports it inside
    another error (``a || b`` over two failing lookups); the evaluator's first line otherwise."""
    args = exc.args
    if len(args) >= 3 and args[0] == "no such key" and args[2]:
        return f"no such key: {args[2][0]}"
    text = " ".join(str(a) for a in args) + " " + str(exc.__cause__ or "")
    missing = _MISSING.search(text)
    if missing:
        return f"no such key: {missing[1]}"
    first = str(exc.args[0]) if exc.args else str(exc)
    return first.split(" (in activation", 1)[0]
