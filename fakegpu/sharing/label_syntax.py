"""Kubernetes' rules for label keys and values, so no label fakegpu writes is refused by the API server.

A key is a qualified name: an optional prefix (a DNS-1123 subdomain of at most 253 characters) and a
slash, then a name of at most 63 characters that starts and ends alphanumeric with ``-``, ``_``, ``.``
inside. A value is empty or such a name (``k8s.io/apimachinery/pkg/util/validation``:
``IsQualifiedName``, ``IsValidLabelValue``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_NAME = 63
MAX_PREFIX = 253
NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
"""The name part of a qualified name (a label key's name, an extended resource's short name); fullmatch it."""
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
"""An RFC 1123 label (namespaces, device names, node names); fullmatch it, at most 63 characters."""
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
"""An RFC 1123 subdomain (prefixes, driver names, object names); fullmatch it, at most 253 characters."""


def is_dns1123_subdomain(text: str) -> bool:
    """A DNS subdomain of at most 253 characters (a qualified name's prefix, an extended resource's domain)."""
    return len(text) <= MAX_PREFIX and DNS1123_SUBDOMAIN.fullmatch(text) is not None


_NOT_VALUE_CHARS = re.compile(r"[^-A-Za-z0-9_.]")
_UNTRIMMED_EDGES = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


def key_problem(key: str) -> str | None:
    """Why ``key`` is no label key, or None when it is one."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix or len(prefix) > MAX_PREFIX or not DNS1123_SUBDOMAIN.fullmatch(prefix):
            return f"prefix {prefix!r} is not a DNS-1123 subdomain of at most {MAX_PREFIX} characters"
        if "/" in prefix:
            return "a key has at most one '/'"
    if not name or len(name) > MAX_NAME or not NAME_PART.fullmatch(name):
        return f"name {name!r} is not 1-{MAX_NAME} alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
    return None


def value_problem(value: str) -> str | None:
    """Why ``value`` is no label value, or None when it is one."""
    if value == "":
        return None
    if len(value) > MAX_NAME or not NAME_PART.fullmatch(value):
        return f"{value!r} is not at most {MAX_NAME} alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
    return None


def label_problems(labels: Mapping[str, str]) -> list[str]:
    """One line per key or value the API server would refuse (empty when every label is valid)."""
    problems = []
    for key, value in labels.items():
        for problem in (key_problem(key), value_problem(value)):
            if problem is not None:
                problems.append(f"{key}={value}: {problem}")
    return problems


def fit_label_value(text: str) -> str:
    """``text`` made a label value: other characters dropped, cut to 63, non-alphanumeric ends trimmed."""
    value = _NOT_VALUE_CHARS.sub("", text)[:MAX_NAME]
    return _UNTRIMMED_EDGES.sub("", value)
