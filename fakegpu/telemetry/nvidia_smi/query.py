"""``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``.

Headers carry the unit in brackets (``memory.total [MiB]``) even with ``nounits``, which only strips
units from the values; a value the GPU does not have is ``[N/A]``. Every field of ``--help-query-gpu``
is accepted (the list of driver 590, a superset of 570's, with its units and aliases; aliases are printed
under the canonical header), so a tool's usual query never fails as a whole: fields fakegpu does not
model print ``[N/A]``, as real boards print for what they do not support. ``index``, ``count`` and
``timestamp`` depend on the run; every other value is rendered per GPU, twice for a GPU with MIG devices:
whole, and seen through some of its MIG devices only, where NVML refuses the GPU's memory
(``[Insufficient Permissions]``, as ollama#932 and k8s-device-plugin#1683 show).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from fakegpu.telemetry.nvidia_smi.devices import SmiGpu, SmiNode, VisibleGpu
from fakegpu.telemetry.nvidia_smi.health_report import query_values
from fakegpu.telemetry.nvidia_smi.table import mig_mode_text

NA: Final = "[N/A]"
NO_PERMISSION: Final = "[Insufficient Permissions]"
DYNAMIC: Final = ("index", "count", "timestamp")
"""Fields whose value depends on the run (the container's view, the time), computed when printing."""


@dataclass(frozen=True)
class QueryField:
    name: str
    unit: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def header(self) -> str:
        return f"{self.name} [{self.unit}]" if self.unit else self.name


def _f(name: str, unit: str = "", *aliases: str) -> QueryField:
    return QueryField(name, unit, aliases)


def _ecc_errors() -> tuple[QueryField, ...]:
    kinds = ("device_memory", "dram", "register_file", "l1_cache", "l2_cache", "texture_memory", "cbu", "sram", "total")
    plain = tuple(
        _f(f"ecc.errors.{c}.{t}.{k}")
        for c in ("corrected", "uncorrected")
        for t in ("volatile", "aggregate")
        for k in kinds
    )
    sram: tuple[str, ...] = (
        "volatile.sram.parity",
        "volatile.sram.secded",
        "aggregate.sram.parity",
        "aggregate.sram.secded",
        *(f"aggregate.sram.{k}" for k in ("thresholdExceeded", "l2", "sm", "mcu", "pcie", "other")),
    )
    return plain + tuple(_f(f"ecc.errors.uncorrected.{k}") for k in sram)


_EVENT_REASONS: Final = (
    "supported",
    "active",
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
    "sync_boost",
)
_SMOOTHING: Final = (
    ("delayed_power_smoothing_supported", ""),
    ("primary_power_floor", "W"),
    ("secondary_power_floor", "W"),
    ("min_primary_floor_activation_offset", "W"),
    ("min_primary_floor_activation_point", "W"),
    ("window_multiplier", "ms"),
    *(
        (f"{who}.{what}", unit)
        for who in ("curr_profile", "admin_override")
        for what, unit in (
            ("secondary_power_floor", "W"),
            ("primary_floor_act_window_multiplier", ""),
            ("primary_floor_tar_window_multiplier", ""),
            ("primary_floor_act_offset", "W"),
        )
    ),
)

FIELDS: Final = (
    _f("timestamp"),
    _f("driver_version"),
    _f("vgpu_driver_capability.heterogenous_multivGPU"),
    _f("count"),
    _f("name", "", "gpu_name"),
    _f("serial", "", "gpu_serial"),
    _f("uuid", "", "gpu_uuid"),
    _f("pci.bus_id", "", "gpu_bus_id"),
    _f("pci.domain"),
    _f("pci.bus"),
    _f("pci.device"),
    _f("pci.baseClass"),
    _f("pci.subClass"),
    _f("pci.device_id"),
    _f("pci.sub_device_id"),
    *(
        _f(f"vgpu_device_capability.{k}")
        for k in (
            "fractional_multiVgpu",
            "heterogeneous_timeSlice_profile",
            "heterogeneous_timeSlice_sizes",
            "homogeneous_placements",
            "mig_timeSlicing",
            "mig_timeSlicing_mode",
        )
    ),
    _f("pcie.link.gen.current"),
    _f("pcie.link.gen.gpucurrent"),
    _f("pcie.link.gen.max"),
    _f("pcie.link.gen.gpumax"),
    _f("pcie.link.gen.hostmax"),
    _f("pcie.link.width.current"),
    _f("pcie.link.width.max"),
    _f("index"),
    _f("display_mode"),
    _f("display_attached"),
    _f("display_active"),
    _f("persistence_mode"),
    _f("addressing_mode"),
    _f("accounting.mode"),
    _f("accounting.buffer_size"),
    _f("driver_model.current"),
    _f("driver_model.pending"),
    _f("vbios_version"),
    _f("inforom.img", "", "inforom.image"),
    _f("inforom.oem"),
    _f("inforom.ecc"),
    _f("inforom.pwr", "", "inforom.power"),
    _f("inforom.checksum_validation"),
    _f("gpu_recovery_action"),
    _f("gom.current", "", "gpu_operation_mode.current"),
    _f("gom.pending", "", "gpu_operation_mode.pending"),
    _f("fan.speed", "%"),
    _f("pstate"),
    *(_f(f"clocks_event_reasons.{k}", "", f"clocks_throttle_reasons.{k}") for k in _EVENT_REASONS),
    *(
        _f(f"clocks_event_reasons_counters.{k}", "us")
        for k in ("sw_power_cap", "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
    ),
    _f("memory.total", "MiB"),
    _f("memory.reserved", "MiB"),
    _f("memory.used", "MiB"),
    _f("memory.free", "MiB"),
    _f("compute_mode"),
    _f("compute_cap"),
    *(_f(f"utilization.{k}", "%") for k in ("gpu", "memory", "encoder", "decoder", "jpeg", "ofa")),
    _f("encoder.stats.sessionCount"),
    _f("encoder.stats.averageFps"),
    _f("encoder.stats.averageLatency"),
    _f("dramEncryption.mode.current"),
    _f("dramEncryption.mode.pending"),
    _f("ecc.mode.current"),
    _f("ecc.mode.pending"),
    *_ecc_errors(),
    _f("retired_pages.single_bit_ecc.count", "", "retired_pages.sbe"),
    _f("retired_pages.double_bit.count", "", "retired_pages.dbe"),
    _f("retired_pages.pending"),
    _f("remapped_rows.correctable", "", "remapped_rows.sbe"),
    _f("remapped_rows.uncorrectable", "", "remapped_rows.dbe"),
    _f("remapped_rows.pending"),
    _f("remapped_rows.failure"),
    *(_f(f"remapped_rows.histogram.{k}") for k in ("max", "high", "partial", "low", "none")),
    _f("temperature.gpu"),
    _f("temperature.gpu.tlimit"),
    _f("temperature.memory"),
    _f("power.management"),
    _f("power.draw", "W"),
    _f("power.draw.average", "W", "gpu.power.draw.average"),
    _f("power.draw.instant", "W", "gpu.power.draw.instant"),
    _f("power.limit", "W", "gpu.power.requested_limit"),
    _f("enforced.power.limit", "W", "gpu.power.current_limit"),
    _f("power.default_limit", "W", "gpu.power.default_limit"),
    _f("power.min_limit", "W", "gpu.power.min_limit"),
    _f("power.max_limit", "W", "gpu.power.max_limit"),
    _f("module.power.draw.average", "W"),
    _f("module.power.draw.instant", "W"),
    _f("module.power.limit", "W", "module.power.requested_limit"),
    _f("module.enforced.power.limit", "W", "module.power.current_limit"),
    _f("module.power.default_limit", "W"),
    _f("module.power.min_limit", "W"),
    _f("module.power.max_limit", "W"),
    *(_f(f"power_smoothing.{k}", unit) for k, unit in _SMOOTHING),
    _f("edpp_multiplier", "%"),
    _f("clocks.current.graphics", "MHz", "clocks.gr"),
    _f("clocks.current.sm", "MHz", "clocks.sm"),
    _f("clocks.current.memory", "MHz", "clocks.mem"),
    _f("clocks.current.video", "MHz", "clocks.video"),
    _f("clocks.applications.graphics", "MHz", "clocks.applications.gr"),
    _f("clocks.applications.memory", "MHz", "clocks.applications.mem"),
    _f("clocks.default_applications.graphics", "MHz", "clocks.default_applications.gr"),
    _f("clocks.default_applications.memory", "MHz", "clocks.default_applications.mem"),
    _f("clocks.max.graphics", "MHz", "clocks.max.gr"),
    _f("clocks.max.sm", "MHz"),
    _f("clocks.max.memory", "MHz", "clocks.max.mem"),
    _f("mig.mode.current"),
    _f("mig.mode.pending"),
    _f("gsp.mode.current"),
    _f("gsp.mode.default"),
    _f("c2c.mode"),
    _f("protected_memory.total", "MiB"),
    _f("protected_memory.used", "MiB"),
    _f("protected_memory.free", "MiB"),
    _f("fabric.state"),
    _f("fabric.status"),
    _f("fabric.cliqueId"),
    _f("fabric.clusterUuid"),
    *(
        _f(f"fabric.health.{k}")
        for k in (
            "summary",
            "bandwidth",
            "route_recovery_in_progress",
            "route_unhealthy",
            "access_timeout_recovery",
            "incorrect_configuration",
        )
    ),
    *(
        _f(f"platform.{k}")
        for k in ("chassis_serial_number", "slot_number", "tray_index", "host_id", "peer_type", "module_id")
    ),
    _f("platform.gpu_fabric_guid"),
    _f("hostname"),
)
BY_NAME: Final = {f.name: f for f in FIELDS}
ALIASES: Final = {a: f.name for f in FIELDS for a in f.aliases}


def canonical(name: str) -> str | None:
    if name in BY_NAME:
        return name
    return ALIASES.get(name)


def invalid_field(name: str) -> str:
    """nvidia-smi's text for a field it does not know (exit status 2)."""
    return f'Field "{name}" is not a valid field to query.\n\n'


def timestamp_now(now: float | None = None) -> str:
    """The ``timestamp`` field: ``YYYY/MM/DD HH:MM:SS.mmm`` in local time."""
    millis = int((time.time() if now is None else now) * 1000)
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(millis // 1000)) + f".{millis % 1000:03d}"


def _with_unit(value: str, unit: str) -> tuple[str, str]:
    return f"{value} {unit}", value


def _plain(value: str) -> tuple[str, str]:
    return value, value


def gpu_values(node: SmiNode, gpu: SmiGpu, *, partial: bool = False) -> dict[str, tuple[str, str]]:
    """The modelled non-dynamic fields of one GPU as (value with unit, value without unit); fields left out
    print ``[N/A]``. ``partial``: the GPU seen through some of its MIG devices only."""
    domain, bus, rest = gpu.bus_id.split(":")
    device = rest.split(".")[0]
    mig = mig_mode_text(gpu, partial=partial)
    mig_value = NA if mig == "N/A" else mig
    util = _plain(NA) if gpu.mig_enabled or partial else _with_unit("0", "%")
    fan = _plain(NA) if gpu.fan == "N/A" else _with_unit(gpu.fan.rstrip("%"), "%")
    watts = _with_unit(f"{gpu.power_limit_w:.2f}", "W")
    draw = _with_unit(f"{gpu.power_draw_w:.2f}", "W")
    gen = _plain(str(gpu.pcie_gen))
    width = _plain(str(gpu.pcie_width))

    def memory(mib: int) -> tuple[str, str]:
        return _plain(NO_PERMISSION) if partial else _with_unit(str(mib), "MiB")

    return {
        "driver_version": _plain(node.driver_version),
        "name": _plain(gpu.name),
        "serial": _plain(gpu.serial),
        "uuid": _plain(gpu.uuid),
        "pci.bus_id": _plain(gpu.bus_id),
        "pci.domain": _plain(f"0x{int(domain, 16):04X}"),
        "pci.bus": _plain(f"0x{bus}"),
        "pci.device": _plain(f"0x{device}"),
        "pci.baseClass": _plain("0x3"),
        "pci.subClass": _plain("0x2"),
        "pci.device_id": _plain(gpu.pci_device_id),
        "pcie.link.gen.current": gen,
        "pcie.link.gen.gpucurrent": gen,
        "pcie.link.gen.max": gen,
        "pcie.link.gen.gpumax": gen,
        "pcie.link.width.current": width,
        "pcie.link.width.max": width,
        "display_mode": _plain("Enabled"),
        "display_active": _plain("Disabled"),
        "persistence_mode": _plain("Enabled"),
        "accounting.mode": _plain("Disabled"),
        "accounting.buffer_size": _plain("4000"),
        "pstate": _plain(gpu.pstate),
        "compute_mode": _plain(gpu.compute_mode),
        "compute_cap": _plain(gpu.compute_cap),
        "fan.speed": fan,
        "temperature.gpu": _plain(str(gpu.temperature_c)),
        **{f"utilization.{k}": util for k in ("gpu", "memory", "encoder", "decoder", "jpeg", "ofa")},
        "encoder.stats.sessionCount": _plain("0"),
        "encoder.stats.averageFps": _plain("0"),
        "encoder.stats.averageLatency": _plain("0"),
        "memory.total": memory(gpu.memory_mib),
        "memory.reserved": memory(gpu.reserved_mib),
        "memory.used": memory(gpu.used_mib),
        "memory.free": memory(gpu.free_mib),
        "power.draw": draw,
        "power.draw.average": draw,
        "power.draw.instant": draw,
        "power.limit": watts,
        "enforced.power.limit": watts,
        "power.default_limit": watts,
        "power.min_limit": _with_unit(f"{gpu.power_min_w:.2f}", "W"),
        "power.max_limit": watts,
        "mig.mode.current": _plain(mig_value),
        "mig.mode.pending": _plain(mig_value),
        "ecc.mode.current": _plain("Enabled"),
        "ecc.mode.pending": _plain("Enabled"),
        **query_values(gpu.health),
    }


def assemble(
    gpus: Sequence[VisibleGpu],
    attached: int,
    fields: Sequence[str],
    values: Mapping[int, Mapping[str, tuple[str, str]]],
    *,
    noheader: bool,
    nounits: bool,
    timestamp: str = "",
) -> str:
    """The CSV: ``fields`` are canonical names, ``values`` per node GPU index from ``gpu_values`` (with
    ``partial`` as that GPU is seen), ``timestamp`` the ``timestamp`` field's value."""
    lines = [] if noheader else [", ".join(BY_NAME[f].header for f in fields)]
    for v in gpus:
        row = []
        for f in fields:
            if f == "index":
                row.append(str(v.index))
            elif f == "count":
                row.append(str(attached))
            elif f == "timestamp":
                row.append(timestamp)
            else:
                row.append(values[v.gpu.index].get(f, (NA, NA))[1 if nounits else 0])
        lines.append(", ".join(row))
    return "".join(line + "\n" for line in lines)
