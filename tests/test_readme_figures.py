"""Every figure and table in README.md and CONTRIBUTING.md that the code decides is generated from the code or
checked against it here, so a change to the code that makes the text untrue fails a test.

What cannot be checked cheaply stays out of both: the number of tests and their wall time (pytest's last
line in CI says them), and measured figures, which `docs/measurements.md` keeps with the commit they were
recorded at.
"""

from __future__ import annotations

import argparse
import inspect
import re
from dataclasses import fields
from pathlib import Path

import pytest

from fakegpu.cli.catalog_command import NOTE_COLUMNS, OFF_TABLE_NOTE, render_boards_table, unverified_columns
from fakegpu.cli.main import COMMANDS, EXIT_USAGE, USAGE_ERRORS, full_parser, main
from fakegpu.cli.progress import progress
from fakegpu.dra.compute_domain.controller import STATUS_SYNC_INTERVAL
from fakegpu.dra.daemon import DraSettings
from fakegpu.dra.resource_slices import MAX_DEVICES_PER_SLICE, MAX_DEVICES_WITH_COUNTERS_OR_TAINTS
from fakegpu.kube.discovery import NEWEST_LAYOUT, OLDEST_MINOR
from fakegpu.kube.page_sizes import NODE_PAGE
from fakegpu.kubelet.device_manager import ENDPOINT_STOP_GRACE_PERIOD
from fakegpu.sharing.catalog import CATALOG
from fakegpu.sharing.driver_defaults import DEFAULT_CUDA_DRIVER_VERSION, DEFAULT_DRIVER_VERSION
from fakegpu.sharing.health import DEFAULT_IGNORED_XIDS
from fakegpu.sharing.mps_daemon import MPS_MAX_CLIENTS, MPS_MAX_CLIENTS_LEGACY
from fakegpu.sharing.node_spec import DEFAULT_GPUS
from fakegpu.sharing.nvidia_config import MAX_TIME_SLICING_REPLICAS
from fakegpu.sharing.nvlink_fabric import IMEX_CHANNEL_COUNT
from fakegpu.sharing.rack_layout import NVL72_NODES_PER_RACK
from fakegpu.virtual_nodes.pools import DEFAULT_MODE, GPU_MODES
from tests.reliability import kubelet_soak
from tests.reliability.process_probe import RSS_LIMIT
from tests.reliability.profile import BIG_COUNTS, LONG, LONG_SIZES, SHORT

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CORPUS = ROOT / "tests" / "reliability" / "corpus"
SPOKEN_SECONDS = {1.0: "second"}
"""An interval as the README says it in words."""


def flat(text: str) -> str:
    """Text with every run of white space as one space, so a figure may sit across a line break."""
    return re.sub(r"\s+", " ", text)


def section(title: str, text: str = README) -> str:
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def default_of(command: str, dest: str) -> object:
    """An option's default as the command's parser has it."""
    parser = full_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    (action,) = [a for a in sub.choices[command]._actions if a.dest == dest]
    return action.default


def numbers(values: list[int], last: str = ", ") -> str:
    """``13, 31, 43`` (or ``13, 31 and 43`` with ``last=" and "``)."""
    shown = [str(v) for v in values]
    return ", ".join(shown[:-1]) + last + shown[-1]


def figures() -> list[str]:
    """Sentences of the README with the figure the code decides in them, built from the code."""
    xids = sorted(DEFAULT_IGNORED_XIDS)
    (resync,) = [f.default for f in fields(DraSettings) if f.name == "resync_interval"]
    corpus = sorted(p.name for p in CORPUS.iterdir() if p.name != "README.md")
    fuzz_ids, fuzz_bytes = BIG_COUNTS[-1], LONG_SIZES[-1]
    assert SHORT.kubelet_restarts == LONG.kubelet_restarts, "the README gives one count for both profiles"
    ticks = inspect.signature(progress).parameters
    default_gpus = CATALOG[DEFAULT_GPUS.split("x", 1)[1]]
    return [
        f"on a default node ({DEFAULT_GPUS.split('x', 1)[0]}x {default_gpus.product_name.removeprefix('NVIDIA ')})",
        f"Default: `{DEFAULT_GPUS}`.",
        f'driverVersion: "{DEFAULT_DRIVER_VERSION}" # default',
        f'cudaDriverVersion: "{DEFAULT_CUDA_DRIVER_VERSION}" # default',
        f"imexChannels: {IMEX_CHANNEL_COUNT} # /dev/nvidia-caps-imex-channels/channel0..{IMEX_CHANNEL_COUNT - 1} "
        "(the driver's count, default)",
        f"rate every {SPOKEN_SECONDS.get(ticks['interval'].default, 'N/A')} (elsewhere a plain line every "
        f"{ticks['plain_every'].default:g} s)",
        f"({numbers(xids, ' and ')} are ignored by default)",
        f"ignored XIDs {numbers(xids)})",
        f"unhealthy unless ignored ({numbers(xids)}, DP_*)",
        f"Bad input exits with status {EXIT_USAGE} ",
        f"at most {MAX_DEVICES_PER_SLICE} devices per slice ({MAX_DEVICES_WITH_COUNTERS_OR_TAINTS} with counters "
        "or taints)",
        f"(watch plus a {resync:g} s resync)",
        f"at most {MAX_TIME_SLICING_REPLICAS} per GPU",
        f"above {MPS_MAX_CLIENTS} ({MPS_MAX_CLIENTS_LEGACY} below compute capability 7.5)",
        f"drops it after the grace period ({ENDPOINT_STOP_GRACE_PERIOD / 60:g} min,",
        f"`fakegpu slices [inventory options] [--mig-mode M] [--server-version 1.{OLDEST_MINOR}..1.{NEWEST_LAYOUT}]",
        f"[--nodes-per-rack {NVL72_NODES_PER_RACK}]",
        f"in pages ({NODE_PAGE} per request)",
        f"(`--concurrency`, {default_of('virtual-nodes', 'concurrency')})",
        f"status every {STATUS_SYNC_INTERVAL:g} s",
        f"Kubelet restarts: {SHORT.kubelet_restarts} in a row",
        f"re-registers within {kubelet_soak.REREGISTER_LIMIT:g} s",
        f"(RSS within {RSS_LIMIT // 2**20} MiB)",
        f"Load: {SHORT.concurrent_allocates} concurrent Allocates, {SHORT.concurrent_streams} ListAndWatch streams",
        f"{SHORT.concurrent_prepares} concurrent NodePrepareResources",
        f"{fuzz_ids:,} IDs, {fuzz_bytes // 1_000_000} MB strings".replace(",", " ", 1),
        f"a corpus of {len(corpus)} malformed configs",
    ]


@pytest.mark.parametrize("figure", figures())
def test_the_readme_states_the_figure_the_code_has(figure):
    assert figure in flat(README), f"README.md no longer says {figure!r}: change the text or the code"


def test_the_boards_table_is_what_catalog_markdown_prints():
    assert render_boards_table() in README, "paste the output of `fakegpu catalog --markdown` into README's Boards"


def test_catalog_markdown_prints_one_row_per_board(capsys):
    assert main(["catalog", "--markdown"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(CATALOG)


def test_the_commands_table_has_a_row_per_command():
    rows = re.findall(r"^\| `fakegpu ([a-z-]+)", section("Commands"), flags=re.M)
    assert sorted(rows) == sorted([*COMMANDS, "--version"])


def test_the_gpu_mode_table_has_a_row_per_mode():
    rows = re.findall(r"^\| `([a-z-]+)`( \(default\))? \|", section("Virtual nodes (KWOK)"), flags=re.M)
    assert [mode for mode, _ in rows if mode != "--gpu-mode"] == list(GPU_MODES)
    assert [mode for mode, default in rows if default] == [DEFAULT_MODE]


def test_the_design_names_every_command():
    design = (ROOT / "docs" / "design.md").read_text()
    unnamed = [name for name in COMMANDS if f"`fakegpu {name}`" not in design]
    assert unnamed == [], f"docs/design.md's process shapes do not name: {unnamed}"


def test_no_hand_kept_test_count_or_wall_time():
    """The suite's size and time change with every commit; CI's output says them."""
    text = flat(README + (ROOT / "CONTRIBUTING.md").read_text())
    found = re.findall(r"\b\d[\d,]*-odd tests\b|\b\d[\d ,]* tests\b|about \d+ minutes", text)
    assert found == []


def test_the_design_names_every_error_that_exits_with_status_2():
    errors = section("Errors", (ROOT / "docs" / "design.md").read_text())
    unnamed = [error.__name__ for error in USAGE_ERRORS if f"`{error.__name__}`" not in errors]
    assert unnamed == [], f"docs/design.md's Errors does not say these exit {EXIT_USAGE}: {unnamed}"
    assert "`USAGE_ERRORS`" in errors and f"status {EXIT_USAGE}" in flat(errors)


def test_every_unverified_note_of_a_board_is_placed_in_the_boards_table_or_off_it():
    """The table marks a cell by the wording of the catalog's notes: a note that matches no column and is
    not about a number the table leaves out would be a doubt the table silently drops."""
    unplaced = [
        f"{m.key}: {note}"
        for m in CATALOG.values()
        for note in m.unverified
        if not OFF_TABLE_NOTE.search(note) and not any(p.search(note) for p in NOTE_COLUMNS.values())
    ]
    assert unplaced == [], "say in fakegpu/cli/catalog_command.py which column these notes are about"


def test_a_number_the_catalog_doubts_is_marked_in_the_boards_table():
    rows = {line.split("`")[1]: line for line in render_boards_table().splitlines() if line.startswith("| `")}
    doubted = {m.key: unverified_columns(m) for m in CATALOG.values()}
    sms = [k for k, columns in doubted.items() if "sms" in columns]
    assert sms, "no board doubts its SM count: the check proves nothing"
    assert all(f"| {CATALOG[k].multiprocessors} (unverified) |" in rows[k] for k in sms)
    assert all("(unverified)" not in rows[k] and "(partly" not in rows[k] for k, c in doubted.items() if not c)
