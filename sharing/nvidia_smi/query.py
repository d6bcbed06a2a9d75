"""``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``.

Headers carry the unit in brackets (``memory.total [MiB]``) even with ``nounits``, which only strips
units from the values; a value the GPU does not have is ``[N/A]``. Field names are nvidia-smi's, with its
aliases (``gpu_name``, ``gpu_uuid``, ``gpu_bus_id``, ...) printed under the canonical header. Only
``index`` and ``count`` depend on what the container sees; every other value is rendered per GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from sharing.nvidia_smi.devices import SmiGpu, SmiNode, VisibleGpu
from sharing.nvidia_smi.table import mig_mode_text

NA: Final = "[N/A]"
DYNAMIC: Final = ("index", "count")
"""Fields whose value depends on the container's view, computed when printing."""


@dataclass(frozen=True)
class QueryField:
    name: str
    unit: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def header(self) -> str:
        return f"{self.name} [{self.unit}]" if self.unit else self.name


FIELDS: Final = (
    QueryField("count"),
    QueryField("index"),
    QueryField("name", aliases=("gpu_name",)),
    QueryField("serial", aliases=("gpu_serial",)),
    QueryField("uuid", aliases=("gpu_uuid",)),
    QueryField("pci.bus_id", aliases=("gpu_bus_id",)),
    QueryField("pci.domain"),
    QueryField("pci.bus"),
    QueryField("pci.device"),
    QueryField("pci.device_id"),
    QueryField("pcie.link.gen.current"),
    QueryField("pcie.link.gen.max"),
    QueryField("pcie.link.width.current"),
    QueryField("pcie.link.width.max"),
    QueryField("driver_version"),
    QueryField("pstate"),
    QueryField("persistence_mode"),
    QueryField("compute_mode"),
    QueryField("compute_cap"),
    QueryField("fan.speed", "%"),
    QueryField("temperature.gpu"),
    QueryField("utilization.gpu", "%"),
    QueryField("utilization.memory", "%"),
    QueryField("memory.total", "MiB"),
    QueryField("memory.reserved", "MiB"),
    QueryField("memory.used", "MiB"),
    QueryField("memory.free", "MiB"),
    QueryField("power.draw", "W"),
    QueryField("power.limit", "W"),
    QueryField("enforced.power.limit", "W"),
    QueryField("power.default_limit", "W"),
    QueryField("power.min_limit", "W"),
    QueryField("power.max_limit", "W"),
    QueryField("mig.mode.current"),
    QueryField("mig.mode.pending"),
    QueryField("ecc.mode.current"),
    QueryField("ecc.mode.pending"),
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


def _with_unit(value: str, unit: str) -> tuple[str, str]:
    return f"{value} {unit}", value


def _plain(value: str) -> tuple[str, str]:
    return value, value


def gpu_values(node: SmiNode, gpu: SmiGpu) -> dict[str, tuple[str, str]]:
    """Every non-dynamic field of one GPU as (value with unit, value without unit)."""
    domain, bus, rest = gpu.bus_id.split(":")
    device = rest.split(".")[0]
    mig = mig_mode_text(gpu)
    mig_value = NA if mig == "N/A" else mig
    util = _plain(NA) if gpu.mig_enabled else _with_unit("0", "%")
    fan = _plain(NA) if gpu.fan == "N/A" else _with_unit(gpu.fan.rstrip("%"), "%")
    watts = _with_unit(f"{gpu.power_limit_w:.2f}", "W")
    values = {
        "name": _plain(gpu.name),
        "serial": _plain(gpu.serial),
        "uuid": _plain(gpu.uuid),
        "pci.bus_id": _plain(gpu.bus_id),
        "pci.domain": _plain(f"0x{int(domain, 16):04X}"),
        "pci.bus": _plain(f"0x{bus}"),
        "pci.device": _plain(f"0x{device}"),
        "pci.device_id": _plain(gpu.pci_device_id),
        "pcie.link.gen.current": _plain(str(gpu.pcie_gen)),
        "pcie.link.gen.max": _plain(str(gpu.pcie_gen)),
        "pcie.link.width.current": _plain("16"),
        "pcie.link.width.max": _plain("16"),
        "driver_version": _plain(node.driver_version),
        "pstate": _plain(gpu.pstate),
        "persistence_mode": _plain("Enabled"),
        "compute_mode": _plain("Default"),
        "compute_cap": _plain(gpu.compute_cap),
        "fan.speed": fan,
        "temperature.gpu": _plain(str(gpu.temperature_c)),
        "utilization.gpu": util,
        "utilization.memory": util,
        "memory.total": _with_unit(str(gpu.memory_mib), "MiB"),
        "memory.reserved": _with_unit(str(gpu.reserved_mib), "MiB"),
        "memory.used": _with_unit(str(gpu.used_mib), "MiB"),
        "memory.free": _with_unit(str(gpu.free_mib), "MiB"),
        "power.draw": _with_unit(f"{gpu.power_draw_w:.2f}", "W"),
        "power.limit": watts,
        "enforced.power.limit": watts,
        "power.default_limit": watts,
        "power.min_limit": _with_unit(f"{gpu.power_min_w:.2f}", "W"),
        "power.max_limit": watts,
        "mig.mode.current": _plain(mig_value),
        "mig.mode.pending": _plain(mig_value),
        "ecc.mode.current": _plain("Enabled"),
        "ecc.mode.pending": _plain("Enabled"),
    }
    missing = set(BY_NAME) - set(DYNAMIC) - set(values)
    assert not missing, f"query fields without a value: {sorted(missing)}"
    return values


def assemble(
    gpus: Sequence[VisibleGpu],
    attached: int,
    fields: Sequence[str],
    values: Mapping[int, Mapping[str, tuple[str, str]]],
    *,
    noheader: bool,
    nounits: bool,
) -> str:
    """The CSV: ``fields`` are canonical names, ``values`` per node GPU index from ``gpu_values``."""
    lines = [] if noheader else [", ".join(BY_NAME[f].header for f in fields)]
    for v in gpus:
        row = []
        for f in fields:
            if f == "index":
                row.append(str(v.index))
            elif f == "count":
                row.append(str(attached))
            else:
                row.append(values[v.gpu.index][f][1 if nounits else 0])
        lines.append(", ".join(row))
    return "".join(line + "\n" for line in lines)
