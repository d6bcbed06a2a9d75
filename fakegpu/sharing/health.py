"""NVIDIA's XID health models: which XID events make a device unhealthy.

Two of NVIDIA's components read XIDs, each its own way:

- the device plugin (``internal/rm/health.go``, v0.18 and later): application XIDs are ignored by default,
  ``DP_DISABLE_HEALTHCHECKS`` ignores more (``all`` or ``xids``: every one, which stops health checking
  altogether) and ``DP_ENABLE_HEALTHCHECKS`` (v0.18) turns XIDs back on (``all``: every XID counts, the
  default-ignored ones too). :meth:`XidPolicy.from_env` reads both exactly as NVIDIA does;
- the DRA driver (``cmd/gpu-kubelet-plugin/device_health.go``): the same default list plus
  ``ADDITIONAL_XIDS_TO_IGNORE`` names the *non-fatal* XIDs, which still taint a device but with effect
  ``None`` (:meth:`XidPolicy.for_dra_driver`). It has no enable list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

DEFAULT_IGNORED_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})
"""Graphics engine exception, page fault, stopped processing, preemptive cleanup, video processor
exception, context switch timeout: errors of an application, not of the GPU."""

ALL_XIDS = 0
"""NVIDIA's key for "every XID" in its XID maps: ``all`` and ``xids`` set it, and so does a literal ``0``
(NVIDIA parses it as an XID and then reads it as that key)."""
_MAX_XID = 2**64 - 1
"""``strconv.ParseUint(s, 10, 64)``: larger numbers are malformed."""
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class XidPolicy:
    """Decides whether an XID event marks a device unhealthy.

    ``switches`` is NVIDIA's map of XIDs to "disabled" (``True``: ignored, ``False``: counted), with the
    key :data:`ALL_XIDS` for every XID not named; an XID in no entry counts."""

    switches: Mapping[int, bool] = field(default_factory=lambda: dict.fromkeys(DEFAULT_IGNORED_XIDS, True))
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def checks_nothing(self) -> bool:
        """NVIDIA's ``IsAllDisabled``: every XID disabled, so the device plugin never starts its health
        checker, and no XID (not even one ``DP_ENABLE_HEALTHCHECKS`` names) makes a device unhealthy."""
        return self.switches.get(ALL_XIDS, False)

    def is_disabled(self, xid: int) -> bool:
        """NVIDIA's ``IsDisabled``: "enable all" wins, then the XID's own entry, then "disable all"."""
        if self.switches.get(ALL_XIDS) is False:
            return False
        if xid in self.switches:
            return self.switches[xid]
        return self.checks_nothing

    def is_critical(self, xid: int) -> bool:
        """Does this XID make a device unhealthy? Not when the checker does not run, nor when disabled."""
        return not self.checks_nothing and not self.is_disabled(xid)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> XidPolicy:
        """The device plugin's ``getDisabledHealthCheckXids``: the disable list (or ``all``), then the
        default-ignored XIDs, then the enable list overriding both. Lists are lower-cased and split on
        commas; malformed entries are skipped with a warning (NVIDIA logs and skips them)."""
        warnings: list[str] = []
        switches = _xid_list("DP_DISABLE_HEALTHCHECKS", env, warnings)
        enabled = _xid_list("DP_ENABLE_HEALTHCHECKS", env, warnings)
        switches.update(dict.fromkeys(DEFAULT_IGNORED_XIDS, True))
        switches.update(dict.fromkeys(enabled, False))
        return cls(switches, tuple(warnings))

    @classmethod
    def for_dra_driver(cls, env: Mapping[str, str]) -> XidPolicy:
        """The DRA driver's ``xidsToSkip``: the default-ignored XIDs plus ``ADDITIONAL_XIDS_TO_IGNORE``
        (numbers only; no ``all``); these are its non-fatal XIDs. Malformed entries are skipped."""
        warnings: list[str] = []
        switches = dict.fromkeys(DEFAULT_IGNORED_XIDS, True)
        for item in _items(env.get("ADDITIONAL_XIDS_TO_IGNORE", "")):
            xid = _xid(item)
            if xid is None:
                warnings.append(f"ADDITIONAL_XIDS_TO_IGNORE: ignoring malformed XID {item!r}")
            else:
                switches[xid] = True
        return cls(switches, tuple(warnings))


def _xid(item: str) -> int | None:
    if not _DIGITS.fullmatch(item) or int(item) > _MAX_XID:
        return None
    return int(item)


def _xid_list(name: str, env: Mapping[str, str], warnings: list[str]) -> dict[int, bool]:
    """NVIDIA's ``newHealthCheckXIDs``: ``all`` or ``xids`` anywhere makes the whole list "every XID"."""
    out: dict[int, bool] = {}
    for item in _items(env.get(name, "").lower()):
        if item in ("all", "xids"):
            return {ALL_XIDS: True}
        xid = _xid(item)
        if xid is None:
            warnings.append(f"{name}: ignoring malformed XID {item!r}")
        else:
            out[xid] = True
    return out


def _items(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


HealthEventKind = Literal["xid", "gpu-lost", "unmonitored"]


@dataclass(frozen=True)
class HealthEvent:
    """One thing NVML told a driver about a GPU or MIG device, in the order it happened.

    NVIDIA's DRA driver turns each into a device taint (``fakegpu.dra.health_taints``), so the record keeps
    every event, the ones the XID policy calls harmless too."""

    kind: HealthEventKind
    xid: int | None = None
    """The XID of an ``xid`` event; None for the other kinds, and for a device marked unhealthy without one."""
    forced: bool = False
    """Marked unhealthy directly (``fakegpu ctl health``): fatal whatever the XID policy says."""
