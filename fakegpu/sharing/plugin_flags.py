"""NVIDIA's plugin flags: config-file path, CLI flag, environment variables and default of each.

One table drives both the CLI (which builds its options from it) and precedence resolution
(flag > env > file > default), so a flag can never exist in one place and be missing in the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FlagKind = Literal["str", "bool", "list"]


@dataclass(frozen=True)
class FlagSpec:
    key: str
    """Attribute name on the resolved config."""
    file_path: tuple[str, ...]
    """Where the value lives in the config file, e.g. ``("flags", "plugin", "deviceListStrategy")``."""
    cli: str
    env: tuple[str, ...]
    default: str | bool | tuple[str, ...]
    kind: FlagKind
    help: str


PLUGIN_FLAGS: tuple[FlagSpec, ...] = (
    FlagSpec(
        "mig_strategy",
        ("flags", "migStrategy"),
        "--mig-strategy",
        ("MIG_STRATEGY",),
        "none",
        "str",
        "how MIG devices are exposed: none | single | mixed",
    ),
    FlagSpec(
        "fail_on_init_error",
        ("flags", "failOnInitError"),
        "--fail-on-init-error",
        ("FAIL_ON_INIT_ERROR",),
        True,
        "bool",
        "fail when initialisation fails instead of waiting indefinitely",
    ),
    FlagSpec(
        "mps_root",
        ("flags", "mpsRoot"),
        "--mps-root",
        ("MPS_ROOT",),
        "",
        "str",
        "host directory of the MPS control daemons' pipes and shm (required with MPS sharing)",
    ),
    FlagSpec(
        "nvidia_driver_root",
        ("flags", "nvidiaDriverRoot"),
        "--nvidia-driver-root",
        ("NVIDIA_DRIVER_ROOT",),
        "/",
        "str",
        "root of the (fake) driver installation",
    ),
    FlagSpec(
        "nvidia_dev_root",
        ("flags", "nvidiaDevRoot"),
        "--nvidia-dev-root",
        ("NVIDIA_DEV_ROOT",),
        "",
        "str",
        "host prefix of /dev/nvidia* in device specs (default: the driver root)",
    ),
    FlagSpec(
        "gds_enabled",
        ("flags", "gdsEnabled"),
        "--gds-enabled",
        ("GDS_ENABLED",),
        False,
        "bool",
        "start containers with NVIDIA_GDS=enabled",
    ),
    FlagSpec(
        "mofed_enabled",
        ("flags", "mofedEnabled"),
        "--mofed-enabled",
        ("MOFED_ENABLED",),
        False,
        "bool",
        "start containers with NVIDIA_MOFED=enabled",
    ),
    FlagSpec(
        "gdrcopy_enabled",
        ("flags", "gdrcopyEnabled"),
        "--gdrcopy-enabled",
        ("GDRCOPY_ENABLED",),
        False,
        "bool",
        "start containers with NVIDIA_GDRCOPY=enabled",
    ),
    FlagSpec(
        "device_discovery_strategy",
        ("flags", "deviceDiscoveryStrategy"),
        "--device-discovery-strategy",
        ("DEVICE_DISCOVERY_STRATEGY",),
        "auto",
        "str",
        "auto | nvml | tegra",
    ),
    FlagSpec(
        "pass_device_specs",
        ("flags", "plugin", "passDeviceSpecs"),
        "--pass-device-specs",
        ("PASS_DEVICE_SPECS",),
        False,
        "bool",
        "return DeviceSpecs for /dev/nvidia* in Allocate",
    ),
    FlagSpec(
        "device_list_strategy",
        ("flags", "plugin", "deviceListStrategy"),
        "--device-list-strategy",
        ("DEVICE_LIST_STRATEGY",),
        ("envvar",),
        "list",
        "envvar | volume-mounts | cdi-annotations | cdi-cri (comma-separated for several)",
    ),
    FlagSpec(
        "device_id_strategy",
        ("flags", "plugin", "deviceIDStrategy"),
        "--device-id-strategy",
        ("DEVICE_ID_STRATEGY",),
        "uuid",
        "str",
        "uuid | index",
    ),
    FlagSpec(
        "cdi_annotation_prefix",
        ("flags", "plugin", "cdiAnnotationPrefix"),
        "--cdi-annotation-prefix",
        ("CDI_ANNOTATION_PREFIX",),
        "cdi.k8s.io/",
        "str",
        "prefix of CDI annotation keys",
    ),
    FlagSpec(
        "nvidia_ctk_path",
        ("flags", "plugin", "nvidiaCTKPath"),
        "--nvidia-ctk-path",
        ("NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"),
        "/usr/bin/nvidia-ctk",
        "str",
        "nvidia-ctk path used in generated CDI specs",
    ),
    FlagSpec(
        "container_driver_root",
        ("flags", "plugin", "containerDriverRoot"),
        "--container-driver-root",
        ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"),
        "/driver-root",
        "str",
        "where the driver root is mounted in the plugin container",
    ),
    FlagSpec(
        "shared_devices_allocation_policy",
        ("flags", "plugin", "sharedDevicesAllocationPolicy"),
        "--shared-devices-allocation-policy",
        ("SHARED_DEVICES_ALLOCATION_POLICY",),
        "distributed",
        "str",
        "preferred allocation of replicas and MIG devices: distributed | packed",
    ),
)

FLAGS_BY_KEY = {f.key: f for f in PLUGIN_FLAGS}
