"""MIG layouts in mig-parted's own config format, and the layouts fakegpu generates per board.

A layout is a list of entries, each selecting GPUs (``devices: all`` or indices, optionally narrowed by
``device-filter`` PCI device IDs) and saying whether MIG is on and which instances to create.
GPUs no entry selects keep what the node spec says, as mig-parted leaves unselected GPUs untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fakegpu.sharing.catalog import GpuModel, MigProfile
from fakegpu.sharing.errors import SpecError, from_validation_error
from fakegpu.sharing.mig_geometry import max_instances
from fakegpu.sharing.mig_naming import resource_suffix
from fakegpu.sharing.yaml_source import load_mapping


class MigPartedEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True)

    devices: Literal["all"] | list[int]
    device_filter: str | list[str] | None = Field(default=None, alias="device-filter")
    mig_enabled: bool = Field(alias="mig-enabled")
    mig_devices: dict[str, int] = Field(default_factory=dict, alias="mig-devices")

    @field_validator("devices")
    @classmethod
    def _indices(cls, value: Literal["all"] | list[int]) -> Literal["all"] | list[int]:
        if isinstance(value, list):
            for i in value:
                if i < 0:
                    raise ValueError(f"GPU index must be >= 0, found {i}")
        return value

    @field_validator("mig_devices")
    @classmethod
    def _counts(cls, value: dict[str, int]) -> dict[str, int]:
        for name, count in value.items():
            if not 0 <= count <= 8:
                raise ValueError(f"count for profile {name} must be between 0 and 8, found {count}")
        return value

    def filters(self) -> list[str]:
        if self.device_filter is None:
            return []
        raw = [self.device_filter] if isinstance(self.device_filter, str) else self.device_filter
        return [f.strip().upper().replace("0X", "0x") for f in raw]


class MigPartedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True)

    version: Literal["v1"]
    mig_configs: dict[str, list[MigPartedEntry]] = Field(alias="mig-configs", min_length=1)


@dataclass(frozen=True)
class MigLayoutChoice:
    """What one GPU becomes under a layout: MIG on or off, and instance counts."""

    mig_enabled: bool
    counts: tuple[tuple[str, int], ...]
    origin: str
    """Where this came from, for error messages (``layouts.yaml: mig-configs.custom[1]``)."""


def parse_mig_parted(data: Any, source: str) -> MigPartedConfig:
    try:
        return MigPartedConfig.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(source, exc) from None


def load_mig_parted(path: str) -> MigPartedConfig:
    return parse_mig_parted(load_mapping(path, "mig-parted config"), path)


def choose_from_file(
    config: MigPartedConfig, layout: str, models: Sequence[GpuModel], source: str
) -> dict[int, MigLayoutChoice]:
    """Map GPU index -> choice for a named layout in a mig-parted file."""
    if layout not in config.mig_configs:
        known = ", ".join(sorted(config.mig_configs))
        raise SpecError(source, f"no layout named {layout!r} in mig-configs; available: {known}")
    chosen: dict[int, MigLayoutChoice] = {}
    for n, entry in enumerate(config.mig_configs[layout]):
        origin = f"mig-configs.{layout}[{n}]"
        if not entry.mig_enabled and entry.mig_devices and any(entry.mig_devices.values()):
            raise SpecError(source, "mig-devices given but mig-enabled is false", origin)
        indices = range(len(models)) if entry.devices == "all" else entry.devices
        filters = entry.filters()
        for index in indices:
            if index >= len(models):
                raise SpecError(
                    source, f"selects GPU {index} but the node has {len(models)} GPU(s)", f"{origin}.devices"
                )
            model = models[index]
            if filters and model.pci_device_id_hex not in filters:
                continue
            if index in chosen:
                raise SpecError(source, f"GPU {index} is selected by both {chosen[index].origin} and {origin}")
            if entry.mig_enabled and not model.mig_capable:
                if entry.devices == "all" and not filters:
                    continue  # mig-parted skips GPUs without MIG support when told "all".
                raise SpecError(source, f"GPU {index} ({model.product_name}) is not MIG capable", origin)
            counts = tuple(sorted(entry.mig_devices.items())) if entry.mig_enabled else ()
            chosen[index] = MigLayoutChoice(entry.mig_enabled, counts, f"{source}: {origin}")
    return chosen


def profile_layout_name(profile: str) -> str:
    """mig-parted's name for "every GPU full of one profile": ``+`` becomes ``.`` as in resource names
    (``all-1g.24gb.me.all``, ``all-1g.24gb-me``; NVIDIA/mig-parted's shipped config for 0x2BB510DE)."""
    return f"all-{resource_suffix(profile)}"


def generated_layout_names(models: Sequence[GpuModel]) -> list[str]:
    names = ["all-disabled", "all-enabled", "all-balanced"]
    for model in models:
        names.extend(n for p in model.mig_profiles if (n := profile_layout_name(p.name)) not in names)
    return names


def _layout_profile(model: GpuModel, layout: str) -> MigProfile | None:
    """The profile an ``all-<profile>`` layout names on this board, in mig-parted's spelling or with the
    profile's own ``+`` (which fakegpu offered before)."""
    for p in model.mig_profiles:
        if layout in (profile_layout_name(p.name), f"all-{p.name}"):
            return p
    return None


def choose_generated(layout: str, models: Sequence[GpuModel], flag: str = "--mig-layout") -> dict[int, MigLayoutChoice]:
    """The layouts fakegpu offers without a file: all-disabled, all-enabled, all-balanced, all-<profile>.

    GPUs that are not MIG capable are left alone, as mig-parted does; a MIG-capable board that lacks
    the requested profile is an error naming the GPU.
    """
    names = generated_layout_names(models)
    if layout not in names and not any(_layout_profile(m, layout) for m in models):
        raise SpecError(flag, f"unknown MIG layout {layout!r}; available for this node: {', '.join(names)}")
    chosen: dict[int, MigLayoutChoice] = {}
    origin = f"{flag} {layout}"
    for index, model in enumerate(models):
        if not model.mig_capable:
            continue
        if layout == "all-disabled":
            chosen[index] = MigLayoutChoice(False, (), origin)
        elif layout == "all-enabled":
            chosen[index] = MigLayoutChoice(True, (), origin)
        elif layout == "all-balanced":
            chosen[index] = MigLayoutChoice(True, tuple(sorted(model.balanced_layout)), origin)
        else:
            profile = _layout_profile(model, layout)
            if profile is None:
                supported = ", ".join(p.name for p in model.mig_profiles)
                raise SpecError(
                    flag,
                    f"GPU {index} ({model.product_name}) has no MIG profile {layout.removeprefix('all-')}; "
                    f"supported: {supported}",
                )
            chosen[index] = MigLayoutChoice(True, ((profile.name, max_instances(model, profile)),), origin)
    return chosen
