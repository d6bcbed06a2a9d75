"""``fakegpu scenario``: run scripted scenario files (``run``) or list a catalog of them (``list``).

``run`` takes files, directories (their ``*.yaml`` files, sorted) and names of shipped scenarios; several
files end with a summary line. On a terminal a progress line (steps done, rate) sits under the step lines
while the run goes on (``fakegpu.cli.progress``); elsewhere a plain progress line every 10 s of a long run.
Exit status: 0 all passed, 1 an expectation failed, 2 a bad file, 3 no daemon on ``--socket``.

A file with a top-level ``cluster:`` key is a cluster scenario (``fakegpu.testing.scenario.cluster_model``):
it runs against an API server, the one ``--kubeconfig`` names (or the usual kubeconfig lookup), through
``fakegpu.cli.cluster_scenario``; the other files start their own node as before.
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

from fakegpu.cli.cluster_scenario import ClusterOptions, check_cluster_scenario, run_cluster_scenario
from fakegpu.cli.progress import progress
from fakegpu.control.client import EXIT_NO_DAEMON, NoDaemonError
from fakegpu.kube.client import KUBECONFIG_HELP, client_factory
from fakegpu.sharing.errors import SpecError
from fakegpu.testing.scenario import EXIT_BAD_FILE, EXIT_FAIL, EXIT_PASS, Scenario, load_scenario, run_files
from fakegpu.testing.scenario.cluster_model import (
    ClusterScenario,
    is_cluster_data,
    parse_cluster_scenario,
    read_scenario_data,
)
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
    run.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="cluster scenarios (a top-level cluster: key) run against this cluster; " + KUBECONFIG_HELP,
    )
    run.add_argument(
        "--admin-socket",
        metavar="PATH",
        help="cluster scenarios: the admin socket of the fakegpu daemon node_fault steps hit (overrides the "
        "file's cluster.admin_socket)",
    )
    run.add_argument(
        "--time-scale",
        type=_time_scale,
        default=1.0,
        metavar="F",
        help="cluster scenarios: run fleet fault schedules (a fleet_fault's over) F times faster; wait and within "
        "are not scaled (the cluster reacts at its own pace); default 1",
    )
    run.add_argument(
        "--cleanup",
        action="store_true",
        help="cluster scenarios: when a scenario ends, delete the objects its apply steps created and its virtual "
        "nodes (as virtual-nodes --delete); without it they stay, and a second run meets them",
    )
    listing = actions.add_parser("list", help="list scenario files with the issue each reproduces")
    listing.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="files or directories (default: the shipped catalog)",
    )


def _time_scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, found {text!r}") from None
    if not 0 < value <= 10_000:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 10000, found {text}")
    return value


def load_any(path: Path) -> Scenario | ClusterScenario:
    """A node scenario or, with a top-level ``cluster:`` key, a cluster scenario."""
    data = read_scenario_data(path)
    if is_cluster_data(data):
        return parse_cluster_scenario(data, str(path))
    return load_scenario(path)


def _steps(scenario: Scenario | ClusterScenario) -> str:
    """The step column of ``list``: a node expected to fail at start has no steps, its start is the check; a
    cluster scenario says so (it needs ``--kubeconfig``'s cluster, not a node of its own)."""
    if isinstance(scenario, Scenario) and scenario.expect_start_error is not None:
        return "start error"
    n = len(scenario.steps)
    kind = " (cluster)" if isinstance(scenario, ClusterScenario) else ""
    return f"{n} step" + ("" if n == 1 else "s") + kind


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
            s = load_any(path)
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
    paths = [catalog_file(f) for f in args.files]
    entries = scenario_files(paths)
    cluster = [p for p in entries if isinstance(p, Path) and _is_cluster_file(p)]
    async with progress(sys.stderr, "scenario steps", count.read):
        if not cluster:
            return await run_files(paths, out, err, socket=args.socket, count=count)
        if args.kubeconfig is None:
            # A directory holds both kinds: without --kubeconfig its node scenarios run, and the cluster ones,
            # which need a cluster, are named and skipped; a cluster file named on its own runs against the
            # kubeconfig found the usual way.
            skipped = [p for p in cluster if p not in paths]
            for path in skipped:
                out.write(f"skipped {path}: a cluster scenario (a top-level cluster: key); give --kubeconfig\n")
            entries = [e for e in entries if e not in skipped]
        return await _run_mixed(entries, args, out, err, count)


def _is_cluster_file(path: Path) -> bool:
    try:
        return is_cluster_data(read_scenario_data(path))
    except SpecError:
        return False


async def _run_mixed(
    entries: list[Path | SpecError], args: argparse.Namespace, out: TextIO, err: TextIO, count: RunCount
) -> int:
    """Files some of which are cluster scenarios: each run by its kind, the worst status returned, a summary
    line after several."""
    options = ClusterOptions(args.kubeconfig, args.admin_socket, args.time_scale, args.cleanup)
    statuses: list[int] = []
    for entry in entries:
        if isinstance(entry, Path) and _is_cluster_file(entry):
            statuses.append(await _run_cluster_file(entry, options, out, err, count))
        elif isinstance(entry, Path):
            statuses.append(await run_files([entry], out, err, socket=args.socket, count=count))
        else:
            err.write(f"fakegpu: error: {entry}\n")
            statuses.append(EXIT_BAD_FILE)
    if len(statuses) > 1:
        out.write(
            f"{len(statuses)} scenario files: {statuses.count(EXIT_PASS)} passed, {statuses.count(EXIT_FAIL)} "
            f"failed, {statuses.count(EXIT_BAD_FILE)} bad\n"
        )
    return max(statuses, default=EXIT_PASS)


async def _run_cluster_file(path: Path, options: ClusterOptions, out: TextIO, err: TextIO, count: RunCount) -> int:
    try:
        scenario = parse_cluster_scenario(read_scenario_data(path), str(path))
        check_cluster_scenario(scenario)  # a bad file is refused before the kubeconfig is read
        count.steps_total += len(scenario.steps)
        return await run_cluster_scenario(scenario, client_factory(options.kubeconfig), out, options, count)
    except SpecError as exc:
        out.flush()
        err.write(f"fakegpu: error: {exc}\n")
        return EXIT_BAD_FILE
    except NoDaemonError as exc:
        out.flush()
        err.write(f"fakegpu: error: {exc}\n")
        return EXIT_NO_DAEMON


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
