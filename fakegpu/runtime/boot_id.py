"""The node's boot ID: the kernel's ``/proc/sys/kernel/random/boot_id``, new at every boot.

NVIDIA's kubelet plugins store it in their checkpoint and discard the prepared claims when it changed
(kubernetes-sigs/dra-driver-nvidia-gpu ``pkg/bootid``, since v0.4.0): whatever prepare did to a device
(CDI specs on a tmpfs, MPS daemons, compute modes, MIG devices) did not survive the reboot. The path is a
setting so a test, or a fake node sharing its host's kernel, can give the node a boot of its own and
"reboot" it by writing a new ID.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

BOOT_ID_PATH: Final = Path("/proc/sys/kernel/random/boot_id")


class BootIdUnreadable(OSError):
    """The boot ID file cannot be read; the message is NVIDIA's (``read node boot id: ...``)."""


def read_boot_id(path: Path = BOOT_ID_PATH) -> str:
    """The file's content without surrounding white space, as NVIDIA's ``GetCurrentBootID`` trims it."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        # Go's os.ReadFile error reads "open <path>: no such file or directory".
        raise BootIdUnreadable(
            f"read node boot id: failed to read boot ID from {path}: open {path}: {reason[:1].lower()}{reason[1:]}"
        ) from None
