"""NVIDIA's XID health model: which XID events make a device unhealthy.

Application-level XIDs are ignored by default, and ``DP_DISABLE_HEALTHCHECKS`` /
``DP_ENABLE_HEALTHCHECKS`` adjust the set exactly as the NVIDIA device plugin reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

DEFAULT_IGNORED_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})
"""Graphics engine exception, page fault, stopped processing, preemptive cleanup, video processor
exception, context switch timeout: errors of an application, not of the GPU."""


@dataclass(frozen=True)
class XidPolicy:
    """Decides whether an XID event marks a device unhealthy."""

    disabled: bool = False
    ignored: frozenset[int] = DEFAULT_IGNORED_XIDS
    forced: frozenset[int] = frozenset()
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def is_critical(self, xid: int) -> bool:
        if xid in self.forced:
            return True
        if self.disabled:
            return False
        return xid not in self.ignored

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> XidPolicy:
        """Read ``DP_DISABLE_HEALTHCHECKS`` and ``DP_ENABLE_HEALTHCHECKS``; malformed entries are skipped
        with a warning, as NVIDIA logs and skips them."""
        warnings: list[str] = []
        disabled = False
        ignored = set(DEFAULT_IGNORED_XIDS)
        for item in _items(env.get("DP_DISABLE_HEALTHCHECKS", "")):
            if item.lower() in ("all", "xids"):
                disabled = True
            elif item.isdigit():
                ignored.add(int(item))
            else:
                warnings.append(f"DP_DISABLE_HEALTHCHECKS: ignoring malformed XID {item!r}")
        forced: set[int] = set()
        for item in _items(env.get("DP_ENABLE_HEALTHCHECKS", "")):
            if item.isdigit():
                forced.add(int(item))
            else:
                warnings.append(f"DP_ENABLE_HEALTHCHECKS: ignoring malformed XID {item!r}")
        return cls(disabled, frozenset(ignored), frozenset(forced), tuple(warnings))


def _items(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]
