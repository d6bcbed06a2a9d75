"""The node spec: our YAML description of one node's GPUs, and the ``--gpus 8xh100-80gb`` shorthand.

Example::

    version: v1
    driverVersion: "570.172.08"
    cudaDriverVersion: "12.8"
    numaNodes: 2
    nvlink: all            # all | none | [[0, 1, 2, 3], [4, 5, 6, 7]]
    fabric:                # multi-node NVLink (GB200/GB300 NVL72): the node's clique and IMEX channels
      clusterUUID: 1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10
      cliqueID: 1
      imexChannels: 2048   # /dev/nvidia-caps-imex-channels/channel0..2047 (the driver's count)
      state: completed     # NVML's registration state: not-supported | not-started | in-progress | completed
      status: SUCCESS      # NVML's registration result once completed (ERROR_UNKNOWN, ...): an NVLink fabric error
      singleNode: false    # true: behind the node's own NVSwitches and Fabric Manager (HGX), not an NVL72 rack
    gpus:
      - model: h100-80gb
        count: 4
        migEnabled: true
        migDevices: {1g.10gb: 7}
      - model: h100-80gb
        count: 4
        numa: [1, 1, 1, 1]
        xid: 79            # starts unhealthy (fell off the bus)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fakegpu.sharing.catalog import CATALOG, lookup_model
from fakegpu.sharing.driver_defaults import DEFAULT_CUDA_DRIVER_VERSION, DEFAULT_DRIVER_VERSION
from fakegpu.sharing.errors import SpecError, from_validation_error
from fakegpu.sharing.nvlink_fabric import (
    FABRIC_SUCCESS,
    IMEX_CHANNEL_COUNT,
    MAX_CLIQUE_ID,
    FabricState,
    NvlinkFabric,
    parse_cluster_uuid,
)
from fakegpu.sharing.yaml_source import load_mapping

MAX_GPUS_PER_NODE = 64
_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")


class MigDeviceSpec(BaseModel):
    """One GPU instance at an explicit start slot (memory slice)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    profile: str
    start: int = Field(ge=0, le=11)
    """Start slot; the widest grid is the RTX PRO 6000 Blackwell's 12 (``nvidia-smi mig -lgipp``), each
    board's own profiles then say which starts it allows."""


class GpuSpec(BaseModel):
    """One or more identical GPUs (``count``), indexed in the order they appear."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True)

    model: str
    count: int = Field(default=1, ge=1, le=MAX_GPUS_PER_NODE)
    numa: int | list[int] | None = Field(default=None)
    mig_enabled: bool = Field(default=False, alias="migEnabled")
    mig_devices: dict[str, int] | list[MigDeviceSpec] | None = Field(default=None, alias="migDevices")
    health: Literal["Healthy", "Unhealthy"] = "Healthy"
    xid: int | None = Field(default=None, ge=0, le=65535)

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if lookup_model(value) is None:
            raise ValueError(f"unknown GPU model {value!r}; expected one of: {', '.join(CATALOG)}")
        return value.strip().lower()

    @field_validator("numa")
    @classmethod
    def _numa_range(cls, value: int | list[int] | None) -> int | list[int] | None:
        values = value if isinstance(value, list) else [value] if value is not None else []
        for v in values:
            if not -1 <= v <= 63:
                raise ValueError(f"NUMA node must be between -1 (none) and 63, found {v}")
        return value

    @field_validator("mig_devices")
    @classmethod
    def _counts_non_negative(
        cls, value: dict[str, int] | list[MigDeviceSpec] | None
    ) -> dict[str, int] | list[MigDeviceSpec] | None:
        if isinstance(value, dict):
            for name, count in value.items():
                if count < 0 or count > 8:
                    raise ValueError(f"count for profile {name} must be between 0 and 8, found {count}")
        return value


class FabricSpec(BaseModel):
    """The node's place on a multi-node NVLink fabric: the NVLink domain's cluster UUID and its clique."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True)

    cluster_uuid: str = Field(alias="clusterUUID")
    clique_id: int = Field(alias="cliqueID", ge=0, le=MAX_CLIQUE_ID)
    imex_channels: int = Field(default=IMEX_CHANNEL_COUNT, alias="imexChannels", ge=0, le=IMEX_CHANNEL_COUNT)
    state: FabricState = "completed"
    status: str = Field(default=FABRIC_SUCCESS, pattern=r"^(SUCCESS|ERROR_[A-Z_]+)$")
    single_node: bool = Field(default=False, alias="singleNode")

    @field_validator("cluster_uuid")
    @classmethod
    def _uuid(cls, value: str) -> str:
        return parse_cluster_uuid(value)

    def fabric(self) -> NvlinkFabric:
        return NvlinkFabric(
            self.cluster_uuid, self.clique_id, self.imex_channels, self.state, self.status, self.single_node
        )


class NodeSpec(BaseModel):
    """A whole node: versions, NUMA layout, NVLink connectivity and its GPUs."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True)

    version: Literal["v1"] = "v1"
    driver_version: str = Field(default=DEFAULT_DRIVER_VERSION, alias="driverVersion")
    cuda_driver_version: str = Field(default=DEFAULT_CUDA_DRIVER_VERSION, alias="cudaDriverVersion")
    machine: str = Field(default="unknown", max_length=253)
    numa_nodes: int = Field(default=1, ge=1, le=64, alias="numaNodes")
    nvlink: Literal["all", "none"] | list[list[int]] | None = None
    fabric: FabricSpec | None = None
    gpus: list[GpuSpec] = Field(min_length=1)

    @field_validator("driver_version", "cuda_driver_version", mode="before")
    @classmethod
    def _quoted_version(cls, value: object) -> object:
        if isinstance(value, int | float) and not isinstance(value, bool):
            raise ValueError(
                f'write the version as a quoted string such as "{value}" (as a YAML number 12.10 becomes 12.1)'
            )
        return value

    @field_validator("driver_version", "cuda_driver_version")
    @classmethod
    def _dotted_version(cls, value: str) -> str:
        if not _VERSION.match(value):
            raise ValueError(f"expected a dotted version such as 570.172.08 or 12.8, found {value!r}")
        return value

    @property
    def gpu_count(self) -> int:
        return sum(g.count for g in self.gpus)


def parse_node_spec(data: Any, source: str) -> NodeSpec:
    """Validate already-parsed YAML as a node spec; errors name the source and the field path."""
    try:
        spec = NodeSpec.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(source, exc) from None
    if spec.gpu_count > MAX_GPUS_PER_NODE:
        raise SpecError(source, f"{spec.gpu_count} GPUs in total; at most {MAX_GPUS_PER_NODE} per node", "gpus")
    for i, gpu in enumerate(spec.gpus):
        if isinstance(gpu.numa, list) and len(gpu.numa) != gpu.count:
            raise SpecError(
                source, f"lists {len(gpu.numa)} NUMA nodes for {gpu.count} GPUs; give one per GPU", f"gpus[{i}].numa"
            )
        if gpu.mig_devices and not gpu.mig_enabled:
            raise SpecError(source, "MIG devices given but migEnabled is false", f"gpus[{i}].migDevices")
        if gpu.mig_enabled and not CATALOG[gpu.model].mig_capable:
            raise SpecError(source, f"{CATALOG[gpu.model].product_name} is not MIG capable", f"gpus[{i}].migEnabled")
    return spec


def load_node_spec(path: str) -> NodeSpec:
    return parse_node_spec(load_mapping(path, "node spec"), path)


_SHORTHAND = re.compile(r"^\s*(?:(\d+)\s*[xX*]\s*)?([A-Za-z0-9.\-]+)\s*$")


def parse_gpus_shorthand(values: Sequence[str], flag: str = "--gpus") -> NodeSpec:
    """``--gpus 8xh100-80gb --gpus 2xt4`` (also comma-separated) as a node spec."""
    gpus: list[dict[str, Any]] = []
    for value in values:
        for item in value.split(","):
            m = _SHORTHAND.match(item)
            if not m:
                raise SpecError(flag, f"expected COUNTxMODEL such as 8xh100-80gb, found {item!r}")
            count = int(m.group(1) or 1)
            model = m.group(2).lower()
            if lookup_model(model) is None:
                raise SpecError(flag, f"unknown GPU model {model!r}; expected one of: {', '.join(CATALOG)}")
            if not 1 <= count <= MAX_GPUS_PER_NODE:
                raise SpecError(flag, f"GPU count must be between 1 and {MAX_GPUS_PER_NODE}, found {count}")
            gpus.append({"model": model, "count": count})
    if not gpus:
        raise SpecError(flag, "no GPUs given")
    return parse_node_spec({"gpus": gpus}, flag)


DEFAULT_GPUS = "8xh100-80gb"
"""What a node has when neither ``--node-spec`` nor ``--gpus`` is given: an HGX H100 node."""
