"""The fault-bearing parts of ``nvidia-smi -q`` and ``--query-gpu``: ECC errors, retired pages, remapped rows,
clocks event reasons, clocks and the fabric, from ``SmiGpu.health``.

Section names, keys and their order follow real ``nvidia-smi -q`` reports of drivers 550 to 570 (an RTX 4060 Ti
and an A100 SXM4 80GB report, both with every section): ECC Errors split into SRAM (Correctable, Uncorrectable
Parity, Uncorrectable SEC-DED) and DRAM (Correctable, Uncorrectable) per Volatile and Aggregate, with the SRAM
threshold and sources under Aggregate; "Retired Pages" all ``N/A`` on a board that remaps rows and "Remapped
Rows" ``N/A`` on one that retires pages. fakegpu's ECC errors are DRAM errors (HBM or GDDR), so the SRAM
counters stay 0. The bank remap histogram is ``N/A``: NVIDIA publishes no bank count per board.
"""

from __future__ import annotations

from typing import Final

from fakegpu.telemetry.fault_readings import CLOCKS_EVENT_REASON_BITS, SUPPORTED_REASONS
from fakegpu.telemetry.nvidia_smi.gpu_health import NA, SmiHealth
from fakegpu.telemetry.nvidia_smi.report_lines import kv as _kv
from fakegpu.telemetry.nvidia_smi.report_lines import section as _section

_REASON_KEYS: Final = (
    (2, "Idle", "gpu_idle"),
    (2, "Applications Clocks Setting", "applications_clocks_setting"),
    (2, "SW Power Cap", "sw_power_cap"),
    (2, "HW Slowdown", "hw_slowdown"),
    (3, "HW Thermal Slowdown", "hw_thermal_slowdown"),
    (3, "HW Power Brake Slowdown", "hw_power_brake_slowdown"),
    (2, "Sync Boost", "sync_boost"),
    (2, "SW Thermal Slowdown", "sw_thermal_slowdown"),
    (2, "Display Clock Setting", "display_clock_setting"),
)
"""``Clocks Event Reasons`` lines: indent level, key, the reason."""
_HISTOGRAM: Final = ("Max", "High", "Partial", "Low", "None")
_SRAM_SOURCES: Final = ("SRAM L2", "SRAM SM", "SRAM Microcontroller", "SRAM PCIE", "SRAM Other")


def yes_no(flag: bool) -> str:
    return "Yes" if flag else "No"


def active(flag: bool) -> str:
    return "Active" if flag else "Not Active"


def mhz(value: int | None) -> str:
    return NA if value is None else f"{value} MHz"


def event_reasons(h: SmiHealth) -> tuple[str, ...]:
    """``Clocks Event Reasons``: right after ``Performance State``."""
    return (
        _section(1, "Clocks Event Reasons"),
        *(_kv(level, key, active(h.reason_active(reason))) for level, key, reason in _REASON_KEYS),
    )


def _ecc_block(level: int, sbe: int, dbe: int) -> tuple[str, ...]:
    return (
        _kv(level, "SRAM Correctable", 0),
        _kv(level, "SRAM Uncorrectable Parity", 0),
        _kv(level, "SRAM Uncorrectable SEC-DED", 0),
        _kv(level, "DRAM Correctable", sbe),
        _kv(level, "DRAM Uncorrectable", dbe),
    )


def memory_errors(h: SmiHealth) -> tuple[str, ...]:
    """``ECC Errors``, ``Retired Pages`` and ``Remapped Rows``: right after ``ECC Mode``."""
    lines = [
        _section(1, "ECC Errors"),
        _section(2, "Volatile"),
        *_ecc_block(3, h.ecc_sbe_volatile, h.ecc_dbe_volatile),
        _section(2, "Aggregate"),
        *_ecc_block(3, h.ecc_sbe_aggregate, h.ecc_dbe_aggregate),
        _kv(3, "SRAM Threshold Exceeded", "No"),
        _section(2, "Aggregate Uncorrectable SRAM Sources"),
        *(_kv(3, source, 0) for source in _SRAM_SOURCES),
        _section(1, "Retired Pages"),
    ]
    if h.remaps_rows:
        lines += [_kv(2, key, NA) for key in ("Single Bit ECC", "Double Bit ECC", "Pending Page Blacklist")]
        lines += [
            _section(1, "Remapped Rows"),
            _kv(2, "Correctable Error", h.remapped_correctable),
            _kv(2, "Uncorrectable Error", h.remapped_uncorrectable),
            _kv(2, "Pending", yes_no(h.remapped_pending)),
            _kv(2, "Remapping Failure Occurred", yes_no(h.remapped_failure)),
            _section(2, "Bank Remap Availability Histogram"),
            *(_kv(3, key, NA) for key in _HISTOGRAM),
        ]
    else:
        lines += [
            _kv(2, "Single Bit ECC", h.retired_sbe),
            _kv(2, "Double Bit ECC", h.retired_dbe),
            _kv(2, "Pending Page Blacklist", yes_no(h.retired_pending)),
            _kv(1, "Remapped Rows", NA),
        ]
    return tuple(lines)


def clocks_and_fabric(h: SmiHealth) -> tuple[str, ...]:
    """``Clocks``, ``Max Clocks`` and ``Fabric``: after the power readings, before ``Processes`` (the
    sections real reports print between them, application clocks, voltage and so on, are left out)."""
    return (
        _section(1, "Clocks"),
        _kv(2, "Graphics", mhz(h.sm_clock_mhz)),
        _kv(2, "SM", mhz(h.sm_clock_mhz)),
        _kv(2, "Memory", NA),
        _kv(2, "Video", NA),
        _section(1, "Max Clocks"),
        _kv(2, "Graphics", mhz(h.max_sm_clock_mhz)),
        _kv(2, "SM", mhz(h.max_sm_clock_mhz)),
        _kv(2, "Memory", NA),
        _kv(2, "Video", NA),
        _section(1, "Fabric"),
        _kv(2, "State", h.fabric_state),
        _kv(2, "Status", h.fabric_status),
    )


def _count(value: int) -> tuple[str, str]:
    return str(value), str(value)


def _plain(value: str) -> tuple[str, str]:
    return value, value


def _clock(value: int | None) -> tuple[str, str]:
    return ("[N/A]", "[N/A]") if value is None else (f"{value} MHz", str(value))


def query_values(h: SmiHealth) -> dict[str, tuple[str, str]]:
    """The ``--query-gpu`` fields the fault readings fill, as (with units, without units)."""
    values: dict[str, tuple[str, str]] = {}
    for name in CLOCKS_EVENT_REASON_BITS:
        if name != "display_clock_setting":
            values[f"clocks_event_reasons.{name}"] = _plain(active(h.reason_active(name)))
    values["clocks_event_reasons.supported"] = _plain(f"0x{SUPPORTED_REASONS:016X}")
    values["clocks_event_reasons.active"] = _plain(f"0x{h.reasons_mask:016X}")
    for period, sbe, dbe in (
        ("volatile", h.ecc_sbe_volatile, h.ecc_dbe_volatile),
        ("aggregate", h.ecc_sbe_aggregate, h.ecc_dbe_aggregate),
    ):
        for kind, count in (("corrected", sbe), ("uncorrected", dbe)):
            values[f"ecc.errors.{kind}.{period}.dram"] = _count(count)
            values[f"ecc.errors.{kind}.{period}.sram"] = _count(0)
            values[f"ecc.errors.{kind}.{period}.total"] = _count(count)
    if h.remaps_rows:
        values["remapped_rows.correctable"] = _count(h.remapped_correctable)
        values["remapped_rows.uncorrectable"] = _count(h.remapped_uncorrectable)
        values["remapped_rows.pending"] = _plain(yes_no(h.remapped_pending))
        values["remapped_rows.failure"] = _plain(yes_no(h.remapped_failure))
    else:
        values["retired_pages.single_bit_ecc.count"] = _count(h.retired_sbe)
        values["retired_pages.double_bit.count"] = _count(h.retired_dbe)
        values["retired_pages.pending"] = _plain(yes_no(h.retired_pending))
    values["clocks.current.graphics"] = _clock(h.sm_clock_mhz)
    values["clocks.current.sm"] = _clock(h.sm_clock_mhz)
    values["clocks.max.graphics"] = _clock(h.max_sm_clock_mhz)
    values["clocks.max.sm"] = _clock(h.max_sm_clock_mhz)
    if h.fabric_state != NA:
        values["fabric.state"] = _plain(h.fabric_state)
    if h.fabric_status != NA:
        values["fabric.status"] = _plain(h.fabric_status)
    return {k: v for k, v in values.items() if v != ("[N/A]", "[N/A]")}
