"""``fakegpu scenario``: run scripted scenario files (``run``) or list a catalog of them (``list``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from importlib.resources import files
from pathlib import Path

from fakegpu.sharing.errors import SpecError
from fakegpu.testing.scenario import EXIT_BAD_FILE, EXIT_PASS, load_scenario, run_files

CATALOG = Path(str(files("fakegpu") / "scenarios"))
"""The scenarios shipped with fakegpu (``scenarios/`` of the repository, package data once installed), so
``scenario list`` and ``scenario run NAME`` work from any directory."""


def add_scenario_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``scenario run FILE...`` and ``scenario list [PATH...]`` to the top-level subparsers."""
    scenario = sub.add_parser("scenario", help="run scripted scenarios against the kubelet emulator and the plugins")
    actions = scenario.add_subparsers(dest="scenario_command", required=True, metavar="ACTION")
    run = actions.add_parser("run", help="run scenario files; exit 0 all passed, 1 an expectation failed, 2 bad file")
    run.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="scenario files, or names of the scenarios shipped with fakegpu (see: fakegpu scenario list)",
    )
    run.add_argument(
        "-v", "--verbose", action="store_true", help="show the kubelet emulator's and the plugins' logs on stderr"
    )
    run.add_argument(
        "--socket",
        type=Path,
        metavar="PATH",
        help="run the inject steps (xid, health, fault, end_streams, restart: plugins, wait) against a live "
        "daemon's admin socket instead of an embedded node",
    )
    listing = actions.add_parser("list", help="list scenario files with the issue each reproduces")
    listing.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="files or directories (default: the shipped catalog)",
    )


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths or [CATALOG]:
        out.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    return out


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
    files = _files(paths)
    if not files:
        print(f"fakegpu: error: no scenario files in {', '.join(str(p) for p in paths or [CATALOG])}", file=sys.stderr)
        return EXIT_BAD_FILE
    rows: list[tuple[str, str, int, str]] = []
    for path in files:
        try:
            s = load_scenario(path)
        except SpecError as exc:
            print(f"fakegpu: error: {exc}", file=sys.stderr)
            status = EXIT_BAD_FILE
            continue
        shown = path.stem if not paths else str(path)  # a shipped scenario is run by its name
        rows.append((shown, s.issue, len(s.steps), s.name))
    file_width = max((len(r[0]) for r in rows), default=0)
    issue_width = max((len(r[1]) for r in rows), default=0)
    for file, issue, steps, name in rows:
        print(f"{file:<{file_width}}  {issue:<{issue_width}}  {steps:>3} steps  {name}")
    return status


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
        return asyncio.run(run_files([catalog_file(f) for f in args.files], sys.stdout, sys.stderr, socket=args.socket))
    finally:
        root.setLevel(level)
