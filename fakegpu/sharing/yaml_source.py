"""Reading YAML/JSON input files into plain data, with errors that name the file and the line."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from fakegpu.sharing.errors import SpecError

MAX_INPUT_BYTES = 4 * 1024 * 1024


def read_text(path: str | Path, what: str) -> str:
    """Read a small text file; every OS or encoding failure becomes a SpecError naming the file."""
    p = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (a daemon's event loop would hang).
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(str(p))
            if not stat.S_ISREG(mode):
                raise SpecError(str(p), f"{what} is not a regular file (a FIFO, socket or device), expected a file")
            raw = fh.read(MAX_INPUT_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(str(p), f"{what} not found") from None
    except IsADirectoryError:
        raise SpecError(str(p), f"{what} is a directory, expected a file") from None
    except PermissionError:
        raise SpecError(str(p), f"{what} is not readable (permission denied)") from None
    except OSError as exc:
        if exc.errno == 40:  # ELOOP
            raise SpecError(str(p), f"{what} is a symlink loop") from None
        raise SpecError(str(p), f"cannot read {what}: {exc.strerror or exc}") from None
    if len(raw) > MAX_INPUT_BYTES:
        raise SpecError(str(p), f"{what} is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(str(p), f"{what} is not UTF-8 text (bad byte at offset {exc.start})") from None


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML (JSON is YAML too); syntax errors name the line and column."""
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
        problem = exc.problem or "invalid YAML"
        raise SpecError(source, f"invalid YAML: {problem}", where) from None
    except yaml.YAMLError as exc:
        # PyYAML's texts span lines ("unacceptable character ... in <unicode string>, position 5"): one line.
        raise SpecError(source, f"invalid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise SpecError(source, "invalid YAML: nesting too deep") from None


def load_mapping(path: str | Path, what: str) -> dict[str, Any]:
    """Read a file that must hold one YAML/JSON mapping at its top level."""
    source = str(path)
    data = parse_yaml(read_text(path, what), source)
    if data is None:
        raise SpecError(source, f"{what} is empty")
    if not isinstance(data, dict):
        raise SpecError(source, f"expected a mapping at the top level of the {what}, found {type(data).__name__}")
    return data
