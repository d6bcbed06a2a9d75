"""dcgm-exporter's metric names, HELP texts and label order, pinned so dashboards and alerts written for
the real exporter (Grafana's NVIDIA DCGM dashboard, KEDA/HPA queries, idle-GPU reapers) work unchanged.

Sources (NVIDIA/dcgm-exporter 4.x): ``etc/dcp-metrics-included.csv`` (the counters the Helm chart and the
GPU Operator collect, with their HELP texts and types) and the GPU template in
``internal/pkg/rendermetrics/render_metrics.go``, which fixes the label order::

    gpu, UUID, pci_bus_id, device, modelName, [GPU_I_PROFILE, GPU_I_ID], Hostname,
    <label counters, sorted: DCGM_FI_DRIVER_VERSION>, <attributes, sorted: container, err_code, ...>

Attributes are Go map keys, printed sorted bytewise: ``container``, ``dra_claim_name``,
``dra_claim_namespace``, ``dra_device_name``, ``dra_driver_name``, ``dra_pool_name``, ``err_code``,
``err_msg``, ``namespace``, ``pod``, ``vgpu``. A real scrape (dcgm-exporter 4.x, driver 580) reads::

    DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-...",pci_bus_id="00000000:03:00.0",device="nvidia0",
    modelName="...",Hostname="...",DCGM_FI_DRIVER_VERSION="580.65.06",err_code="0",err_msg="No Error"} 0

For a MIG instance ``gpu``, ``UUID``, ``pci_bus_id`` and ``device`` are the parent GPU's, and
``GPU_I_PROFILE``/``GPU_I_ID`` name the instance. GPU and memory-copy utilisation are not available
per MIG instance (NVML answers "not supported"), so those two metrics have no MIG series; a
MIG-enabled GPU is monitored only through its instances (dcgm-exporter's default ``-d f``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Counter:
    """One DCGM field as dcgm-exporter exposes it."""

    name: str
    help: str
    type: str = "gauge"
    per_mig_instance: bool = True
    """False for fields NVML cannot measure per MIG instance: no series for MIG entities."""
    double: bool = False
    """DCGM_FT_DOUBLE (printed with Go's ``%f``: ``78.174000``) rather than DCGM_FT_INT64 (``%d``)."""


GPU_TEMP: Final = Counter("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).")
POWER_USAGE: Final = Counter("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", double=True)
GPU_UTIL: Final = Counter("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", per_mig_instance=False)
MEM_COPY_UTIL: Final = Counter("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", per_mig_instance=False)
XID_ERRORS: Final = Counter("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.")
FB_FREE: Final = Counter("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).")
FB_USED: Final = Counter("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).")
GR_ENGINE_ACTIVE: Final = Counter(
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", double=True
)
PIPE_TENSOR_ACTIVE: Final = Counter(
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", double=True
)
DRAM_ACTIVE: Final = Counter(
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "Ratio of cycles the device memory interface is active sending or receiving data.",
    double=True,
)

SM_CLOCK: Final = Counter("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).")
ECC_SBE_VOL_TOTAL: Final = Counter(
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", "counter"
)
ECC_DBE_VOL_TOTAL: Final = Counter(
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", "counter"
)
ECC_SBE_AGG_TOTAL: Final = Counter(
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "Total number of single-bit persistent ECC errors.", "counter"
)
ECC_DBE_AGG_TOTAL: Final = Counter(
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "Total number of double-bit persistent ECC errors.", "counter"
)
RETIRED_SBE: Final = Counter(
    "DCGM_FI_DEV_RETIRED_SBE", "Total number of retired pages due to single-bit errors.", "counter"
)
RETIRED_DBE: Final = Counter(
    "DCGM_FI_DEV_RETIRED_DBE", "Total number of retired pages due to double-bit errors.", "counter"
)
RETIRED_PENDING: Final = Counter("DCGM_FI_DEV_RETIRED_PENDING", "Total number of pages pending retirement.", "counter")
NVLINK_CRC_FLIT_ERRORS: Final = Counter(
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "Total number of NVLink flow-control CRC errors.", "counter"
)
NVLINK_CRC_DATA_ERRORS: Final = Counter(
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "Total number of NVLink data CRC errors.", "counter"
)
NVLINK_REPLAY_ERRORS: Final = Counter(
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "Total number of NVLink retries.", "counter"
)
NVLINK_RECOVERY_ERRORS: Final = Counter(
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "Total number of NVLink recovery errors.", "counter"
)
UNCORRECTABLE_REMAPPED_ROWS: Final = Counter(
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors", "counter"
)
CORRECTABLE_REMAPPED_ROWS: Final = Counter(
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors", "counter"
)
ROW_REMAP_FAILURE: Final = Counter("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed")
CLOCKS_EVENT_REASONS: Final = Counter(
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*)."
)

COUNTERS: Final = (
    SM_CLOCK,
    GPU_TEMP,
    POWER_USAGE,
    GPU_UTIL,
    MEM_COPY_UTIL,
    XID_ERRORS,
    FB_FREE,
    FB_USED,
    ECC_SBE_VOL_TOTAL,
    ECC_DBE_VOL_TOTAL,
    ECC_SBE_AGG_TOTAL,
    ECC_DBE_AGG_TOTAL,
    RETIRED_SBE,
    RETIRED_DBE,
    RETIRED_PENDING,
    NVLINK_CRC_FLIT_ERRORS,
    NVLINK_CRC_DATA_ERRORS,
    NVLINK_REPLAY_ERRORS,
    NVLINK_RECOVERY_ERRORS,
    UNCORRECTABLE_REMAPPED_ROWS,
    CORRECTABLE_REMAPPED_ROWS,
    ROW_REMAP_FAILURE,
    CLOCKS_EVENT_REASONS,
    GR_ENGINE_ACTIVE,
    PIPE_TENSOR_ACTIVE,
    DRAM_ACTIVE,
)
"""Emitted counters, in ``dcp-metrics-included.csv`` order (NVIDIA/dcgm-exporter etc/dcp-metrics-included.csv
@ 99a774bb93604fbc5cc509e68c8bbb205dbfb16c). Enabled there: SM clock, temperature, power, utilisation, XID,
framebuffer, remapped rows and the DCP ratios. Listed there commented out, the fields a counters file enables
to watch for faults (and fakegpu always emits): the ECC totals, retired pages and NVLink error counters.
``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` (DCGM field 112, go-dcgm's name since DCGM 3.3 for the former
``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``) is in neither file; dcgm-exporter watches it for its own
``DCGM_EXP_CLOCK_EVENTS_COUNT`` and a counters file may name it. Which series a GPU has depends on the board,
as NVML answers "not supported" and dcgm-exporter skips blank values: retired pages before Ampere, remapped
rows from Ampere on, NVLink counters on boards with NVLink, the SM clock where fakegpu knows the board's."""
BY_NAME: Final = {c.name: c for c in COUNTERS}

# Fixed labels of every GPU-entity series, in template order.
GPU: Final = "gpu"
UUID: Final = "UUID"
PCI_BUS_ID: Final = "pci_bus_id"
DEVICE: Final = "device"
MODEL_NAME: Final = "modelName"
GPU_I_PROFILE: Final = "GPU_I_PROFILE"
GPU_I_ID: Final = "GPU_I_ID"
HOSTNAME: Final = "Hostname"
DRIVER_VERSION: Final = "DCGM_FI_DRIVER_VERSION"
"""A label counter of dcp-metrics-included.csv: the driver version on every series."""

# Attributes (sorted when rendered).
CONTAINER: Final = "container"
NAMESPACE: Final = "namespace"
POD: Final = "pod"
VGPU: Final = "vgpu"
"""The replica index (``::N``) of a shared GPU, with ``--kubernetes-virtual-gpus``."""
ERR_CODE: Final = "err_code"
ERR_MSG: Final = "err_msg"
DRA_CLAIM_NAME: Final = "dra_claim_name"
DRA_CLAIM_NAMESPACE: Final = "dra_claim_namespace"
DRA_DEVICE_NAME: Final = "dra_device_name"
DRA_DRIVER_NAME: Final = "dra_driver_name"
DRA_POOL_NAME: Final = "dra_pool_name"


@dataclass(frozen=True)
class EntityLabels:
    """The identity part of a series: a GPU, or a MIG instance with its parent's identity."""

    gpu: int
    uuid: str
    pci_bus_id: str
    device: str
    model_name: str
    hostname: str
    driver_version: str
    mig_profile: str | None = None
    gpu_instance_id: int | None = None


def series_labels(entity: EntityLabels, attributes: Mapping[str, str] | None = None) -> dict[str, str]:
    """Labels of one series in dcgm-exporter's order (the dict keeps it; Prometheus text keeps the dict's)."""
    labels = {
        GPU: str(entity.gpu),
        UUID: entity.uuid,
        PCI_BUS_ID: entity.pci_bus_id,
        DEVICE: entity.device,
        MODEL_NAME: entity.model_name,
    }
    if entity.mig_profile:
        labels[GPU_I_PROFILE] = entity.mig_profile
        labels[GPU_I_ID] = str(entity.gpu_instance_id)
    if entity.hostname:
        labels[HOSTNAME] = entity.hostname
    labels[DRIVER_VERSION] = entity.driver_version
    for key in sorted(attributes or {}):
        labels[key] = (attributes or {})[key]
    return labels


def nvml_pci_bus_id(sysfs_bus_id: str) -> str:
    """NVML's bus ID form, which DCGM reports: 8-digit domain and upper-case hex (``00000000:18:00.0``),
    from the sysfs form the inventory uses (``0000:18:00.0``)."""
    domain, _, rest = sysfs_bus_id.partition(":")
    try:
        return f"{int(domain, 16):08X}:{rest.upper()}"
    except ValueError:
        return sysfs_bus_id.upper()


XID_TEXTS: Final[Mapping[int, str]] = {
    0: "No Error",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    38: "Driver firmware error",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda",
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    68: "NVDEC0 Exception",
    69: "Graphics Engine class error",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    121: "C2C Link Error",
    140: "Unrecovered ECC Error",
}
"""``err_msg`` of DCGM_FI_DEV_XID_ERRORS for the XIDs fakegpu's fault scenarios use (texts of NVIDIA's
XID catalog, as dcgm-exporter prints them); any other code reads "Unknown Error"."""
UNKNOWN_XID_TEXT: Final = "Unknown Error"


def xid_attributes(xid: int) -> dict[str, str]:
    return {ERR_CODE: str(xid), ERR_MSG: XID_TEXTS.get(xid, UNKNOWN_XID_TEXT)}


def format_value(counter: Counter | None, value: float) -> str:
    """A sample value as dcgm-exporter prints it: ``%d`` for integer fields, ``%f`` for doubles."""
    if counter is not None and not counter.double and float(value).is_integer():
        return str(int(value))
    return f"{value:f}"
