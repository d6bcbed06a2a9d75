"""The NVIDIA k8s-device-plugin config file (``version: v1``), read as NVIDIA reads it.

Field names, defaults and error texts follow NVIDIA's ``api/config/v1``. Like NVIDIA's JSON decoding,
keys the schema does not know are not errors; they are reported as warnings (NVIDIA drops them
silently, which is how ``renameByDefault`` under ``flags`` goes unnoticed, NVIDIA issue #1433).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fakegpu.sharing.errors import SpecError, from_validation_error
from fakegpu.sharing.yaml_source import load_mapping, parse_yaml, read_text

_ALLOW = ConfigDict(extra="allow", populate_by_name=True, frozen=True, strict=True)

MAX_TIME_SLICING_REPLICAS = 1024
"""fakegpu's cap on replicas per device (NVIDIA has none; MPS has its own, 48 or 16)."""


class PluginFlagsFile(BaseModel):
    model_config = _ALLOW
    pass_device_specs: bool | None = Field(default=None, alias="passDeviceSpecs")
    device_list_strategy: str | list[str] | None = Field(default=None, alias="deviceListStrategy")
    device_id_strategy: str | None = Field(default=None, alias="deviceIDStrategy")
    cdi_annotation_prefix: str | None = Field(default=None, alias="cdiAnnotationPrefix")
    nvidia_ctk_path: str | None = Field(default=None, alias="nvidiaCTKPath")
    container_driver_root: str | None = Field(default=None, alias="containerDriverRoot")
    shared_devices_allocation_policy: str | None = Field(default=None, alias="sharedDevicesAllocationPolicy")


class GfdFlagsFile(BaseModel):
    """GPU feature discovery's own flags: ``sleepInterval`` shapes ``--label-node``; the rest are accepted
    and unused, as the device plugin does."""

    model_config = _ALLOW
    oneshot: bool | None = None
    no_timestamp: bool | None = Field(default=None, alias="noTimestamp")
    sleep_interval: str | int | float | None = Field(default=None, alias="sleepInterval")
    """A Go duration, ``infinite``, or a number of nanoseconds (``fakegpu.sharing.sleep_interval``)."""
    output_file: str | None = Field(default=None, alias="outputFile")
    machine_type_file: str | None = Field(default=None, alias="machineTypeFile")


class FlagsFile(BaseModel):
    model_config = _ALLOW
    mig_strategy: str | None = Field(default=None, alias="migStrategy")
    fail_on_init_error: bool | None = Field(default=None, alias="failOnInitError")
    mps_root: str | None = Field(default=None, alias="mpsRoot")
    nvidia_driver_root: str | None = Field(default=None, alias="nvidiaDriverRoot")
    nvidia_dev_root: str | None = Field(default=None, alias="nvidiaDevRoot")
    gds_enabled: bool | None = Field(default=None, alias="gdsEnabled")
    mofed_enabled: bool | None = Field(default=None, alias="mofedEnabled")
    gdrcopy_enabled: bool | None = Field(default=None, alias="gdrcopyEnabled")
    use_node_feature_api: bool | None = Field(default=None, alias="useNodeFeatureAPI")
    device_discovery_strategy: str | None = Field(default=None, alias="deviceDiscoveryStrategy")
    plugin: PluginFlagsFile | None = None
    gfd: GfdFlagsFile | None = None


class ResourcePattern(BaseModel):
    model_config = _ALLOW
    pattern: str = ""
    name: str = ""

    @model_validator(mode="after")
    def _both_set(self) -> ResourcePattern:
        if not self.pattern:
            raise ValueError("resources must have a 'pattern' field set")
        if not self.name:
            raise ValueError("resources must have a 'name' field set")
        return self


class ResourcesFile(BaseModel):
    model_config = _ALLOW
    gpus: list[ResourcePattern] = Field(default_factory=list)
    mig: list[ResourcePattern] = Field(default_factory=list)


_MIG_INDEX = re.compile(r"^\d+:\d+$")


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _is_device_ref(ref: str) -> bool:
    """GPU index, MIG index, GPU UUID or MIG UUID (``MIG-<uuid>`` or ``MIG-GPU-<uuid>/<gi>/<ci>``)."""
    if ref.isdigit() or _MIG_INDEX.match(ref):
        return True
    if ref.startswith("GPU-"):
        return _is_uuid(ref[4:])
    if ref.startswith("MIG-"):
        rest = ref[4:]
        if _is_uuid(rest):
            return True
        parts = rest.split("/")
        return (
            len(parts) == 3
            and parts[0].startswith("GPU-")
            and _is_uuid(parts[0][4:])
            and all(p.isdigit() for p in parts[1:])
        )
    return False


class ReplicaResource(BaseModel):
    model_config = _ALLOW
    name: str
    rename: str = ""
    devices: str | int | list[str] = "all"
    replicas: int

    @model_validator(mode="before")
    @classmethod
    def _nvidia_checks(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "name" not in data:
            raise ValueError("no resource name specified")
        if "replicas" not in data:
            raise ValueError("no replicas specified")
        replicas = data["replicas"]
        if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas < 2:
            raise ValueError("number of replicas must be >= 2")
        if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas > MAX_TIME_SLICING_REPLICAS:
            # NVIDIA sets no upper bound; fakegpu does, so a typo cannot make a daemon build 10^30 devices.
            raise ValueError(f"number of replicas must be <= {MAX_TIME_SLICING_REPLICAS} (fakegpu's limit)")
        if "devices" in data:
            data = {**data, "devices": _parse_devices(data["devices"])}
        return data


def _parse_devices(value: Any) -> str | int | list[str]:
    if isinstance(value, str):
        if value != "all":
            raise ValueError(f"devices set as '{value}' but the only valid string input is 'all'")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError(f"devices set as '{value}' but a count of devices must be > 0")
        return value
    if isinstance(value, list):
        refs: list[str] = []
        for item in value:
            if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
                refs.append(str(item))
            elif isinstance(item, str) and _is_device_ref(item):
                refs.append(item)
            else:
                raise ValueError(f"unsupported type for device in devices list: {item}, {type(item).__name__}")
        return refs
    raise ValueError(f"unrecognized type for devices spec: {value!r}")


class ReplicatedResources(BaseModel):
    """``sharing.timeSlicing`` / ``sharing.mps`` as NVIDIA v0.20.0 reads them (``api/config/v1/replicas.go``).

    No ``strategy`` field: v0.12 removed it and v0.20 drops the key like any unknown one, so an old
    ``strategy: roundrobin`` loads (with fakegpu's unknown-field warning) instead of failing.
    """

    model_config = _ALLOW
    rename_by_default: bool = Field(default=False, alias="renameByDefault")
    fail_requests_greater_than_one: bool | None = Field(default=None, alias="failRequestsGreaterThanOne")
    resources: list[ReplicaResource]

    @model_validator(mode="before")
    @classmethod
    def _nvidia_checks(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("resources"):
            raise ValueError("no resources specified")
        return data


class SharingFile(BaseModel):
    model_config = _ALLOW
    time_slicing: ReplicatedResources | None = Field(default=None, alias="timeSlicing")
    mps: ReplicatedResources | None = None


class ImexFile(BaseModel):
    """``imex`` in NVIDIA v0.17's form (``api/config/v1/imex.go``: ``channelIDs``, ``required``).

    Which channel IDs are valid (``[]`` or ``[0]``) is checked once the flags are resolved
    (``plugin_config``), since ``--imex-channel-ids`` / ``IMEX_CHANNEL_IDS`` override this field. The later
    ``defaultChannelStrategy`` form is not read (it draws the unknown-field warning)."""

    model_config = _ALLOW
    channel_ids: list[int] | None = Field(default=None, alias="channelIDs")
    required: bool | None = None


class NvidiaConfigFile(BaseModel):
    model_config = _ALLOW
    version: str = "v1"
    flags: FlagsFile = Field(default_factory=FlagsFile)
    resources: ResourcesFile = Field(default_factory=ResourcesFile)
    sharing: SharingFile = Field(default_factory=SharingFile)
    imex: ImexFile = Field(default_factory=ImexFile)

    @field_validator("version")
    @classmethod
    def _v1(cls, value: str) -> str:
        if value not in ("", "v1"):
            raise ValueError(f"unknown version: {value}")
        return "v1"


def unknown_fields(model: BaseModel, path: str = "") -> list[str]:
    """Every key the schema does not know, as a field path (``flags.renameByDefault``)."""
    found = [f"{path}{key}" for key in (model.model_extra or {})]
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        key = info.alias or name
        children = value if isinstance(value, list) else [value]
        for n, child in enumerate(children):
            if isinstance(child, BaseModel):
                suffix = f"[{n}]" if isinstance(value, list) else ""
                found.extend(unknown_fields(child, f"{path}{key}{suffix}."))
    return found


def parse_nvidia_config(data: Any, source: str) -> tuple[NvidiaConfigFile, list[str]]:
    """Validate a parsed config; returns it with warnings for keys NVIDIA would silently drop."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(source, f"expected a mapping at the top level of the config file, found {type(data).__name__}")
    try:
        config = NvidiaConfigFile.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(source, exc) from None
    warnings = [
        f"{source}: unknown field {path} is ignored (the NVIDIA device plugin ignores it silently)"
        for path in unknown_fields(config)
    ]
    return config, warnings


def load_nvidia_config(path: str) -> tuple[NvidiaConfigFile, list[str]]:
    text = read_text(path, "config file")
    data = parse_yaml(text, path) if text.strip() else {}
    return parse_nvidia_config(data, path)


__all__ = ["NvidiaConfigFile", "load_mapping", "load_nvidia_config", "parse_nvidia_config"]
