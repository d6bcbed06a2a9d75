"""nvidia-smi's command line over a device description: parse, select, render, exit status.

The supported subset: the table (no arguments), ``-L``/``--list-gpus``, ``-q``/``--query``,
``--query-gpu=FIELDS --format=csv[,noheader][,nounits]``, ``-i``/``--id``, ``--version`` and ``-h``. The
three report modes exclude one another (``-L -q`` is an invalid combination, as in nvidia-smi). The
shell script in ``shell_script`` implements exactly these rules (same order of checks, same texts, same
exit statuses), and the tests hold the two to byte equality. Statuses follow nvidia-smi's manual page:
0 success, 2 invalid argument or flag (unknown options and missing values too), 6 no devices found.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from fakegpu.telemetry.nvidia_smi import list as gpu_list
from fakegpu.telemetry.nvidia_smi import query, query_full, table
from fakegpu.telemetry.nvidia_smi.devices import SmiNode, filter_ids, select

Mode = Literal["table", "list", "full", "query", "help", "version"]
REPORT_MODES: Final = ("list", "full", "query")
"""At most one of these per command line."""

OK: Final = 0
INVALID_ARGUMENT: Final = 2
NOT_FOUND: Final = 6
UNRECOGNIZED: Final = INVALID_ARGUMENT
"""An unknown option or a missing value: the manual page's "a supplied argument or flag is invalid"."""

NO_DEVICES: Final = "No devices were found\n"
INVALID_COMBINATION: Final = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n"
FORMAT_OPTIONS: Final = ("csv", "noheader", "nounits")

_DAYS: Final = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True)
class Request:
    mode: Mode = "table"
    fields: str = ""
    format: str | None = None
    ids: str | None = None
    conflict: bool = False
    """Two different report modes were asked for (``-L -q``, ``-L --query-gpu=...``)."""


@dataclass(frozen=True)
class Result:
    stdout: str
    status: int


_HELP_HINT: Final = "Please run 'nvidia-smi -h' for help.\n\n"


def unrecognized(option: str) -> Result:
    return Result(f"ERROR: Option {option} is not recognized. {_HELP_HINT}", UNRECOGNIZED)


def missing_value(option: str) -> Result:
    return Result(f"ERROR: Option {option} is missing its value. {_HELP_HINT}", UNRECOGNIZED)


def parse_args(argv: Sequence[str]) -> Request | Result:
    """Left to right, the last mode wins, but two different report modes are a conflict (reported after
    ``-h`` and ``--version``); an unknown option or a missing value stops at once."""
    mode: Mode = "table"
    fields = ""
    fmt: str | None = None
    ids: str | None = None
    reports: set[str] = set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--query-gpu", "--format", "-i", "--id"):
            if i + 1 >= len(argv):
                return missing_value(arg)
            i += 1
            value = argv[i]
            if arg == "--query-gpu":
                mode, fields = "query", value
            elif arg == "--format":
                fmt = value
            else:
                ids = value
        elif arg in ("-L", "--list-gpus"):
            mode = "list"
        elif arg in ("-q", "--query"):
            mode = "full"
        elif arg.startswith("--query-gpu="):
            mode, fields = "query", arg.removeprefix("--query-gpu=")
        elif arg.startswith("--format="):
            fmt = arg.removeprefix("--format=")
        elif arg.startswith("--id="):
            ids = arg.removeprefix("--id=")
        elif arg in ("-h", "--help"):
            mode = "help"
        elif arg == "--version":
            mode = "version"
        else:
            return unrecognized(arg)
        if mode in REPORT_MODES:
            reports.add(mode)
        i += 1
    return Request(mode, fields, fmt, ids, conflict=len(reports) > 1)


def help_text(node: SmiNode) -> str:
    return (
        f"NVIDIA System Management Interface -- fakegpu emulation, driver {node.driver_version}\n"
        "\n"
        "Emulated GPUs: the devices named by FAKEGPU_VISIBLE_DEVICES, else by NVIDIA_VISIBLE_DEVICES.\n"
        "\n"
        "Supported options:\n"
        "    -L,  --list-gpus      List the GPUs and their MIG devices.\n"
        "    -q,  --query          Show GPU details (a subset of the real report).\n"
        "    -i,  --id=ID          Only these GPUs: index, UUID or PCI bus ID, comma-separated.\n"
        "    --query-gpu=FIELDS    One CSV line per GPU; needs --format=csv[,noheader][,nounits].\n"
        "    --version             Show the versions.\n"
        "    -h,  --help           Show this help.\n"
    )


def version_text(node: SmiNode) -> str:
    drv = node.driver_version
    return (
        f"NVIDIA-SMI version  : {drv}\n"
        f"NVML version        : {'.'.join(drv.split('.')[:2])}\n"
        f"DRIVER version      : {drv}\n"
        f"CUDA Version        : {node.cuda_version}\n"
    )


def timestamp_now(now: float | None = None) -> str:
    """nvidia-smi's date, ``Wed Feb  4 10:17:25 2026`` (C locale, day padded with a space)."""
    t = time.localtime(now)
    clock = f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
    return f"{_DAYS[t.tm_wday]} {_MONTHS[t.tm_mon - 1]} {t.tm_mday:2d} {clock} {t.tm_year}"


def _query_fields(request: Request) -> list[str] | Result:
    """The canonical field names, or nvidia-smi's error (an empty format has no ``csv``)."""
    tokens = request.format.split(",") if request.format else []
    if request.format is None or "csv" not in tokens or any(t not in FORMAT_OPTIONS for t in tokens):
        return Result(INVALID_COMBINATION, INVALID_ARGUMENT)
    if not request.fields:
        return Result(INVALID_COMBINATION, INVALID_ARGUMENT)
    names = []
    for name in request.fields.split(","):
        found = query.canonical(name)
        if found is None:
            return Result(query.invalid_field(name), INVALID_ARGUMENT)
        names.append(found)
    return names


def run(argv: Sequence[str], node: SmiNode, visible: str | None, timestamp: str, query_timestamp: str = "") -> Result:
    """What ``nvidia-smi ARGV`` prints given this device list (``devices.visible_devices``; None: all);
    ``timestamp`` is the table's and ``-q``'s date, ``query_timestamp`` the ``timestamp`` query field."""
    request = parse_args(argv)
    if isinstance(request, Result):
        return request
    if request.mode == "help":
        return Result(help_text(node), OK)
    if request.mode == "version":
        return Result(version_text(node), OK)
    if request.conflict:
        return Result(INVALID_COMBINATION, INVALID_ARGUMENT)
    if request.mode != "query" and request.format is not None:
        return Result(INVALID_COMBINATION, INVALID_ARGUMENT)
    fields: list[str] = []
    if request.mode == "query":
        checked = _query_fields(request)
        if isinstance(checked, Result):
            return checked
        fields = checked
    view = select(node, visible)
    if not view.gpus:
        return Result(NO_DEVICES, NOT_FOUND)
    gpus = view.gpus if request.ids is None else filter_ids(view, request.ids)
    if not gpus:
        return Result(NO_DEVICES, NOT_FOUND)
    attached = len(view.gpus)
    if request.mode == "list":
        return Result(gpu_list.assemble(gpus), OK)
    if request.mode == "full":
        return Result(query_full.assemble(node, gpus, attached, timestamp), OK)
    if request.mode == "query":
        tokens = (request.format or "").split(",")
        values = {v.gpu.index: query.gpu_values(node, v.gpu, partial=not v.whole) for v in gpus}
        text = query.assemble(
            gpus,
            attached,
            fields,
            values,
            noheader="noheader" in tokens,
            nounits="nounits" in tokens,
            timestamp=query_timestamp,
        )
        return Result(text, OK)
    return Result(table.assemble(node, gpus, timestamp), OK)
