"""The effective plugin configuration: NVIDIA's precedence (flag > env > file > default) and checks.

Fields NVIDIA v0.20.0 accepts but overrides (custom ``resources``, per-resource ``rename`` and
``devices`` in sharing) are overridden the same way with NVIDIA's warning, unless an experimental
switch asks fakegpu to honour them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fakegpu.sharing import sleep_interval as gfd_sleep
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.go_bool import parse_go_bool_text
from fakegpu.sharing.label_syntax import DNS1123_SUBDOMAIN
from fakegpu.sharing.nvidia_config import NvidiaConfigFile, ReplicatedResources
from fakegpu.sharing.plugin_flags import PLUGIN_FLAGS, FlagSpec

SharingStrategy = Literal["none", "time-slicing", "mps"]

DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
CDI_STRATEGIES = ("cdi-annotations", "cdi-cri")
RESOURCE_PREFIX = "nvidia.com/"
SHARED_SUFFIX = ".shared"


@dataclass(frozen=True)
class ReplicaRule:
    """One ``sharing.*.resources`` entry after normalisation (full resource names)."""

    name: str
    rename: str
    replicas: int
    devices: str | int | tuple[str, ...]


@dataclass(frozen=True)
class SharingConfig:
    strategy: SharingStrategy
    rename_by_default: bool
    fail_requests_greater_than_one: bool
    rules: tuple[ReplicaRule, ...]
    source: str = "config file"
    """The config file the sharing section came from, so errors found while expanding name it."""

    def rule_for(self, resource: str) -> ReplicaRule | None:
        for rule in self.rules:
            if rule.name == resource:
                return rule
        return None


@dataclass(frozen=True)
class ResourcePatternRule:
    pattern: str
    name: str

    def matches(self, value: str) -> bool:
        """NVIDIA's glob: ``*`` matches anything, the whole string must match (anchored since v0.20.0)."""
        regex = "^" + ".*".join(re.escape(part) for part in self.pattern.split("*")) + "$"
        return re.match(regex, value) is not None


@dataclass(frozen=True)
class PluginConfig:
    mig_strategy: str = "none"
    fail_on_init_error: bool = True
    mps_root: str = ""
    nvidia_driver_root: str = "/"
    nvidia_dev_root: str = "/"
    gds_enabled: bool = False
    mofed_enabled: bool = False
    gdrcopy_enabled: bool = False
    device_discovery_strategy: str = "auto"
    pass_device_specs: bool = False
    device_list_strategy: tuple[str, ...] = ("envvar",)
    device_id_strategy: str = "uuid"
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    nvidia_ctk_path: str = "/usr/bin/nvidia-ctk"
    container_driver_root: str = "/driver-root"
    shared_devices_allocation_policy: str = "distributed"
    sharing: SharingConfig = SharingConfig("none", False, False, ())
    gpu_resource_rules: tuple[ResourcePatternRule, ...] = ()
    mig_resource_rules: tuple[ResourcePatternRule, ...] = ()
    imex_channel_ids: tuple[int, ...] = ()
    imex_required: bool = False
    imex_required_origin: str = field(default="default of --imex-required", compare=False)
    """Where ``imex_required`` came from (flag, environment variable or file field), for the start error."""
    cdi_feature_flags: tuple[str, ...] = ()
    cdi_disable_hooks: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    use_node_feature_api: bool = False
    """GFD's ``useNodeFeatureAPI``: labels go to a NodeFeature (``fakegpu.sharing.node_feature``), not the Node."""
    sleep_interval: str = gfd_sleep.DEFAULT
    """GFD's ``sleepInterval``: a Go duration, or ``infinite`` (label once per run)."""
    nvidia_smi_dir: str | None = None
    """fakegpu extension, not NVIDIA's: where the fake nvidia-smi files live on the host when containers get
    them mounted (``fakegpu.sharing.inputs.InventoryInputs.nvidia_smi_dir``); None = no injection."""


def normalize_resource_name(name: str, source: str, where: str) -> str:
    """NVIDIA's ResourceName: ``gpu`` -> ``nvidia.com/gpu``; at most 63 characters, DNS-style name part."""
    full = name if "/" in name else RESOURCE_PREFIX + name
    prefix, _, short = full.partition("/")
    if len(full) > 63:
        raise SpecError(source, f"resource name {full!r} is longer than 63 characters", where)
    if prefix != "nvidia.com" or not DNS1123_SUBDOMAIN.fullmatch(short):
        raise SpecError(
            source,
            f"invalid resource name {full!r}: expected nvidia.com/<name> with a lower-case DNS name part",
            where,
        )
    return full


def _from_file(file: NvidiaConfigFile | None, path: tuple[str, ...]) -> Any:
    if not path:  # a command-line-only flag
        return None
    node: Any = file
    for part in path:
        if node is None:
            return None
        attr = next((k for k, info in type(node).model_fields.items() if (info.alias or k) == part), part)
        node = getattr(node, attr, None)
    return node


def parse_go_bool(raw: str, origin: str) -> bool:
    """A boolean flag's text as NVIDIA's urfave/cli reads it (Go's ``strconv.ParseBool``)."""
    try:
        return parse_go_bool_text(raw)
    except ValueError:
        raise SpecError(origin, f"could not parse {raw!r} as bool value (expected true or false)") from None


def _parse_text(spec: FlagSpec, raw: str, origin: str) -> str | bool | tuple[str, ...] | tuple[int, ...]:
    if spec.kind == "bool":
        return parse_go_bool(raw, origin)
    if spec.kind == "list":
        return tuple(v.strip() for v in raw.split(",") if v.strip())
    if spec.kind == "ints":
        try:
            return tuple(int(v) for v in raw.split(",") if v.strip())
        except ValueError:
            raise SpecError(origin, f"could not parse {raw!r} as a comma-separated list of integers") from None
    return raw


def resolve_plugin_config(
    file: NvidiaConfigFile | None,
    *,
    file_source: str = "config file",
    cli: Mapping[str, str | bool | None] | None = None,
    env: Mapping[str, str] | None = None,
    file_warnings: list[str] | None = None,
    honor_custom_resources: bool = False,
    honor_sharing_rename_devices: bool = False,
) -> PluginConfig:
    """Combine CLI values (only those the user gave), environment and file; then validate as NVIDIA does."""
    cli = cli or {}
    env = env or {}
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for spec in PLUGIN_FLAGS:
        cli_value = cli.get(spec.key)
        env_name = next((e for e in spec.env if env.get(e, "") != ""), None)
        if cli_value is not None:
            origin = spec.cli
            value: Any = _parse_text(spec, cli_value, origin) if isinstance(cli_value, str) else cli_value
        elif env_name is not None:
            origin = f"environment variable {env_name}"
            value = _parse_text(spec, env[env_name], origin)
        elif (from_file := _from_file(file, spec.file_path)) is not None:
            origin = f"{file_source}: {'.'.join(spec.file_path)}"
            value = from_file
            if spec.kind in ("list", "ints"):
                value = (value,) if isinstance(value, str) else tuple(value)
            elif spec.kind == "duration":
                value = gfd_sleep.from_config_file(value)
        else:
            origin = f"default of {spec.cli}"
            value = spec.default
        values[spec.key] = value
        origins[spec.key] = origin
    if not values["nvidia_dev_root"]:
        values["nvidia_dev_root"] = values["nvidia_driver_root"]

    warnings = list(file_warnings or [])
    sharing = _resolve_sharing(file, file_source, honor_sharing_rename_devices, warnings)
    gpu_rules: tuple[ResourcePatternRule, ...] = ()
    mig_rules: tuple[ResourcePatternRule, ...] = ()
    if file is not None and (file.resources.gpus or file.resources.mig):
        if honor_custom_resources:
            gpu_rules = tuple(
                ResourcePatternRule(
                    r.pattern, normalize_resource_name(r.name, file_source, f"resources.gpus[{i}].name")
                )
                for i, r in enumerate(file.resources.gpus)
            )
            mig_rules = tuple(
                ResourcePatternRule(r.pattern, normalize_resource_name(r.name, file_source, f"resources.mig[{i}].name"))
                for i, r in enumerate(file.resources.mig)
            )
        else:
            warnings.append("Customizing the 'resources' field is not yet supported in the config. Ignoring...")

    config = PluginConfig(
        **values,
        sharing=sharing,
        imex_required_origin=origins["imex_required"],
        gpu_resource_rules=gpu_rules,
        mig_resource_rules=mig_rules,
        warnings=tuple(warnings),
    )
    _validate(config, origins)
    return config


def _resolve_sharing(file: NvidiaConfigFile | None, source: str, honor: bool, warnings: list[str]) -> SharingConfig:
    chosen = _chosen_sharing(file)
    if file is None or chosen is None:
        return SharingConfig("none", False, False, ())
    strategy, key, replicated = chosen
    if strategy == "mps" and file.sharing.time_slicing is not None:
        warnings.append(f"{source}: sharing.timeSlicing is ignored because sharing.mps is set (MPS takes precedence)")
    rules = _replica_rules(replicated, key, source, honor, warnings)
    fail = replicated.fail_requests_greater_than_one
    if fail is None:
        fail = strategy == "mps"
    return SharingConfig(strategy, replicated.rename_by_default, fail, rules, source)


def _chosen_sharing(
    file: NvidiaConfigFile | None,
) -> tuple[SharingStrategy, str, ReplicatedResources] | None:
    """The sharing strategy in force, its key in the file and its resources; None when no resource is
    replicated. MPS wins when both are configured, as in NVIDIA's Sharing.SharingStrategy()."""
    if file is None:
        return None
    if file.sharing.mps is not None and any(r.replicas > 1 for r in file.sharing.mps.resources):
        return ("mps", "mps", file.sharing.mps)
    if file.sharing.time_slicing is not None and any(r.replicas > 1 for r in file.sharing.time_slicing.resources):
        return ("time-slicing", "timeSlicing", file.sharing.time_slicing)
    return None


def _replica_rules(
    replicated: ReplicatedResources, key: str, source: str, honor: bool, warnings: list[str]
) -> tuple[ReplicaRule, ...]:
    """The ``sharing.<key>.resources`` entries with full names; unless ``honor``, a rename or device list
    NVIDIA does not support yet is overridden, with NVIDIA's warning once per field."""
    rules: list[ReplicaRule] = []
    set_rename = set_devices = False
    seen: set[str] = set()
    for i, r in enumerate(replicated.resources):
        name = normalize_resource_name(r.name, source, f"sharing.{key}.resources[{i}].name")
        if name in seen:
            raise SpecError(source, f"resource {name} is listed twice", f"sharing.{key}.resources[{i}].name")
        seen.add(name)
        default_rename = name + SHARED_SUFFIX if replicated.rename_by_default else ""
        rename = normalize_resource_name(r.rename, source, f"sharing.{key}.resources[{i}].rename") if r.rename else ""
        if not rename:
            # NVIDIA pre-fills the rename when decoding renameByDefault (api/config/v1/replicas.go), so
            # only a rename the user wrote can differ from the default and draw the warning.
            rename = default_rename
        devices: str | int | tuple[str, ...] = r.devices if not isinstance(r.devices, list) else tuple(r.devices)
        if not honor:
            if rename != default_rename:
                set_rename = True
                rename = default_rename
            if devices != "all":
                set_devices = True
                devices = "all"
        rules.append(ReplicaRule(name, rename, r.replicas, devices))
    if set_rename:
        warnings.append(
            f"Setting the 'rename' field in sharing.{key}.resources is not yet supported in the config. Ignoring..."
        )
    if set_devices:
        warnings.append(
            f"Customizing the 'devices' field in sharing.{key}.resources is not yet supported in the config. "
            "Ignoring..."
        )
    return tuple(rules)


def _validate(config: PluginConfig, origins: Mapping[str, str]) -> None:
    """NVIDIA's validateFlags, in NVIDIA's order and with its texts."""
    for strategy in config.device_list_strategy:
        if strategy not in DEVICE_LIST_STRATEGIES:
            raise SpecError(
                origins["device_list_strategy"],
                f"invalid --device-list-strategy option: invalid strategy: {strategy}",
            )
    if not config.device_list_strategy:
        raise SpecError(origins["device_list_strategy"], "invalid --device-list-strategy option: empty strategy list")
    if config.device_discovery_strategy == "tegra" and any(s in CDI_STRATEGIES for s in config.device_list_strategy):
        raise SpecError(
            origins["device_list_strategy"],
            "CDI --device-list-strategy options are only supported on NVML-based systems",
        )
    if config.device_id_strategy not in ("uuid", "index"):
        raise SpecError(
            origins["device_id_strategy"], f"invalid --device-id-strategy option: {config.device_id_strategy}"
        )
    if config.shared_devices_allocation_policy not in ("distributed", "packed"):
        raise SpecError(
            origins["shared_devices_allocation_policy"],
            f"invalid --shared-devices-allocation-policy option: {config.shared_devices_allocation_policy}",
        )
    if config.mig_strategy not in ("none", "single", "mixed"):
        raise SpecError(origins["mig_strategy"], f"unknown MIG strategy: {config.mig_strategy}")
    if config.sharing.strategy == "mps":
        if config.mig_strategy == "mixed":
            raise SpecError(origins["mig_strategy"], "using --mig-strategy=mixed is not supported with MPS")
        if not config.mps_root:
            # Name the file whose sharing.mps needs it, unless the (empty) root was given explicitly.
            explicit = not origins["mps_root"].startswith("default")
            raise SpecError(
                origins["mps_root"] if explicit else config.sharing.source,
                "using MPS requires --mps-root to be specified (flag --mps-root, env MPS_ROOT or flags.mpsRoot)",
                None if explicit else "sharing.mps",
            )
    if config.device_discovery_strategy not in ("auto", "nvml", "tegra"):
        raise SpecError(
            origins["device_discovery_strategy"],
            f"invalid --device-discovery-strategy option: {config.device_discovery_strategy}",
        )
    gfd_sleep.sleep_interval_seconds(config.sleep_interval, origins["sleep_interval"])
    if config.imex_channel_ids not in ((), (0,)):
        # NVIDIA v0.17 api/config/v1/imex.go AssertChannelIDsValid (no channel, or channel 0 only), wrapped
        # by cmd/nvidia-device-plugin/main.go validateFlags; Go prints the slice as [0 1].
        found = "[" + " ".join(str(c) for c in config.imex_channel_ids) + "]"
        raise SpecError(
            origins["imex_channel_ids"],
            f"invalid IMEX channel IDs: invalid IMEX config: channelIDs must be [] or [0]; found {found}",
        )
