"""What a GPU's fault condition reads as, in the numbers both telemetry faces print: NVML's clocks event
reason bits, the SM clock, the fabric registration's words and the GPU-lost error line.

nvidia-smi (``fakegpu.telemetry.nvidia_smi``) and the DCGM exporter (``fakegpu.telemetry.dcgm``) read the
same :class:`fakegpu.sharing.gpu_condition.GpuCondition`; the translations live here once so the two never
disagree (an operator comparing ``nvidia-smi --query-gpu=clocks_event_reasons.active`` with
``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` sees the same mask).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from fakegpu.sharing.catalog import GpuModel

CLOCKS_EVENT_REASON_BITS: Final[dict[str, int]] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
"""NVML's ``nvmlClocksEventReason*`` constants (go-nvml ``pkg/nvml/const.go``: GpuIdle 1 ... DisplayClockSetting
256) by nvidia-smi's ``clocks_event_reasons.*`` field name."""
SUPPORTED_REASONS: Final = sum(CLOCKS_EVENT_REASON_BITS.values())
"""``nvmlClocksEventReasonAll`` (0x1FF): every data-centre board reports all of them as supported."""

MAX_SM_CLOCK_MHZ: Final[dict[str, int]] = {
    "a100-40gb": 1410,
    "a100-80gb": 1410,
    "a30": 1440,
    "h100-80gb": 1980,
    "h100-94gb": 1785,
    "h200": 1980,
    "t4": 1590,
    "l4": 2040,
    "l40s": 2520,
    "a10": 1695,
    "v100-32gb": 1530,
}
"""Boost (maximum) SM clock per board, NVIDIA's published specifications; a board missing here has no clock
reading (nvidia-smi ``N/A``, no ``DCGM_FI_DEV_SM_CLOCK`` series) rather than an invented one."""

FABRIC_STATUS_TEXT: Final[dict[str, str]] = {
    "SUCCESS": "Success",
    "ERROR_UNKNOWN": "Unknown Error",
    "ERROR_NOT_READY": "Not Ready",
    "ERROR_TIMEOUT": "Timeout",
    "ERROR_GPU_IS_LOST": "GPU is lost",
}
"""``nvmlErrorString`` of the fabric registration's result, which nvidia-smi prints as the Fabric Status."""
FABRIC_STATE_TEXT: Final[dict[str, str]] = {
    "not-supported": "N/A",
    "not-started": "Not Started",
    "in-progress": "In Progress",
    "completed": "Completed",
}

GPU_LOST_STATUS: Final = 15
"""nvidia-smi's return value "the GPU has fallen off the bus or has otherwise become inaccessible"."""


def gpu_lost_line(bus_id: str) -> str:
    """What nvidia-smi prints instead of a GPU NVML cannot reach (XID 79, lost), ``bus_id`` in nvidia-smi's
    8-digit form: current drivers print the 4-digit domain right after ``GPU`` (``GPU0000:65:00.0``, as in
    NVIDIA/nvidia-container-toolkit#69) and NVML's GPU-lost text (JosephKJ/OWOD#81)."""
    reason = "GPU is lost.  Reboot the system to recover this GPU"
    return f"Unable to determine the device handle for GPU{bus_id[4:]}: {reason}"


def max_sm_clock(model: GpuModel) -> int | None:
    return MAX_SM_CLOCK_MHZ.get(model.key)


def sm_clock(max_mhz: int | None, fraction: float) -> int | None:
    """The SM (and graphics) clock a slowed-down GPU runs at: its maximum times the condition's fraction."""
    return None if max_mhz is None else round(max_mhz * fraction)


def active_reasons(reasons: Iterable[str], *, busy: bool = False) -> frozenset[str]:
    """The reasons active: the condition's slowdowns, or ``gpu_idle`` when nothing slows an idle GPU down
    (nvidia-smi's GPUs run no kernels, so an unthrottled one reads idle, as an idle real board does; DCGM's
    model knows when a workload holds it, ``busy``)."""
    slow = frozenset(reasons)
    return slow if slow or busy else frozenset({"gpu_idle"})


def reasons_mask(reasons: Iterable[str], *, busy: bool = False) -> int:
    """NVML's bitmask of ``active_reasons``: ``clocks_event_reasons.active`` and DCGM's field 112."""
    return sum(CLOCKS_EVENT_REASON_BITS[r] for r in active_reasons(reasons, busy=busy))
