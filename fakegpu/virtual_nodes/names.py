"""Virtual node names: ``<prefix><index>`` for one pool, ``<prefix><pool>-<index>`` for several.

Indexes are zero-padded to four digits (``fakegpu-virtual-0000``) whatever the count, so re-running with a
larger ``--count`` keeps the existing names and ``kubectl get nodes`` lists them in order up to 9999.
Names must be DNS-1123 labels of at most 63 characters: a Node name may be longer, but it is also the
value of the ``kubernetes.io/hostname`` label, which may not.

The prefix is also a label value on every node and slice (``prefix_label_value``), so ``--delete`` selects
exactly the nodes of one prefix: ``fakegpu-virtual-`` must not take the nodes of ``fakegpu-virtual-team2-``.
"""

from __future__ import annotations

import hashlib
import re

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.label_syntax import DNS1123_LABEL, value_problem

DEFAULT_PREFIX = "fakegpu-virtual-"
INDEX_WIDTH = 4
MAX_NAME_LENGTH = 63
_NOT_NAME_CHARS = re.compile(r"[^a-z0-9]+")


def prefix_label_value(prefix: str) -> str:
    """``prefix`` as a label value, one to one, reading as the prefix in the common case: a label value may
    not end with ``-``, so exactly one trailing dash is dropped (``kw-gpu-`` -> ``kw-gpu``), none becomes
    ``.0`` (``kw-gpu`` -> ``kw-gpu.0``, so it differs from ``kw-gpu-``) and n > 1 become ``.<n>``; a name
    prefix has no dots, so the suffix cannot be confused with the stem. A prefix that still is no label
    value (or too long for one; only ``--delete`` lets such a prefix through) becomes a digest."""
    stem = prefix.rstrip("-")
    dashes = len(prefix) - len(stem)
    value = stem if dashes == 1 else f"{stem}.{dashes}"
    return _checked(prefix, stem, value)


def prefix_label_values(prefix: str) -> list[str]:
    """Every value a node or slice of ``prefix`` may carry: today's first, then for a prefix with one
    trailing dash the ``<stem>.1`` that versions before this wrote, so ``--delete`` and the leftover check
    still find the nodes they labelled. That legacy value is nobody's value today (no prefix now maps to
    ``.1``). A prefix without a trailing dash gets no legacy value: its old one, the bare stem, is now the
    value of ``<stem>-``, whose nodes it must not take; values with n > 1 dashes did not change."""
    stem = prefix.rstrip("-")
    dashes = len(prefix) - len(stem)
    values = [prefix_label_value(prefix)]
    if dashes == 1:
        legacy = _checked(prefix, stem, f"{stem}.1")
        if legacy not in values:
            values.append(legacy)
    return values


def _checked(prefix: str, stem: str, value: str) -> str:
    """``value``, or a digest of ``prefix`` when the stem is empty or has dots or the value is no label value."""
    if not stem or "." in stem or value_problem(value) is not None:
        return "sha256-" + hashlib.sha256(prefix.encode()).hexdigest()[:40]
    return value


def node_name(prefix: str, index: int, pool: str | None = None) -> str:
    """The name of the ``index``-th node (from 0) of a pool; ``pool`` is None with a single pool."""
    middle = f"{pool}-" if pool else ""
    return f"{prefix}{middle}{index:0{INDEX_WIDTH}d}"


def pool_name_from_stem(stem: str, source: str) -> str:
    """A node spec file's stem as a name part: lower case, runs of other characters become one ``-``."""
    cleaned = _NOT_NAME_CHARS.sub("-", stem.lower()).strip("-")
    if not cleaned:
        raise SpecError(source, f"cannot make a node name part from the file name {stem!r}; rename the file")
    return cleaned


def check_node_name(name: str, flag: str = "--name-prefix", *, too_long: str | None = None) -> None:
    """Refuse names the API server would refuse, naming the flag that produced them (``too_long``: the
    input to blame for a name that is too long, when not ``flag``)."""
    if len(name) > MAX_NAME_LENGTH:
        raise SpecError(
            too_long or flag,
            f"node name {name!r} is {len(name)} characters; at most {MAX_NAME_LENGTH} (a hostname label value)",
        )
    if not DNS1123_LABEL.fullmatch(name):
        raise SpecError(
            flag,
            f"node name {name!r} is not a DNS-1123 label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit)",
        )
