"""The DCGM fields a GPU's faults change, per entity: ECC totals, retired pages or remapped rows, NVLink error
counters, the clocks event reasons mask, the SM clock, and a thermal or power fault's temperature and draw.

A field NVML cannot answer for the board is left out (dcgm-exporter skips a blank value, so the series does
not exist): retired pages on Ampere and later, remapped rows before, NVLink counters on a board without
NVLink, the SM clock where fakegpu does not know the board's maximum. A GPU off the bus or lost answers
nothing: :func:`reachable` is False and all its series vanish, as dcgm-exporter shows such a GPU (its
series stop; NVIDIA/dcgm-exporter#348 asks for an error metric instead).
"""

from __future__ import annotations

from fakegpu.sharing.catalog import GpuModel
from fakegpu.sharing.gpu_condition import GpuCondition, remaps_rows
from fakegpu.telemetry import fault_readings
from fakegpu.telemetry.dcgm import metric_names as names
from fakegpu.telemetry.dcgm.gpu_activity import Thermals
from fakegpu.telemetry.nvidia_smi.nvlinks import LINKS_PER_PEER


def reachable(condition: GpuCondition) -> bool:
    return not condition.unreachable


def fault_values(model: GpuModel, condition: GpuCondition, heat: Thermals, *, busy: bool) -> dict[names.Counter, float]:
    """The fault-driven fields of a GPU (and of each of its MIG instances, which report the board's); ``busy``:
    a workload holds the entity, so the idle reason is off."""
    c = condition
    values: dict[names.Counter, float] = {
        names.GPU_TEMP: heat.temperature_c if c.temperature_c is None else c.temperature_c,
        names.POWER_USAGE: heat.power_w if c.power_draw_w is None else c.power_draw_w,
        names.ECC_SBE_VOL_TOTAL: c.ecc_sbe_volatile,
        names.ECC_DBE_VOL_TOTAL: c.ecc_dbe_volatile,
        names.ECC_SBE_AGG_TOTAL: c.ecc_sbe_aggregate,
        names.ECC_DBE_AGG_TOTAL: c.ecc_dbe_aggregate,
        names.CLOCKS_EVENT_REASONS: fault_readings.reasons_mask(c.clocks_event_reasons, busy=busy),
    }
    clock = fault_readings.sm_clock(fault_readings.max_sm_clock(model), c.clock_fraction)
    if clock is not None:
        values[names.SM_CLOCK] = clock
    if remaps_rows(model):
        values[names.UNCORRECTABLE_REMAPPED_ROWS] = c.remapped_rows_uncorrectable
        values[names.CORRECTABLE_REMAPPED_ROWS] = c.remapped_rows_correctable
        values[names.ROW_REMAP_FAILURE] = int(c.remapped_rows_failure)
    else:
        values[names.RETIRED_SBE] = c.retired_pages_sbe
        values[names.RETIRED_DBE] = c.retired_pages_dbe
        values[names.RETIRED_PENDING] = int(c.retired_pages_pending)
    if model.key in LINKS_PER_PEER:
        values[names.NVLINK_CRC_FLIT_ERRORS] = c.nvlink_crc_errors
        values[names.NVLINK_CRC_DATA_ERRORS] = 0
        values[names.NVLINK_REPLAY_ERRORS] = c.nvlink_replay_errors
        values[names.NVLINK_RECOVERY_ERRORS] = c.nvlink_recovery_errors
    return values
