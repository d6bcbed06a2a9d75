"""NVIDIA's plugin flags: config-file path, CLI flag, environment variables and default of each.

One table drives both the CLI (which builds its options from it) and precedence resolution
(flag > env > file > default), so a flag can never exist in one place and be missing in the other.
Names, aliases, environment variables, defaults and file paths follow NVIDIA v0.20.0
(``cmd/nvidia-device-plugin/main.go``, ``api/config/v1/flags.go``, ``api/config/v1/config.go``), so a
DaemonSet's args and env copied from NVIDIA's chart work unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FlagKind = Literal["str", "bool", "list", "ints", "duration"]


@dataclass(frozen=True)
class FlagSpec:
    key: str
    """Attribute name on the resolved config."""
    file_path: tuple[str, ...]
    """Where the value lives in the config file, e.g. ``("flags", "plugin", "deviceListStrategy")``;
    empty for NVIDIA's command-line-only flags."""
    cli: str
    """NVIDIA's primary flag name."""
    env: tuple[str, ...]
    default: str | bool | tuple[str, ...] | tuple[int, ...]
    kind: FlagKind
    help: str
    aliases: tuple[str, ...] = ()
    """NVIDIA's older names for the same flag (urfave/cli ``Aliases``)."""


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
        "--driver-root",
        ("NVIDIA_DRIVER_ROOT",),
        "/",
        "str",
        "root of the (fake) driver installation on the host",
        ("--nvidia-driver-root",),
    ),
    FlagSpec(
        "nvidia_dev_root",
        ("flags", "nvidiaDevRoot"),
        "--dev-root",
        ("NVIDIA_DEV_ROOT",),
        "",
        "str",
        "host prefix of /dev/nvidia* in device specs (default: the driver root)",
        ("--nvidia-dev-root",),
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
        "--nvidia-cdi-hook-path",
        ("NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"),
        "/usr/bin/nvidia-ctk",
        "str",
        "path of NVIDIA's CDI hook used in generated CDI specs",
        ("--nvidia-ctk-path",),
    ),
    FlagSpec(
        "container_driver_root",
        ("flags", "plugin", "containerDriverRoot"),
        "--driver-root-ctr-path",
        ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"),
        "/driver-root",
        "str",
        "where the driver root is mounted in the plugin container",
        ("--container-driver-root",),
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
    FlagSpec(
        "imex_channel_ids",
        ("imex", "channelIDs"),
        "--imex-channel-ids",
        ("IMEX_CHANNEL_IDS",),
        (),
        "ints",
        "IMEX channels to inject into every container given a device: none or 0 (NVIDIA v0.17's "
        "'A list of IMEX channels to inject.'); only a node with an NVLink fabric (node spec 'fabric:') has them",
    ),
    FlagSpec(
        "imex_required",
        ("imex", "required"),
        "--imex-required",
        ("IMEX_REQUIRED",),
        False,
        "bool",
        "the IMEX channels are required: refuse to start on a node without them instead of warning "
        "and injecting nothing (NVIDIA: 'The specified IMEX channels are required')",
    ),
    FlagSpec(
        "cdi_feature_flags",
        (),
        "--cdi-feature-flags",
        ("CDI_FEATURE_FLAGS",),
        (),
        "list",
        "feature flags for NVIDIA's CDI spec generation (accepted; the fake spec has no such features)",
    ),
    FlagSpec(
        "cdi_disable_hooks",
        (),
        "--cdi-disable-hooks",
        ("CDI_DISABLE_HOOKS",),
        (),
        "list",
        "CDI hooks to leave out of generated specs (accepted; the fake spec has no hooks)",
    ),
    # GPU Feature Discovery's (cmd/gpu-feature-discovery/main.go): they shape --label-node and `fakegpu labels`.
    FlagSpec(
        "use_node_feature_api",
        ("flags", "useNodeFeatureAPI"),
        "--use-node-feature-api",
        ("GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API"),
        False,
        "bool",
        "with --label-node, publish the GFD labels as an nfd.k8s-sigs.io NodeFeature for Node Feature Discovery "
        "instead of on the Node (NVIDIA's default is true since v0.19; fakegpu's false: it runs no NFD)",
    ),
    FlagSpec(
        "sleep_interval",
        ("flags", "gfd", "sleepInterval"),
        "--sleep-interval",
        ("GFD_SLEEP_INTERVAL",),
        "60s",
        "duration",
        "with --label-node, GFD's relabelling period (a Go duration), or infinite: write the labels once per "
        "served config and never refresh them",
    ),
)

FLAGS_BY_KEY = {f.key: f for f in PLUGIN_FLAGS}
