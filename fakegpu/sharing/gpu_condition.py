"""What a GPU reads after faults: ECC counters, retired pages or remapped rows, temperature, clocks, power,
NVLink error counters, fabric registration, lost or off the bus.

A healthy GPU has :data:`HEALTHY_CONDITION` (everything zero, nothing overridden: the telemetry's idle
model applies). :func:`strike` applies one fault and says which XIDs the driver reports for it;
:func:`recover` applies what the real device's way back does (:data:`fakegpu.sharing.gpu_faults.FAULT_KINDS`).
Both are pure: the live inventory keeps one condition per GPU and hands it to nvidia-smi and DCGM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from fakegpu.sharing.bug_modes import OFF_THE_BUS_XID
from fakegpu.sharing.catalog import GpuModel
from fakegpu.sharing.gpu_faults import (
    CONTAINED_ECC_XID,
    DBE_XID,
    DEFAULT_THERMAL_C,
    FABRIC_ERROR_STATUSES,
    FAULT_KINDS,
    NVLINK_XID,
    PAGE_RETIREMENT_ARCHITECTURES,
    ROW_REMAP_EVENT_XID,
    SBE_STORM_XID,
    UNCONTAINED_ECC_XID,
    GpuFault,
)

THERMAL_REASONS: Final = frozenset({"hw_thermal_slowdown", "sw_thermal_slowdown", "hw_slowdown"})
"""nvidia-smi's ``clocks_event_reasons.*`` names active while the GPU is too hot."""
POWER_REASONS: Final = frozenset({"sw_power_cap", "hw_power_brake_slowdown", "hw_slowdown"})
"""Active during a power excursion."""
THERMAL_CLOCK_FRACTION: Final = 0.55
"""SM clock under thermal slowdown, as a fraction of the maximum."""
POWER_CLOCK_FRACTION: Final = 0.7
DEFAULT_SBE_STORM: Final = 1000
"""Correctable errors a storm adds when no count is given."""
DEFAULT_NVLINK_ERRORS: Final = 100


@dataclass(frozen=True)
class GpuCondition:
    """One GPU's fault-driven readings; zeros and ``None`` mean the telemetry's normal model applies."""

    ecc_sbe_volatile: int = 0
    ecc_dbe_volatile: int = 0
    ecc_sbe_aggregate: int = 0
    ecc_dbe_aggregate: int = 0
    retired_pages_sbe: int = 0
    retired_pages_dbe: int = 0
    retired_pages_pending: bool = False
    remapped_rows_correctable: int = 0
    remapped_rows_uncorrectable: int = 0
    remapped_rows_pending: bool = False
    remapped_rows_failure: bool = False
    temperature_c: int | None = None
    """A thermal fault's temperature; None: the idle/activity model's."""
    power_draw_w: float | None = None
    """A power fault's draw; None: the model's."""
    clock_fraction: float = 1.0
    """SM and graphics clocks as a fraction of what the model says (thermal or power slowdown)."""
    clocks_event_reasons: frozenset[str] = frozenset()
    """nvidia-smi's ``clocks_event_reasons.*`` field names that are Active."""
    nvlink_crc_errors: int = 0
    nvlink_replay_errors: int = 0
    nvlink_recovery_errors: int = 0
    nvlink_down: frozenset[int] = frozenset()
    """Links that are down (``nvidia-smi nvlink -s``: inactive)."""
    fabric_status: str | None = None
    """A fabric fault's NVML result of the registration; None: the node spec's fabric as it is."""
    off_bus: bool = False
    lost: bool = False
    last_xid: int | None = None
    kinds: tuple[str, ...] = ()
    """The fault kinds that struck, oldest first (status, ``ctl``), minus the ones recovered."""

    @property
    def unreachable(self) -> bool:
        """NVML cannot talk to the GPU: nvidia-smi prints an error for it instead of readings."""
        return self.off_bus or self.lost

    @property
    def fabric_error(self) -> bool:
        return self.fabric_status is not None


HEALTHY_CONDITION: Final = GpuCondition()


def remaps_rows(model: GpuModel) -> bool:
    """Ampere and later remap rows; older boards retire pages."""
    return model.architecture not in PAGE_RETIREMENT_ARCHITECTURES


Strike = Callable[[GpuCondition, GpuFault, GpuModel], tuple[GpuCondition, tuple[int, ...]]]


def _xid(c: GpuCondition, fault: GpuFault, model: GpuModel) -> tuple[GpuCondition, tuple[int, ...]]:
    assert fault.xid is not None
    return c, (fault.xid,)


def _off_bus(c: GpuCondition, fault: GpuFault, model: GpuModel) -> tuple[GpuCondition, tuple[int, ...]]:
    return dataclasses.replace(c, off_bus=True), (OFF_THE_BUS_XID,)


def _lost(c: GpuCondition, fault: GpuFault, model: GpuModel) -> tuple[GpuCondition, tuple[int, ...]]:
    return dataclasses.replace(c, lost=True), ()


def _ecc_uncorrectable(c: GpuCondition, fault: GpuFault, model: GpuModel) -> tuple[GpuCondition, tuple[int, ...]]:
    n = fault.count or 1
    c = dataclasses.replace(c, ecc_dbe_volatile=c.ecc_dbe_volatile + n, ecc_dbe_aggregate=c.ecc_dbe_aggregate + n)
    if not remaps_rows(model):
        return dataclasses.replace(c, retired_pages_dbe=c.retired_pages_dbe + n, retired_pages_pending=True), (
            DBE_XID,
            ROW_REMAP_EVENT_XID,
        )
    c = dataclasses.replace(
        c, remapped_rows_uncorrectable=c.remapped_rows_uncorrectable + n, remapped_rows_pending=True
    )
    return c, (CONTAINED_ECC_XID if fault.contained else UNCONTAINED_ECC_XID, ROW_REMAP_EVENT_XID)


def _ecc_correctable(c: GpuCondition, fault: GpuFault, model: GpuModel) -> tuple[GpuCondition, tuple[int, ...]]:
    n = fault.count or DEFAULT_SBE_STORM
    c = dataclasses.replace(c, ecc_sbe_volatile=c.ecc_sbe_volatile + n, ecc_sbe_aggregate=c.ecc_sbe_aggregate + n)
    if remaps_rows(model):
        c = dataclasses.replace(c, remapped_rows_correctable=c.remapped_rows_correctable + 1)
    else:
        c = dataclasses.replace(c, retired_pages_sbe=c.retired_pages_sbe + 1, retired_pages_pending=True)
    return c, (SBE_STORM_XID,)


def _thermal(c: GpuCondition, fault: GpuFault, model: GpuModel) -> tuple[GpuCondition, tuple[int, ...]]:
    hot = fault.temperature if fault.temperature is not None else DEFAULT_THERMAL_C
    return dataclasses.replace(c, temperature_c=hot), ()


def _power(c: GpuCondition, fault: GpuFault, model: GpuModel) -> tuple[GpuCondition, tuple[int, ...]]:
    draw = fault.watts if fault.watts is not None else float(model.facts.power_limit_w)
    return dataclasses.replace(c, power_draw_w=draw), ()


def _nvlink(c: GpuCondition, fault: GpuFault, model: GpuModel) -> tuple[GpuCondition, tuple[int, ...]]:
    n = fault.count or DEFAULT_NVLINK_ERRORS
    c = dataclasses.replace(
        c,
        nvlink_crc_errors=c.nvlink_crc_errors + n,
        nvlink_replay_errors=c.nvlink_replay_errors + max(1, n // 10),
        nvlink_recovery_errors=c.nvlink_recovery_errors + 1,
        nvlink_down=c.nvlink_down | {fault.link or 0},
    )
    return c, (NVLINK_XID,)


def _fabric(c: GpuCondition, fault: GpuFault, model: GpuModel) -> tuple[GpuCondition, tuple[int, ...]]:
    return dataclasses.replace(c, fabric_status=fault.status or FABRIC_ERROR_STATUSES[0]), ()


_STRIKES: Final[dict[str, Strike]] = {
    "xid": _xid,
    "off-bus": _off_bus,
    "gpu-lost": _lost,
    "ecc-uncorrectable": _ecc_uncorrectable,
    "ecc-correctable": _ecc_correctable,
    "thermal": _thermal,
    "power": _power,
    "nvlink": _nvlink,
    "fabric": _fabric,
}


def _with_excursions(c: GpuCondition, kinds: tuple[str, ...]) -> GpuCondition:
    """Clock event reasons and clocks follow the thermal and power faults still on."""
    reasons = (THERMAL_REASONS if "thermal" in kinds else frozenset()) | (
        POWER_REASONS if "power" in kinds else frozenset()
    )
    fraction = min(
        THERMAL_CLOCK_FRACTION if "thermal" in kinds else 1.0, POWER_CLOCK_FRACTION if "power" in kinds else 1.0
    )
    return dataclasses.replace(c, kinds=kinds, clocks_event_reasons=reasons, clock_fraction=fraction)


def strike(condition: GpuCondition, fault: GpuFault, model: GpuModel) -> tuple[GpuCondition, tuple[int, ...]]:
    """The condition after ``fault`` and the XIDs the driver reports for it, in order."""
    c, xids = _STRIKES[fault.kind](condition, fault, model)
    kinds = c.kinds if fault.kind in c.kinds else (*c.kinds, fault.kind)
    c = _with_excursions(c, kinds)
    return dataclasses.replace(c, last_xid=xids[-1] if xids else c.last_xid), xids


RESET_ENDS: Final = ("ecc-uncorrectable", "ecc-correctable", "nvlink", "xid")
"""The kinds a GPU reset ends."""
RECOVERIES: Final = ("thermal", "power", "fabric", "reset")
"""What can be recovered: the kinds whose cause goes away (``clear``), and a GPU reset."""


def recovery_refusal(kind: str) -> str:
    """Why ``kind`` cannot be recovered by itself, in one line."""
    facts = FAULT_KINDS.get(kind)
    if facts is None:
        return f"unknown recovery {kind!r}; expected one of: {', '.join(RECOVERIES)}"
    article = "an" if kind[0] in "aeiox" else "a"  # an off-bus, an ecc-..., an xid (said "ex")
    if facts.recovery == "reset":
        return f"{article} {kind} fault ends with a GPU reset: recover 'reset' ({facts.recovery_text})"
    return f"{article} {kind} fault does not recover: {facts.recovery_text}"


def recover(condition: GpuCondition, kind: str) -> GpuCondition:
    """What the way back of ``kind`` does (``FAULT_KINDS[kind].recovery``); ``reset`` stands for a GPU reset,
    which ends the ECC, NVLink and XID faults at once. A fault only a reboot ends (off the bus, lost) stays,
    and so does what a reset keeps (aggregate counters, remapped rows, NVLink error counters)."""
    if kind not in RECOVERIES:
        raise ValueError(recovery_refusal(kind))
    ended = RESET_ENDS if kind == "reset" else (kind,)
    kinds = tuple(k for k in condition.kinds if k not in ended)
    c = condition
    if kind == "thermal":
        c = dataclasses.replace(c, temperature_c=None)
    elif kind == "power":
        c = dataclasses.replace(c, power_draw_w=None)
    elif kind == "fabric":
        c = dataclasses.replace(c, fabric_status=None)
    elif kind == "reset":
        c = dataclasses.replace(
            c,
            ecc_sbe_volatile=0,
            ecc_dbe_volatile=0,
            remapped_rows_pending=False,
            retired_pages_pending=False,
            nvlink_down=frozenset(),
        )
    return _with_excursions(c, kinds)
