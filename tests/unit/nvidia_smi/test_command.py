"""nvidia-smi's command line: options, last mode wins, exit statuses and texts."""

from __future__ import annotations

import re

import pytest

from sharing.nvidia_smi.command import Request, Result, parse_args, timestamp_now
from tests.unit.nvidia_smi.helpers import smi, smi_node

HINT = "Please run 'nvidia-smi -h' for help.\n\n"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], Request()),
        (["-L"], Request("list")),
        (["--list-gpus", "-q"], Request("full")),
        (["--query", "-L"], Request("list")),
        (["--query-gpu", "name", "--format", "csv"], Request("query", "name", "csv")),
        (["--query-gpu=a,b", "--format=csv,noheader"], Request("query", "a,b", "csv,noheader")),
        (["-i", "0", "-q"], Request("full", ids="0")),
        (["--id=GPU-x", "-L"], Request("list", ids="GPU-x")),
        (["--id", ""], Request(ids="")),
        (["-h"], Request("help")),
        (["--version", "-L"], Request("list")),
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
    ],
)
def test_option_errors_stop_at_once_with_status_255(argv, text):
    assert parse_args(argv) == Result(text, 255)
    assert smi(smi_node(), *argv) == Result(text, 255)


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
