"""Where the fake nvidia-smi lives on the host and where containers see it (``--inject-nvidia-smi``).

Both faces mount the same two files: the device plugin through Allocate's mounts, the DRA driver through
CDI ``containerEdits.mounts``. The script goes to ``/usr/bin/nvidia-smi`` (on every image's PATH; never
installed on the host under that name) and ``devices.json`` to ``/run/fakegpu/devices.json``, named by
``FAKEGPU_DEVICES_FILE`` for tools that prefer JSON.

Both faces also set ``FAKEGPU_VISIBLE_DEVICES`` to the runtime IDs of the container's devices, and the
script prefers it to ``NVIDIA_VISIBLE_DEVICES``: with the CDI device list strategies NVIDIA sets no
``NVIDIA_VISIBLE_DEVICES`` at all, and CUDA images carry ``NVIDIA_VISIBLE_DEVICES=all`` in their own
environment, which would show the container the whole node.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any, Final

SCRIPT_FILE: Final = "nvidia-smi"
DEVICES_FILE: Final = "devices.json"
CONTAINER_SCRIPT_PATH: Final = "/usr/bin/nvidia-smi"
CONTAINER_DEVICES_PATH: Final = "/run/fakegpu/devices.json"
DEVICES_FILE_ENV: Final = "FAKEGPU_DEVICES_FILE"
VISIBLE_DEVICES_ENV: Final = "FAKEGPU_VISIBLE_DEVICES"
"""The container's devices (GPU/MIG UUIDs or index forms), set with the mounts; wins over the next one."""
NVIDIA_VISIBLE_DEVICES_ENV: Final = "NVIDIA_VISIBLE_DEVICES"
MOUNT_OPTIONS: Final = ("ro", "nosuid", "nodev", "bind")
"""The options nvidia-ctk gives the driver files it mounts; ``bind`` makes a CDI runtime bind-mount without a
``type`` field (which would need cdiVersion 0.4.0)."""
DEFAULT_PLUGIN_DIR: Final = "/var/run/fakegpu/nvidia-smi/device-plugin"
DEFAULT_DRA_DIR: Final = "/var/run/fakegpu/nvidia-smi/dra"
"""One directory per face under the hostPath both DaemonSets mount, so the two daemons on one node never
overwrite each other's files."""


@dataclass(frozen=True)
class InjectedMount:
    host_path: str
    container_path: str


def injected_mounts(directory: str) -> tuple[InjectedMount, InjectedMount]:
    """The script and devices.json, read-only, from ``directory`` on the host."""
    return (
        InjectedMount(posixpath.join(directory, SCRIPT_FILE), CONTAINER_SCRIPT_PATH),
        InjectedMount(posixpath.join(directory, DEVICES_FILE), CONTAINER_DEVICES_PATH),
    )


def cdi_container_edits(directory: str) -> dict[str, Any]:
    """CDI spec-wide edits that inject the fake nvidia-smi from ``directory``: both files mounted read-only,
    as NVIDIA's toolkit specs mount driver files, and ``FAKEGPU_DEVICES_FILE`` naming the JSON."""
    return {
        "env": [f"{DEVICES_FILE_ENV}={CONTAINER_DEVICES_PATH}"],
        "mounts": [
            {"hostPath": m.host_path, "containerPath": m.container_path, "options": list(MOUNT_OPTIONS)}
            for m in injected_mounts(directory)
        ],
    }
