"""Unix socket files: length limits, stale-socket removal, live peers and identity (to notice deletion).

Every server fakegpu binds (device plugin, registration, DRA plugin, admin sockets) takes its path over
only from a dead process: a socket someone still accepts connections on belongs to a live peer (a second
plugin on the same kubelet directory), and taking it over would make the two fight for it.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from pathlib import Path

MAX_SOCKET_PATH = 107
"""sun_path holds 108 bytes including the terminating NUL."""


class SocketPathError(OSError):
    """A socket path the kernel cannot bind."""


class SocketInUse(SocketPathError):
    """Another live process serves the socket path; ``pid`` is that process (0 when the system does not say)."""

    def __init__(self, path: Path, pid: int) -> None:
        self.path = path
        self.pid = pid
        super().__init__(f"{path} is in use by another running process{pid_text(pid)}; choose another path")


def pid_text(pid: int) -> str:
    """`` (pid 1234)``, or nothing when the pid is not known."""
    return f" (pid {pid})" if pid else ""


def check_socket_path(path: Path) -> None:
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise SocketPathError(
            f"socket path {path} is {len(os.fsencode(path))} bytes; Unix sockets allow at most {MAX_SOCKET_PATH}"
            " (use a shorter --kubelet-dir)"
        )


_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def listening_pid(path: Path) -> int | None:
    """The process accepting connections on the socket (it is in use, not stale), or None when nobody does.

    The pid is the listener's as the kernel recorded it (``SO_PEERCRED``), 0 where the system does not say
    or the listener is too busy to take the probe (its backlog full: alive, but not accepting yet); only a
    refused connection (or no file) means nobody listens.
    """
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(str(path))
        peercred = getattr(socket, "SO_PEERCRED", None)
        if peercred is None:
            return 0
        pid, _uid, _gid = _PEERCRED.unpack(probe.getsockopt(socket.SOL_SOCKET, peercred, _PEERCRED.size))
        return int(pid)
    except (BlockingIOError, TimeoutError):
        return 0
    except OSError:
        return None
    finally:
        probe.close()


def remove_stale(path: Path, *, keep_live: bool = False) -> bool:
    """Remove a leftover socket (a dead plugin's socket stays on disk); never removes other files.

    With ``keep_live``, a socket another process still serves is refused (``SocketInUse``) instead of taken
    over."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if keep_live and stat.S_ISSOCK(st.st_mode) and (pid := listening_pid(path)) is not None:
        raise SocketInUse(path, pid)
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
