"""Label and field selectors, parsed and matched the way the Kubernetes API server does (subset).

Label selectors: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``,
comma-separated (AND). Field selectors: ``f=v``, ``f==v``, ``f!=v``, comma-separated (AND), on the
field labels a resource supports; an unset field compares as the empty string.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


class SelectorError(ValueError):
    """The selector cannot be parsed, or uses a field label the resource does not support (HTTP 400)."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: tuple[str, ...] = ()

    def matches(self, present: bool, value: str) -> bool:
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        return not present or value not in self.values  # notin


_LABEL_KEY = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?")
_SET_EXPR = re.compile(r"(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<vals>[^()]*)\)")


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _binary(part: str) -> tuple[str, str, str] | None:
    for op, norm in (("!=", "!="), ("==", "="), ("=", "=")):
        if op in part:
            key, value = part.split(op, 1)
            return key.strip(), norm, value.strip()
    return None


def parse_label_selector(text: str) -> list[Requirement]:
    reqs: list[Requirement] = []
    for raw in _split_top_level(text):
        part = raw.strip()
        if not part:
            continue
        match = _SET_EXPR.fullmatch(part)
        if match:
            values = tuple(v.strip() for v in match["vals"].split(",") if v.strip())
            req = Requirement(match["key"], match["op"], values)
        elif part.startswith("!"):
            req = Requirement(part[1:].strip(), "!exists")
        elif (binary := _binary(part)) is not None:
            req = Requirement(binary[0], binary[1], (binary[2],))
        else:
            req = Requirement(part, "exists")
        if not _LABEL_KEY.fullmatch(req.key):
            raise SelectorError(f"unable to parse requirement: invalid label key {req.key!r} in {text!r}")
        reqs.append(req)
    return reqs


def parse_field_selector(text: str, supported: Sequence[str]) -> list[Requirement]:
    reqs: list[Requirement] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        binary = _binary(part)
        if binary is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        key, op, value = binary
        if key not in supported:
            raise SelectorError(f"field label not supported: {key}")
        reqs.append(Requirement(key, op, (value,)))
    return reqs


def labels_match(reqs: Sequence[Requirement], labels: Mapping[str, str]) -> bool:
    return all(req.matches(req.key in labels, labels.get(req.key, "")) for req in reqs)


def fields_match(reqs: Sequence[Requirement], fields: Mapping[str, str]) -> bool:
    # Every supported field label is always "present"; an unset field has the value "".
    return all(req.matches(True, fields.get(req.key, "")) for req in reqs)
