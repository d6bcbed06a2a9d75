"""nvidia-smi's command line over a device description: parse, select, render, exit status.

The supported subset: the table (no arguments), ``-L``/``--list-gpus``, ``-q``/``--query``,
``--query-gpu=FIELDS --format=csv[,noheader][,nounits]``, ``-i``/``--id``, ``--version`` and ``-h``; and
two subcommands, which must come first as in nvidia-smi: ``topo -m``/``--matrix`` and ``mig`` with
``-lgip``/``-lgi``/``-lci`` (long forms too) and ``-i``. The report modes exclude one another (``-L -q``,
``mig -lgi -lci`` are invalid combinations, as in nvidia-smi); a subcommand takes only its own options
(``mig`` has no ``--format``: ``nvidia-smi mig -h`` lists none). The shell script in ``shell_script``
implements exactly these rules (same order of checks, same texts, same exit statuses), and the tests hold
the two to byte equality. Statuses follow nvidia-smi's manual page: 0 success, 2 invalid argument or flag
(unknown options and missing values too), 6 "a query to find an object was unsuccessful": no devices, no
MIG-enabled device, no instance (a script in the wild tests ``mig --list-gpu-instance-profiles`` for 6 on
a GPU without MIG; no reading shows the status of the other two), 15 a GPU off the bus or lost among the
selected ones (one error line per such GPU, nothing else).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from fakegpu.telemetry.fault_readings import GPU_LOST_STATUS, gpu_lost_line
from fakegpu.telemetry.nvidia_smi import list as gpu_list
from fakegpu.telemetry.nvidia_smi import mig_tables, query, query_full, table, topology
from fakegpu.telemetry.nvidia_smi.devices import SmiNode, VisibleGpu, filter_ids, select

Mode = Literal["table", "list", "full", "query", "help", "version", "topo", "mig", "matrix", "lgip", "lgi", "lci"]
REPORT_MODES: Final = ("list", "full", "query", "lgip", "lgi", "lci")
"""At most one of these per command line."""
SUBCOMMANDS: Final = ("topo", "mig")
"""Their own name is their mode until an option chooses a report: alone, they are an invalid combination."""
_SUB_OPTIONS: Final[dict[str, dict[str, Mode]]] = {
    "topo": {"-m": "matrix", "--matrix": "matrix"},
    "mig": {
        "-lgip": "lgip",
        "--list-gpu-instance-profiles": "lgip",
        "-lgi": "lgi",
        "--list-gpu-instances": "lgi",
        "-lci": "lci",
        "--list-compute-instances": "lci",
    },
}

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


def parse_args(argv: Sequence[str]) -> Request | Result:  # noqa: PLR0912 - one flat case per option, as the shell script has
    """Left to right, the last mode wins, but two different report modes are a conflict (reported after
    ``-h`` and ``--version``); an unknown option or a missing value stops at once. After a subcommand
    only ``-i``/``--id``, ``-h`` and its own options are known."""
    mode: Mode = "table"
    fields = ""
    fmt: str | None = None
    ids: str | None = None
    reports: set[str] = set()
    sub = argv[0] if argv and argv[0] in SUBCOMMANDS else ""
    own = _SUB_OPTIONS.get(sub, {})
    if sub:
        mode = "topo" if sub == "topo" else "mig"
    i = 1 if sub else 0
    while i < len(argv):
        arg = argv[i]
        if arg in own:
            mode = own[arg]
        elif arg in (("-i", "--id") if sub else ("--query-gpu", "--format", "-i", "--id")):
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
        elif arg.startswith("--id="):
            ids = arg.removeprefix("--id=")
        elif arg in ("-h", "--help"):
            mode = "help"
        elif sub:
            return unrecognized(arg)
        elif arg in ("-L", "--list-gpus"):
            mode = "list"
        elif arg in ("-q", "--query"):
            mode = "full"
        elif arg.startswith("--query-gpu="):
            mode, fields = "query", arg.removeprefix("--query-gpu=")
        elif arg.startswith("--format="):
            fmt = arg.removeprefix("--format=")
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
        "    topo -m               The GPU-to-GPU topology matrix (NVLinks, NUMA affinity).\n"
        "    mig -lgip|-lgi|-lci   MIG GPU-instance profiles, GPU instances, compute instances;\n"
        "                          -i selects GPUs.\n"
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


def _mig(mode: str, node: SmiNode, gpus: Sequence[VisibleGpu]) -> Result:
    if mode == "lgip":
        capable = [v for v in gpus if v.gpu.mig_profiles]
        if not capable:
            return Result(mig_tables.NO_MIG_DEVICES, NOT_FOUND)
        return Result(mig_tables.assemble_profiles(node, capable), OK)
    enabled = [v for v in gpus if mig_tables.in_mig_mode(v)]
    if not enabled:
        return Result(mig_tables.NO_MIG_DEVICES, NOT_FOUND)
    text = mig_tables.assemble_instances(node, enabled, compute=mode == "lci")
    if not text:
        return Result(mig_tables.NO_COMPUTE_INSTANCES if mode == "lci" else mig_tables.NO_GPU_INSTANCES, NOT_FOUND)
    return Result(text, OK)


def run(argv: Sequence[str], node: SmiNode, visible: str | None, timestamp: str, query_timestamp: str = "") -> Result:
    """What ``nvidia-smi ARGV`` prints given this device list (``devices.visible_devices``; None: all);
    ``timestamp`` is the table's and ``-q``'s date, ``query_timestamp`` the ``timestamp`` query field."""
    request = parse_args(argv)
    if isinstance(request, Result):
        return request
    answered = _answer_without_devices(request, node)
    if answered is not None:
        return answered
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
    lost = [v for v in gpus if v.gpu.health.unreachable]
    if lost:
        # NVML has no handle for a GPU off the bus: nvidia-smi prints why instead of any report.
        return Result("".join(gpu_lost_line(v.gpu.bus_id) + "\n" for v in lost), GPU_LOST_STATUS)
    return _report(request, node, gpus, len(view.gpus), fields, timestamp, query_timestamp)


def _answer_without_devices(request: Request, node: SmiNode) -> Result | None:
    """Help, version and the invalid combinations, answered before any device is looked at (in this order,
    as the shell script checks them); None for a request that needs the devices."""
    if request.mode == "help":
        return Result(help_text(node), OK)
    if request.mode == "version":
        return Result(version_text(node), OK)
    if request.conflict:
        return Result(INVALID_COMBINATION, INVALID_ARGUMENT)
    if request.mode != "query" and request.format is not None:
        return Result(INVALID_COMBINATION, INVALID_ARGUMENT)
    if request.mode in SUBCOMMANDS:
        return Result(INVALID_COMBINATION, INVALID_ARGUMENT)
    if request.mode == "matrix" and request.ids is not None:
        return Result(topology.NO_ID_OPTION, INVALID_ARGUMENT)
    return None


def _report(
    request: Request,
    node: SmiNode,
    gpus: Sequence[VisibleGpu],
    attached: int,
    fields: list[str],
    timestamp: str,
    query_timestamp: str,
) -> Result:
    """The report the request's mode asks for, over the selected GPUs (``attached``: all the visible ones)."""
    if request.mode == "matrix":
        return Result(topology.assemble(node, gpus), OK)
    if request.mode in ("lgip", "lgi", "lci"):
        return _mig(request.mode, node, gpus)
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
