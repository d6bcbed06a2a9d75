"""nvidia-smi's command line: options, report modes that exclude one another, exit statuses and texts."""

from __future__ import annotations

import re

import pytest

from fakegpu.telemetry.nvidia_smi.command import Request, Result, parse_args, timestamp_now
from tests.unit.nvidia_smi.helpers import smi, smi_node

HINT = "Please run 'nvidia-smi -h' for help.\n\n"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], Request()),
        (["-L"], Request("list")),
        (["-L", "--list-gpus"], Request("list")),
        (["--list-gpus", "-q"], Request("full", conflict=True)),
        (["--query", "-L"], Request("list", conflict=True)),
        (["-L", "--query-gpu=name", "--format=csv"], Request("query", "name", "csv", conflict=True)),
        (["--query-gpu", "name", "--format", "csv"], Request("query", "name", "csv")),
        (["--query-gpu=a,b", "--format=csv,noheader"], Request("query", "a,b", "csv,noheader")),
        (["-i", "0", "-q"], Request("full", ids="0")),
        (["--id=GPU-x", "-L"], Request("list", ids="GPU-x")),
        (["--id", ""], Request(ids="")),
        (["-h"], Request("help")),
        (["--version", "-L"], Request("list")),
        (["topo", "-m"], Request("matrix")),
        (["topo", "--matrix", "-i", "1"], Request("matrix", ids="1")),
        (["topo"], Request("topo")),
        (["mig", "-i", "0", "-lgip"], Request("lgip", ids="0")),
        (["mig", "--list-gpu-instances", "--id=GPU-x"], Request("lgi", ids="GPU-x")),
        (["mig", "-lci", "-lgi"], Request("lgi", conflict=True)),
        (["mig", "-lci", "-lci", "-h"], Request("help")),
        (["mig"], Request("mig")),
    ],
)
def test_parse(argv, expected):
    assert parse_args(argv) == expected


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["-x"], f"ERROR: Option -x is not recognized. {HINT}"),
        (["-L", "-format=csv"], f"ERROR: Option -format=csv is not recognized. {HINT}"),
        (["-lms100"], f"ERROR: Option -lms100 is not recognized. {HINT}"),
        (["-i"], f"ERROR: Option -i is missing its value. {HINT}"),
        (["-L", "--query-gpu"], f"ERROR: Option --query-gpu is missing its value. {HINT}"),
        (["-L", "-q", "-x"], f"ERROR: Option -x is not recognized. {HINT}"),
        (["mig", "-lgi", "--format=csv"], f"ERROR: Option --format=csv is not recognized. {HINT}"),
        (["mig", "-L"], f"ERROR: Option -L is not recognized. {HINT}"),
        (["topo", "-m", "mig"], f"ERROR: Option mig is not recognized. {HINT}"),
        (["-L", "topo"], f"ERROR: Option topo is not recognized. {HINT}"),
        (["mig", "-lgi", "--id"], f"ERROR: Option --id is missing its value. {HINT}"),
    ],
)
def test_option_errors_stop_at_once_with_status_2(argv, text):
    """The manual page: "2 - A supplied argument or flag is invalid" (never 255, an internal error)."""
    assert parse_args(argv) == Result(text, 2)
    assert smi(smi_node(), *argv) == Result(text, 2)


INVALID = Result("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n", 2)


@pytest.mark.parametrize(
    "argv",
    [
        ["-L", "--query-gpu=name", "--format=csv"],
        ["--query-gpu=name", "--format=csv", "-L"],
        ["-q", "-L"],
        ["-L", "-q"],
        ["--query", "--query-gpu", "index", "--format", "csv"],
        ["-L", "-L", "-q", "-q"],
    ],
)
def test_two_report_modes_are_an_invalid_combination(argv):
    assert smi(smi_node(), *argv) == INVALID
    assert smi(smi_node(), *argv, visible="none") == INVALID  # before any device lookup


def test_the_same_mode_twice_and_help_are_no_conflict():
    node = smi_node("2xt4")
    assert smi(node, "-L", "--list-gpus") == smi(node, "-L")
    assert smi(node, "-L", "-q", "-h").stdout.startswith("NVIDIA System Management Interface")


@pytest.mark.parametrize("visible", ["none", "void", "", "GPU-00000000-0000-0000-0000-000000000000"])
@pytest.mark.parametrize("argv", [[], ["-L"], ["-q"], ["--query-gpu=name", "--format=csv"]])
def test_no_devices_were_found_with_status_6(argv, visible):
    assert smi(smi_node(), *argv, visible=visible) == Result("No devices were found\n", 6)


def test_an_id_of_no_visible_gpu_is_no_devices():
    assert smi(smi_node(), "-L", "-i", "1", visible="3") == Result("No devices were found\n", 6)


def test_help_and_version_need_no_devices():
    node = smi_node()
    version = smi(node, "--version", visible="none")
    assert version == Result(
        "NVIDIA-SMI version  : 570.172.08\n"
        "NVML version        : 570.172\n"
        "DRIVER version      : 570.172.08\n"
        "CUDA Version        : 12.8\n",
        0,
    )
    help_result = smi(node, "--help", visible="none")
    assert help_result.status == 0
    assert "--query-gpu=FIELDS" in help_result.stdout and "NVIDIA_VISIBLE_DEVICES" in help_result.stdout


def test_timestamp_is_c_locale_with_a_space_padded_day():
    assert re.fullmatch(r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ 1-3]\d \d\d:\d\d:\d\d \d{4}", timestamp_now())
    # 2026-02-04 is a Wednesday: a single-digit day is padded with a space, like nvidia-smi's.
    assert timestamp_now(1770200245.0)[:10] in ("Wed Feb  4", "Tue Feb  3", "Thu Feb  5")
