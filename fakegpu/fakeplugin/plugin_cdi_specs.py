"""The device plugin's own CDI specs: what resolves the device names Allocate returns with a CDI strategy.

With ``deviceListStrategy`` ``cdi-annotations`` or ``cdi-cri`` Allocate names devices
``k8s.device-plugin.nvidia.com/gpu=<id>`` (and ``imex-channel=<n>``, ``gdrcopy=all``, ``gds=all``,
``mofed=all``); a CDI-enabled runtime refuses the container unless a spec in ``/var/run/cdi`` defines
each. NVIDIA writes one spec per class, ``k8s.device-plugin.nvidia.com-<class>.json``, when its plugin
manager starts, that is at start and again on every restart of its plugins (SIGHUP, a new config:
``cmd/nvidia-device-plugin/plugin-manager.go`` ``CreateCDISpecFile``, ``internal/cdi/cdi.go``
``CreateSpecFile``). fakegpu writes them at start and after every inventory change (reload,
``fakegpu ctl reconfigure``), only files whose content changed. Like NVIDIA it never removes them, not
even on shutdown: a container that restarts while the plugin is down or being updated still resolves its
devices, and the next start rewrites them.

What the specs hold, per class (the model and checks are ``fakegpu.runtime.cdi_spec_model``):

* ``gpu``: a device per ID Allocate can name under the configured ``deviceIDStrategy`` (GPU or MIG UUID,
  replica suffix stripped, or the index form ``0`` / ``0:1``). NVIDIA's spec-wide edits set
  ``NVIDIA_VISIBLE_DEVICES=void`` (nvidia-container-toolkit ``pkg/nvcdi/wrapper.go`` ``GetCommonEdits``).
  A device's own edits, where NVIDIA's carry its device nodes (a fake node has none to give), bind-mount
  ``/dev/null`` at ``/var/run/nvidia-container-devices/<id>``, NVIDIA's volume-mounts marker of a
  container's device, and with ``--pass-device-specs`` add the device nodes Allocate's device specs would
  (the control nodes spec-wide). With ``--inject-nvidia-smi`` the spec-wide edits mount the fake nvidia-smi
  and devices.json; the container's devices reach it through Allocate's ``FAKEGPU_VISIBLE_DEVICES``.
* ``imex-channel``: a device per IMEX channel the node has (``fakeplugin.imex_channels``), with only the
  channel's device node, path and host path (NVIDIA v0.17 ``internal/cdi/imex.go``; the runtime takes
  type, major and minor from the host path). Written only when a channel was found, as NVIDIA.
* ``gdrcopy``, ``gds``, ``mofed``: the device ``all``, setting the variable Allocate sets for it.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from fakegpu.fakeplugin.allocate_response import (
    ALL_DEVICES,
    CDI_VENDOR,
    GPU_CLASS,
    IMEX_CHANNEL_CLASS,
    VOLUME_MOUNTS_HOST_PATH,
    VOLUME_MOUNTS_ROOT,
    additional_cdi_classes,
    control_device_paths,
    join_root,
    own_device_paths,
    runtime_id,
)
from fakegpu.fakeplugin.imex_channels import imex_channels
from fakegpu.runtime.cdi_spec_model import new_spec, render_spec, spec_file_name, write_spec_file
from fakegpu.runtime.change_stream import keep_current
from fakegpu.sharing.inventory import Inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.sharing.plugin_config import CDI_STRATEGIES, PluginConfig
from fakegpu.telemetry.nvidia_smi.injection import MOUNT_OPTIONS, NVIDIA_VISIBLE_DEVICES_ENV, cdi_container_edits

log = logging.getLogger(__name__)

VOID_VISIBLE_DEVICES: Final = f"{NVIDIA_VISIBLE_DEVICES_ENV}=void"
"""nvcdi's common edit: nvidia-container-runtime injects nothing besides the CDI devices."""
ADDITIONAL_ENV: Final = {"gdrcopy": "NVIDIA_GDRCOPY", "gds": "NVIDIA_GDS", "mofed": "NVIDIA_MOFED"}
"""The variable Allocate sets for each additional class (``internal/plugin/server.go``)."""


def cdi_enabled(config: PluginConfig) -> bool:
    """NVIDIA's ``AnyCDIEnabled``: without a CDI strategy its CDI handler is the null one and writes nothing."""
    return any(s in CDI_STRATEGIES for s in config.device_list_strategy)


def _marker_mount(container_path: str) -> dict[str, Any]:
    return {"hostPath": VOLUME_MOUNTS_HOST_PATH, "containerPath": container_path, "options": list(MOUNT_OPTIONS)}


def _device_node(config: PluginConfig, path: str) -> dict[str, Any]:
    """A node as Allocate's DeviceSpec gives it: container path, host path under the dev root, rw."""
    return {"path": path, "hostPath": join_root(config.nvidia_dev_root, path), "permissions": "rw"}


def gpu_spec(inventory: Inventory) -> dict[str, Any]:
    """The ``gpu`` class: every device Allocate can name under the deviceIDStrategy (no merged ``all``: the
    plugin's nvcdi library is built without ``WithMergedDeviceOptions``)."""
    config = inventory.config
    edits: dict[str, dict[str, Any]] = {}
    for resource in inventory.resources:
        for device in resource.devices:
            name = runtime_id(device, config.device_id_strategy)
            if name in edits:
                continue  # replicas of one GPU and a GPU advertised twice share their CDI device
            edit: dict[str, Any] = {"mounts": [_marker_mount(posixpath.join(VOLUME_MOUNTS_ROOT, name))]}
            if config.pass_device_specs:
                edit["deviceNodes"] = [_device_node(config, p) for p in own_device_paths(inventory, device)]
            edits[name] = edit
    devices = [{"name": name, "containerEdits": edit} for name, edit in edits.items()]
    common: dict[str, Any] = {"env": [VOID_VISIBLE_DEVICES]}
    if config.pass_device_specs:
        common["deviceNodes"] = [_device_node(config, p) for p in control_device_paths()]
    if config.nvidia_smi_dir:
        smi = cdi_container_edits(config.nvidia_smi_dir)
        common["env"] += smi["env"]
        common["mounts"] = smi["mounts"]
    return new_spec(CDI_VENDOR, GPU_CLASS, devices, common)


def imex_channel_spec(inventory: Inventory) -> dict[str, Any]:
    """The ``imex-channel`` class: a device per channel found, named by its ID, whose one edit is its device
    node ``{path, hostPath}`` (hostPath under the dev root, as NVIDIA's root transformer leaves it)."""
    config = inventory.config
    devices = [
        {
            "name": channel.id,
            "containerEdits": {
                "deviceNodes": [{"path": channel.path, "hostPath": join_root(config.nvidia_dev_root, channel.path)}]
            },
        }
        for channel in imex_channels(inventory)
    ]
    return new_spec(CDI_VENDOR, IMEX_CHANNEL_CLASS, devices)


def additional_spec(cdi_class: str) -> dict[str, Any]:
    """``gdrcopy``, ``gds`` or ``mofed``: the one device ``all``."""
    devices = [{"name": ALL_DEVICES, "containerEdits": {"env": [f"{ADDITIONAL_ENV[cdi_class]}=enabled"]}}]
    return new_spec(CDI_VENDOR, cdi_class, devices)


def plugin_specs(inventory: Inventory) -> dict[str, dict[str, Any]]:
    """File name -> spec, for every class Allocate may name; nothing without a CDI strategy. A class
    with no devices (no GPUs at all) gets no spec, as NVIDIA skips specs with empty device edits."""
    config = inventory.config
    if not cdi_enabled(config):
        return {}
    specs: dict[str, dict[str, Any]] = {}
    if any(r.devices for r in inventory.resources):
        specs[GPU_CLASS] = gpu_spec(inventory)
    if imex_channels(inventory):
        specs[IMEX_CHANNEL_CLASS] = imex_channel_spec(inventory)
    for cdi_class in additional_cdi_classes(config):
        specs[cdi_class] = additional_spec(cdi_class)
    return {spec_file_name(CDI_VENDOR, cdi_class, None, ".json"): spec for cdi_class, spec in specs.items()}


class PluginCdiSpecs:
    """The plugin's spec files in one CDI root, rewritten only when their content changes (health changes
    cost a render and no write)."""

    def __init__(self, cdi_root: Path) -> None:
        self.cdi_root = cdi_root
        self.writes = 0
        self._written: dict[str, bytes] = {}

    def update(self, inventory: Inventory) -> list[Path]:
        """Write the specs that changed or went missing; returns the files written. Errors propagate."""
        written: list[Path] = []
        for file_name, spec in plugin_specs(inventory).items():
            blob = render_spec(spec, ".json")
            if self._written.get(file_name) == blob and (self.cdi_root / file_name).exists():
                continue
            written.append(write_spec_file(self.cdi_root, file_name, spec))
            self._written[file_name] = blob
            self.writes += 1
            log.info("wrote CDI spec %s", written[-1])
        return written

    def follow(self, live: LiveInventory) -> Callable[[], None]:
        """Write now (NVIDIA's plugin does not start without its spec) and after every change of ``live``
        (``keep_current``); returns the unsubscribe function."""
        return keep_current(live, lambda: self.update(live.inventory), f"the CDI specs in {self.cdi_root}")
