"""Writing state files so that a crash or a concurrent reader never sees half of one.

The kubelet's device checkpoint, the DRA claim checkpoint and CDI specs are all written this way: a
temp file in the same directory (named ``.<name>.*.tmp`` so a CDI runtime, which loads only
``*.json``/``*.yaml``, never picks it up), fsync, rename over the target, then fsync the directory.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def temp_name_glob(name_glob: str) -> str:
    """The glob of the temp files ``atomic_write`` makes for files matching ``name_glob``: what a writer killed
    between the temp file and the rename leaves (``fakegpu cleanup`` looks for them)."""
    return f".{name_glob}.*{TEMP_SUFFIX}"


def atomic_write(path: Path, blob: bytes, mode: int) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as tmp:
            os.fchmod(tmp.fileno(), mode)
            tmp.write(blob)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    # Make the rename itself durable; best effort where directories cannot be opened.
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
