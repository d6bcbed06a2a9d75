"""What nvidia-smi shows of a GPU's faults: ECC counters, retired pages or remapped rows, clocks and their
event reasons, the fabric registration, and whether NVML can reach the GPU at all.

Built from the live inventory's :class:`fakegpu.sharing.gpu_condition.GpuCondition` (and the board and node
facts nvidia-smi prints next to it: whether the board remaps rows, its maximum SM clock, the node's
fabric), and carried in ``devices.SmiGpu`` so the JSON form and the injected script render it without the
inventory. Temperature and power draw are not here: a thermal or power fault changes ``SmiGpu``'s own
``temperature_c`` and ``power_draw_w``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

from fakegpu.sharing.catalog import GpuModel
from fakegpu.sharing.gpu_condition import GpuCondition, remaps_rows
from fakegpu.sharing.nvlink_fabric import NvlinkFabric
from fakegpu.telemetry import fault_readings

NA: Final = "N/A"


@dataclass(frozen=True)
class SmiHealth:
    """A GPU's fault readings as nvidia-smi prints them; the default is a healthy Ampere-or-later board off
    any NVLink fabric."""

    remaps_rows: bool = True
    """Ampere and later: "Remapped Rows"; before: "Retired Pages" (``gpu_condition.remaps_rows``)."""
    ecc_sbe_volatile: int = 0
    ecc_dbe_volatile: int = 0
    ecc_sbe_aggregate: int = 0
    ecc_dbe_aggregate: int = 0
    retired_sbe: int = 0
    retired_dbe: int = 0
    retired_pending: bool = False
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remapped_pending: bool = False
    remapped_failure: bool = False
    slowdowns: tuple[str, ...] = ()
    """Active ``clocks_event_reasons.*`` slowdowns, sorted (none: the GPU reads idle)."""
    sm_clock_mhz: int | None = None
    """The current SM and graphics clock; None where the board's clock is not known (``N/A``)."""
    max_sm_clock_mhz: int | None = None
    fabric_state: str = NA
    fabric_status: str = NA
    unreachable: bool = False
    """Off the bus or lost: nvidia-smi prints only its error line, no GPU reported."""

    @property
    def reasons_mask(self) -> int:
        return fault_readings.reasons_mask(self.slowdowns)

    def reason_active(self, name: str) -> bool:
        return name in fault_readings.active_reasons(self.slowdowns)


HEALTHY: Final = SmiHealth()


def _fabric(fabric: NvlinkFabric | None, condition: GpuCondition) -> tuple[str, str]:
    """(State, Status) as ``nvidia-smi -q``'s Fabric section prints them: N/A off a fabric; a fabric fault is
    a completed registration whose status is the NVML error."""
    if condition.fabric_status is not None:
        return fault_readings.FABRIC_STATE_TEXT["completed"], fault_readings.FABRIC_STATUS_TEXT[condition.fabric_status]
    if fabric is None:
        return NA, NA
    state = fault_readings.FABRIC_STATE_TEXT[fabric.state]
    if fabric.state != "completed":
        return state, NA
    return state, fault_readings.FABRIC_STATUS_TEXT.get(fabric.status, fabric.status)


def health(model: GpuModel, condition: GpuCondition, fabric: NvlinkFabric | None) -> SmiHealth:
    """What nvidia-smi shows of ``condition`` on a board ``model`` of a node on ``fabric``."""
    top = fault_readings.max_sm_clock(model)
    state, status = _fabric(fabric, condition)
    c = condition
    return SmiHealth(
        remaps_rows=remaps_rows(model),
        ecc_sbe_volatile=c.ecc_sbe_volatile,
        ecc_dbe_volatile=c.ecc_dbe_volatile,
        ecc_sbe_aggregate=c.ecc_sbe_aggregate,
        ecc_dbe_aggregate=c.ecc_dbe_aggregate,
        retired_sbe=c.retired_pages_sbe,
        retired_dbe=c.retired_pages_dbe,
        retired_pending=c.retired_pages_pending,
        remapped_correctable=c.remapped_rows_correctable,
        remapped_uncorrectable=c.remapped_rows_uncorrectable,
        remapped_pending=c.remapped_rows_pending,
        remapped_failure=c.remapped_rows_failure,
        slowdowns=tuple(sorted(c.clocks_event_reasons)),
        sm_clock_mhz=fault_readings.sm_clock(top, c.clock_fraction),
        max_sm_clock_mhz=top,
        fabric_state=state,
        fabric_status=status,
        unreachable=c.unreachable,
    )


# --- JSON (the ``health`` object of a devices.json GPU) -------------------------------------------------


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "remaps_rows": (bool,),
    "retired_pending": (bool,),
    "remapped_pending": (bool,),
    "remapped_failure": (bool,),
    "unreachable": (bool,),
    "slowdowns": (list,),
    "sm_clock_mhz": (int, type(None)),
    "max_sm_clock_mhz": (int, type(None)),
    "fabric_state": (str,),
    "fabric_status": (str,),
}
"""Every other field is a counter (int)."""


def to_json(h: SmiHealth) -> dict[str, Any]:
    return {_camel(f.name): list(v) if isinstance(v := getattr(h, f.name), tuple) else v for f in fields(h)}


def _checked(name: str, value: Any, where: str) -> Any:
    kinds = _TYPES.get(name, (int,))
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok or (isinstance(value, int) and not isinstance(value, bool) and value < 0):
        expected = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise ValueError(f"{where}.{_camel(name)}: expected {expected}, found {value!r}")
    if name == "slowdowns":
        unknown = [r for r in value if r not in fault_readings.CLOCKS_EVENT_REASON_BITS]
        if unknown:
            raise ValueError(f"{where}.slowdowns: unknown clocks event reasons {unknown}")
        return tuple(value)
    return value


def from_json(raw: Any, where: str) -> SmiHealth:
    """The ``health`` object; ValueError names the field. Missing: a devices.json written before faults (healthy)."""
    if raw is None:
        return HEALTHY
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: expected an object")
    values = {}
    for f in fields(SmiHealth):
        key = _camel(f.name)
        if key not in raw:
            raise ValueError(f"{where}: missing field {key!r}")
        values[f.name] = _checked(f.name, raw[key], where)
    return SmiHealth(**values)
