"""The compute-domain plugin's CDI specs: the base spec (device ``all``) and the per-claim specs.

NVIDIA's ``cmd/compute-domain-kubelet-plugin/cdi.go`` and ``computedomain.go`` (kubernetes-sigs/dra-driver-nvidia-gpu
at commit 0807eed): vendor
``k8s.compute-domain.nvidia.com``; a base spec ``k8s.compute-domain.nvidia.com-device_base`` written at start
with device ``all`` (``NVIDIA_VISIBLE_DEVICES=void``); one claim spec
``k8s.compute-domain.nvidia.com-claim_<claimUID>`` with a device ``<claimUID>-channel-0`` (the IMEX channel
device nodes) or ``<claimUID>-daemon`` (the daemon's environment and its ``/imexd`` directory). A channel on a
node without a clique has no edits and gets no spec.

The channels' character devices use a fixed major: a fake node has no ``/proc/devices`` entry for
``nvidia-caps-imex-channels`` (real majors vary, 234 and 507 are seen in NVIDIA's docs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from fakegpu.dra.claim_cdi_specs import VOID_VISIBLE_DEVICES, cdi_vendor
from fakegpu.dra.compute_domain.devices import COMPUTE_DOMAIN_DRIVER
from fakegpu.runtime.cdi_spec_model import new_spec, spec_file_name, write_spec_file
from fakegpu.sharing.nvlink_fabric import imex_channel_path

VENDOR: Final = cdi_vendor(COMPUTE_DOMAIN_DRIVER)
BASE_CLASS: Final = "device"
BASE_DEVICE: Final = "all"
BASE_SPEC_ID: Final = "base"
BASE_SPEC_FILE: Final = spec_file_name(VENDOR, BASE_CLASS, BASE_SPEC_ID, ".yaml")
"""``k8s.compute-domain.nvidia.com-device_base.yaml``, written at every start and never removed (as NVIDIA's)."""
IMEX_CHANNEL_MAJOR: Final = 234
CHANNEL_FILE_MODE: Final = 0o666
DAEMON_CONFIG_DIR: Final = "/imexd"
"""Where the daemon container finds its config (NVIDIA moved it there in 25.8, PR #674)."""


def channel_edits(channels: int) -> dict[str, Any]:
    """Device nodes ``/dev/nvidia-caps-imex-channels/channel0..channels-1``."""
    return {
        "deviceNodes": [
            {
                "path": imex_channel_path(n),
                "type": "c",
                "major": IMEX_CHANNEL_MAJOR,
                "minor": n,
                "fileMode": CHANNEL_FILE_MODE,
            }
            for n in range(channels)
        ]
    }


def daemon_env(clique: str, domain: dict[str, Any]) -> tuple[str, ...]:
    """What the daemon reads (``cmd/compute-domain-daemon/main.go``)."""
    meta = domain.get("metadata") or {}
    return (
        f"CLIQUE_ID={clique}",
        f"COMPUTE_DOMAIN_UUID={meta.get('uid', '')}",
        f"COMPUTE_DOMAIN_NAME={meta.get('name', '')}",
        f"COMPUTE_DOMAIN_NAMESPACE={meta.get('namespace', '')}",
    )


def daemon_edits(env: tuple[str, ...], domain_dir: Path) -> dict[str, Any]:
    return {
        "env": list(env),
        "mounts": [
            {
                "containerPath": DAEMON_CONFIG_DIR,
                "hostPath": str(domain_dir),
                "options": ["rw", "nosuid", "nodev", "bind"],
            }
        ],
    }


def claim_spec(devices: list[dict[str, Any]]) -> dict[str, Any]:
    """A claim's spec of ``{"name": ..., "containerEdits": ...}`` devices."""
    return new_spec(VENDOR, "claim", devices)


def write_base_spec(cdi_root: Path) -> Path:
    """``k8s.compute-domain.nvidia.com-device_base.yaml``: device ``all`` the daemon's claim references."""
    spec = new_spec(VENDOR, BASE_CLASS, [{"name": BASE_DEVICE, "containerEdits": {"env": [VOID_VISIBLE_DEVICES]}}])
    return write_spec_file(cdi_root, BASE_SPEC_FILE, spec)
