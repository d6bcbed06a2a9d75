"""Unix socket files: length limits, stale-socket removal and identity (to notice deletion)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

MAX_SOCKET_PATH = 107
"""sun_path holds 108 bytes including the terminating NUL."""


class SocketPathError(OSError):
    """A socket path the kernel cannot bind."""


def check_socket_path(path: Path) -> None:
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise SocketPathError(
            f"socket path {path} is {len(os.fsencode(path))} bytes; Unix sockets allow at most {MAX_SOCKET_PATH}"
            " (use a shorter --kubelet-dir)"
        )


def someone_listens(path: Path) -> bool:
    """True when a process accepts connections on the socket (it is in use, not stale)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def remove_stale(path: Path, *, keep_live: bool = False) -> bool:
    """Remove a leftover socket (a dead plugin's socket stays on disk); never removes other files.

    With ``keep_live``, a socket another process still serves is refused instead of taken over."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if keep_live and stat.S_ISSOCK(st.st_mode) and someone_listens(path):
        raise SocketPathError(f"{path} is in use by another running process; choose another path")
    if stat.S_ISSOCK(st.st_mode):
        path.unlink(missing_ok=True)
        return True
    raise SocketPathError(f"{path} exists and is not a socket; refusing to replace it")


def identity(path: Path) -> tuple[int, int] | None:
    """(inode, ctime) of a socket file, or None: a different value means it was re-created."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISSOCK(st.st_mode):
        return None
    return (st.st_ino, st.st_ctime_ns)
