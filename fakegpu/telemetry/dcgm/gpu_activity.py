"""What a fake GPU is doing: a deterministic, seedable model of utilisation, memory, temperature and power.

Dashboards, autoscalers and idle-GPU reapers read DCGM metrics, so a rehearsal needs numbers that move
with the allocations the kubelet (or the DRA driver) really made: an idle GPU reads idle, a GPU a pod
holds reads busy, a pod that asks for 25 % through the annotation ``fakegpu.io/gpu-utilization`` reads
about 25 %. Nothing here is random: every value is a function of the inputs, the seed and the time step,
so the same inputs give the same numbers byte for byte and a test can pin them.

The model, per device (a whole GPU or a MIG instance; a time-slicing or MPS replica counts on the device
behind it):

- every container holding the device is a workload with a target utilisation: the annotation's value,
  or ``DEFAULT_TARGET`` moved by up to ``DEFAULT_TARGET_SPREAD`` points per workload (stable over time,
  different between workloads);
- the device's utilisation is the sum of the targets, capped at 100 (time-sliced replicas add up), plus a
  small per-step jitter; no workload means exactly 0;
- memory copy utilisation, the graphics-engine, tensor-pipe and DRAM activity ratios follow it;
- framebuffer use grows with each workload's target within its memory budget (the whole device, or the
  replica's share); free = total - used;
- temperature and power rise linearly with the utilisation of the physical board from its idle reading
  (``fakegpu.telemetry.idle_reading``: exactly what the fake nvidia-smi prints for the GPU, without
  jitter) to its loaded one (the catalog's ``load_temp_c`` and power limit); MIG instances report their
  parent's, as DCGM does.

Every board figure comes from the board's catalog entry (``fakegpu.sharing.catalog.BoardFacts``), which
says which are readings and which estimates.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

from fakegpu.sharing.catalog import GpuModel
from fakegpu.telemetry.idle_reading import idle_reading

UTILIZATION_ANNOTATION = "fakegpu.io/gpu-utilization"
"""Pod annotation with the target GPU utilisation in percent (0-100) of the pod's containers."""

DEFAULT_TARGET = 70.0
"""Target utilisation of a workload that does not say (percent)."""
DEFAULT_TARGET_SPREAD = 10.0
"""Workloads without an annotation get DEFAULT_TARGET +- this many points, fixed per workload."""
JITTER_DEFAULT = 3.0
"""Per-step jitter (points) of a device whose workloads gave no target."""
JITTER_ANNOTATED = 1.0
"""Per-step jitter (points) when every workload gave its target: "25" reads 24 to 26."""
MEM_COPY_RATIO = 0.45
"""Memory copy utilisation relative to GPU utilisation (a compute-bound training step)."""
TENSOR_RATIO = 0.55
"""Tensor pipe activity relative to graphics-engine activity."""
FB_BASE_FILL = 0.3
FB_LOAD_FILL = 0.5
"""A workload uses FB_BASE_FILL + FB_LOAD_FILL * target/100 of its memory budget (weights + activations)."""
IDLE_FB_USED_MIB = 0
"""FB used on an idle whole GPU: current drivers report reserved memory apart, nvidia-smi shows 0MiB."""
IDLE_FB_USED_MIG_MIB = 10
"""FB used on an idle MIG instance (reading: 10 MiB on every idle 2g.20gb instance of an A800)."""


@dataclass(frozen=True)
class Workload:
    """One container holding (a share of) a device."""

    key: str
    """Stable identity, e.g. ``namespace/pod/container``: seeds this workload's default target."""
    target: float | None = None
    """Target utilisation in percent from the pod annotation, None when the pod gave none."""


@dataclass(frozen=True)
class Activity:
    """What DCGM reports for one device (GPU or MIG instance) at one step."""

    util: int
    """DCGM_FI_DEV_GPU_UTIL, percent."""
    mem_copy_util: int
    """DCGM_FI_DEV_MEM_COPY_UTIL, percent."""
    fb_used_mib: int
    fb_free_mib: int
    gr_engine_active: float
    """DCGM_FI_PROF_GR_ENGINE_ACTIVE, ratio 0..1."""
    tensor_active: float
    dram_active: float


@dataclass(frozen=True)
class Thermals:
    temperature_c: int
    """DCGM_FI_DEV_GPU_TEMP, degrees C."""
    power_w: float
    """DCGM_FI_DEV_POWER_USAGE, W (milliwatt precision, as NVML reports)."""


def noise(seed: str | int, *parts: object) -> float:
    """A deterministic value in [-1, 1) from the seed and the parts (SHA-256, not ``random``, so it is the
    same in every process and Python version)."""
    text = "|".join(str(p) for p in (seed, *parts))
    raw = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    return raw / 2**63 - 1.0


def parse_target(value: str | None) -> float | None:
    """The annotation's value as a percentage: ``"25"``, ``"25.5"`` or ``"25%"``, clamped to 0..100; None
    when absent or not a number (the pod then gets the default, as if it had not asked)."""
    if value is None:
        return None
    text = value.strip().removesuffix("%").strip()
    try:
        number = float(text)
    except ValueError:
        return None
    if math.isnan(number):
        return None
    return _clamp(number, 0.0, 100.0)


def workload_target(workload: Workload, seed: str | int) -> float:
    """The workload's own target, or its stable default (DEFAULT_TARGET +- DEFAULT_TARGET_SPREAD)."""
    if workload.target is not None:
        return _clamp(workload.target, 0.0, 100.0)
    return DEFAULT_TARGET + DEFAULT_TARGET_SPREAD * noise(seed, "target", workload.key)


def utilization(workloads: Sequence[Workload], *, seed: str | int, device: str, step: int) -> int:
    """Percent busy: the targets summed (time-sliced replicas share one GPU), capped at 100, plus the
    step's jitter; exactly 0 without workloads and never below 1 with a non-zero target."""
    if not workloads:
        return 0
    total = min(100.0, sum(workload_target(w, seed) for w in workloads))
    if total <= 0.0:
        return 0
    amplitude = JITTER_ANNOTATED if all(w.target is not None for w in workloads) else JITTER_DEFAULT
    value = total + amplitude * noise(seed, "util", device, step)
    return round(_clamp(value, 1.0, 100.0))


def activity(
    workloads: Sequence[Workload],
    *,
    memory_mib: int,
    seed: str | int,
    device: str,
    step: int,
    budget_mib: int | None = None,
    idle_fb_mib: int = IDLE_FB_USED_MIB,
) -> Activity:
    """Everything DCGM reports for one device (``device`` is its UUID, which keys the jitter).

    ``budget_mib`` is the memory one workload may fill: the device (default), a time-slicing replica's
    share or an MPS replica's limit."""
    util = utilization(workloads, seed=seed, device=device, step=step)
    budget = memory_mib if budget_mib is None else min(budget_mib, memory_mib)
    used = idle_fb_mib + sum(
        round(budget * (FB_BASE_FILL + FB_LOAD_FILL * workload_target(w, seed) / 100.0)) for w in workloads
    )
    used = min(used, memory_mib)
    if util == 0:
        mem_copy = 0
        gr = 0.0
    else:
        mem_copy = round(_clamp(util * MEM_COPY_RATIO + 2.0 * noise(seed, "memcopy", device, step), 0, 100))
        gr = _clamp(util / 100.0 + 0.01 * noise(seed, "gr", device, step), 0.0, 1.0)
    return Activity(
        util=util,
        mem_copy_util=mem_copy,
        fb_used_mib=used,
        fb_free_mib=memory_mib - used,
        gr_engine_active=round(gr, 6),
        tensor_active=round(gr * TENSOR_RATIO, 6),
        dram_active=round(mem_copy / 100.0, 6),
    )


def board_load(instances: Sequence[tuple[int, int]], compute_slices: int) -> float:
    """Utilisation of a MIG-enabled board from its instances' (utilisation, compute slices)."""
    if compute_slices <= 0:
        return 0.0
    return _clamp(sum(util * slices for util, slices in instances) / compute_slices, 0.0, 100.0)


def thermals(model: GpuModel, load: float, *, index: int, seed: str | int, gpu: str, step: int) -> Thermals:
    """Temperature and power of the board ``gpu`` (its UUID; ``index`` its minor number) at ``load``
    percent. At zero load it is the GPU's idle reading exactly, as nvidia-smi prints it: the jitter comes
    with work, as utilisation's does."""
    idle = idle_reading(model, index)
    fraction = _clamp(load, 0.0, 100.0) / 100.0
    if fraction == 0.0:
        return Thermals(temperature_c=idle.temperature_c, power_w=idle.power_w)
    facts = model.facts
    temperature = idle.temperature_c + (facts.load_temp_c - idle.temperature_c) * fraction
    temperature += noise(seed, "temp", gpu, step)
    power = idle.power_w + (facts.power_limit_w - idle.power_w) * fraction
    power *= 1.0 + 0.015 * noise(seed, "power", gpu, step)
    return Thermals(temperature_c=round(temperature), power_w=round(_clamp(power, 0.0, facts.power_limit_w), 3))


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))
