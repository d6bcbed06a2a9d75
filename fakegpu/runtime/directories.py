"""Creating the directories the daemons own, never group- or world-writable whatever the umask.

A world-writable ``device-plugins/`` or ``plugins/<driver>/`` would let anyone replace a socket or the
claim checkpoint, a world-writable CDI root would let anyone plant a spec the runtime applies.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

DIR_MODE = 0o755
"""Readable by the container runtime and the kubelet (CDI specs, sockets), writable by the owner only."""


def ensure_dir(path: Path, mode: int = DIR_MODE) -> Path:
    """``mkdir -p`` where every directory created gets at most ``mode`` (the umask can only narrow it)."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        # mkdir applies the umask to ``mode``; unlike mkdir(parents=True), also to the parents it creates.
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=mode)
    return path
