"""What one idle GPU reads: its board's idle power and temperature from the catalog, plus a small fixed
per-GPU difference, as eight idle boards in one node never read exactly alike.

Both faces of telemetry print it: the fake ``nvidia-smi`` as the GPU's power draw and temperature, and the
DCGM activity model as where a GPU at zero utilisation sits. One function, so the two always agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from fakegpu.sharing.catalog import GpuModel

POWER_STEP_W = 0.87
"""Per-GPU power difference: GPU ``i`` draws ``(i % 3) * POWER_STEP_W`` more than its board's idle figure."""


@dataclass(frozen=True)
class IdleReading:
    power_w: float
    """Watts, to the hundredth (what nvidia-smi prints)."""
    temperature_c: int


def idle_reading(model: GpuModel, index: int) -> IdleReading:
    """The idle reading of GPU ``index`` (its minor number) of board ``model``."""
    facts = model.facts
    return IdleReading(
        power_w=round(facts.idle_power_w + (index % 3) * POWER_STEP_W, 2),
        temperature_c=facts.idle_temp_c + (index * 3) % 5,
    )
