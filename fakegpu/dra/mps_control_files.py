"""Where an MPS claim's control files live on the host and where its containers see them.

NVIDIA's kubelet plugin starts one MPS control daemon per claim and config group, with its pipe and shm
directories under ``<plugin dir>/mps/<claimUID>-<hash>/`` (the hash: the first 5 hex digits of SHA-256 over
the group's comma-joined GPU UUIDs), and gives every device of the group the CDI edits
``CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps`` plus bind mounts of those directories at ``/tmp/nvidia-mps``
and ``/dev/shm`` (kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/sharing.go``:
``GetMpsControlDaemonID``, ``NewMpsControlDaemon``, ``GetCDIContainerEdits``). fakegpu runs no daemon, but
creates the same (empty) directories so a container runtime can bind-mount them, and removes them when
the claim is unprepared, as NVIDIA's ``Stop`` does.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from fakegpu.runtime.directories import ensure_dir

PIPE_DIRECTORY_ENV: Final = "CUDA_MPS_PIPE_DIRECTORY"
CONTAINER_PIPE_DIR: Final = "/tmp/nvidia-mps"
CONTAINER_SHM_DIR: Final = "/dev/shm"
MOUNT_OPTIONS: Final = ("rw", "nosuid", "nodev", "bind")
MPS_DIR: Final = "mps"
"""Under the driver's plugin directory, as NVIDIA's ``MpsRoot = DriverPluginPath + "/mps"``."""


def control_daemon_id(claim_uid: str, uuids: Sequence[str]) -> str:
    """NVIDIA's ``GetMpsControlDaemonID``: ``<claimUID>-<sha256(uuids joined by ',')[:5]>``."""
    return f"{claim_uid}-{hashlib.sha256(','.join(uuids).encode()).hexdigest()[:5]}"


def pipe_directory_env() -> str:
    """The variable every device of an MPS group gets (``prepare_plan`` puts it in the device's env)."""
    return f"{PIPE_DIRECTORY_ENV}={CONTAINER_PIPE_DIR}"


def cdi_mounts(mps_root: Path, daemon_id: str) -> list[dict[str, Any]]:
    """The mounts every device of the group gets, in NVIDIA's order: shm, then the pipe directory."""
    daemon_dir = mps_root / daemon_id
    return [
        {"hostPath": str(daemon_dir / "shm"), "containerPath": CONTAINER_SHM_DIR, "options": list(MOUNT_OPTIONS)},
        {"hostPath": str(daemon_dir / "pipe"), "containerPath": CONTAINER_PIPE_DIR, "options": list(MOUNT_OPTIONS)},
    ]


def create_dirs(mps_root: Path, daemon_id: str) -> None:
    """The pipe, shm and log directories NVIDIA's ``Start`` creates (no tmpfs: nothing runs in them)."""
    for sub in ("shm", "pipe", "log"):
        ensure_dir(mps_root / daemon_id / sub)


def remove_dirs(mps_root: Path, daemon_id: str) -> None:
    """What NVIDIA's ``Stop`` removes; a missing directory is fine (unprepare is idempotent)."""
    shutil.rmtree(mps_root / daemon_id, ignore_errors=True)
