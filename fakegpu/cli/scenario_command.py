"""``fakegpu scenario``: run scripted scenario files (``run``) or list a catalog of them (``list``).

``run`` takes files, directories (their ``*.yaml`` files, sorted) and names of shipped scenarios; several
files end with a summary line. On a terminal a progress line (steps done, rate) sits under the step lines
while the run goes on (``fakegpu.cli.progress``); elsewhere a plain progress line every 10 s of a long run.
Exit status: 0 all passed, 1 an expectation failed, 2 a bad file, 3 no daemon on ``--socket``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import sys
from importlib.resources import files
from pathlib import Path
from typing import TextIO, cast

from fakegpu.cli.progress import progress
from fakegpu.sharing.errors import SpecError
from fakegpu.testing.scenario import EXIT_BAD_FILE, EXIT_PASS, Scenario, load_scenario, run_files
from fakegpu.testing.scenario.run_count import RunCount
from fakegpu.testing.scenario.runner import scenario_files

CATALOG = Path(str(files("fakegpu") / "scenarios"))
"""The scenarios shipped with fakegpu (``scenarios/`` of the repository, package data once installed), so
``scenario list`` and ``scenario run NAME`` work from any directory."""


def add_scenario_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``scenario run FILE...`` and ``scenario list [PATH...]`` to the top-level subparsers."""
    scenario = sub.add_parser("scenario", help="run scripted scenarios against the kubelet emulator and the plugins")
    actions = scenario.add_subparsers(dest="scenario_command", required=True, metavar="ACTION")
    run = actions.add_parser(
        "run",
        help="run scenario files; exit 0 all passed, 1 an expectation failed, 2 bad file, 3 no daemon on --socket",
    )
    run.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="scenario files, directories (every *.yaml in them, sorted), or names of the scenarios shipped "
        "with fakegpu (see: fakegpu scenario list)",
    )
    run.add_argument(
        "-v", "--verbose", action="store_true", help="show the kubelet emulator's and the plugins' logs on stderr"
    )
    run.add_argument(
        "--socket",
        type=Path,
        metavar="PATH",
        help="run the inject steps (xid, health, fault, end_streams, restart: plugins, plugins_looked, wait) "
        "against a live daemon's admin socket instead of an embedded node",
    )
    listing = actions.add_parser("list", help="list scenario files with the issue each reproduces")
    listing.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="files or directories (default: the shipped catalog)",
    )


def _steps(scenario: Scenario) -> str:
    """The step column of ``list``: a node expected to fail at start has no steps, its start is the check."""
    if scenario.expect_start_error is not None:
        return "start error"
    n = len(scenario.steps)
    return f"{n} step" + ("" if n == 1 else "s")


def catalog_file(path: Path) -> Path:
    """``path`` itself when it exists; else the shipped scenario of that name (with or without ``.yaml``)."""
    if path.parent != Path():
        return path
    try:
        if path.exists():
            return path
        shipped = CATALOG / (path.name if path.suffix == ".yaml" else f"{path.name}.yaml")
        return shipped if shipped.is_file() else path
    except OSError:  # a name too long to look up: the loader reports it against the name given
        return path


def _list(paths: list[Path]) -> int:
    status = EXIT_PASS
    rows: list[tuple[str, str, str, str]] = []
    for path in scenario_files(paths or [CATALOG]):
        try:
            if isinstance(path, SpecError):
                raise path
            s = load_scenario(path)
        except SpecError as exc:
            print(f"fakegpu: error: {exc}", file=sys.stderr)
            status = EXIT_BAD_FILE
            continue
        shown = path.stem if not paths else str(path)  # a shipped scenario is run by its name
        rows.append((shown, s.issue, _steps(s), s.name))
    widths = [max((len(r[i]) for r in rows), default=0) for i in range(3)]
    for file, issue, steps, name in rows:
        print(f"{file:<{widths[0]}}  {issue:<{widths[1]}}  {steps:>{widths[2]}}  {name}")
    return status


class _LineClearing(io.TextIOBase):
    """The run's output on a terminal that also shows the progress line: each new line first erases the
    progress line, which is drawn again under it on the next tick."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._at_line_start = True

    def write(self, text: str) -> int:
        if text and self._at_line_start:
            self._stream.write("\r\x1b[K")
        if text:
            self._at_line_start = text.endswith("\n")
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()


async def _run(args: argparse.Namespace) -> int:
    count = RunCount()
    # The progress line is drawn on stderr; lines written to the same terminal erase it first.
    shared = sys.stderr.isatty() and sys.stdout.isatty()
    out = cast(TextIO, _LineClearing(sys.stdout)) if shared else sys.stdout
    err = cast(TextIO, _LineClearing(sys.stderr)) if sys.stderr.isatty() else sys.stderr
    async with progress(sys.stderr, "scenario steps", count.read):
        return await run_files([catalog_file(f) for f in args.files], out, err, socket=args.socket, count=count)


def run_scenario_command(args: argparse.Namespace) -> int:
    if args.scenario_command == "list":
        return _list(args.paths)
    root = logging.getLogger()
    level = root.level
    if not args.verbose:
        # The scenarios provoke errors on purpose (rejected reloads, failed registrations): keep stderr for
        # the runner's own messages unless asked.
        root.setLevel(logging.CRITICAL)
    try:
        return asyncio.run(_run(args))
    finally:
        root.setLevel(level)
