"""The ``fakegpu`` command: one subcommand per process shape of the design.

Start-up stays cheap (``fakegpu --help`` must not load grpc, lightkube or prometheus_client): this module
imports only the standard library and light fakegpu modules. Each command is a row of ``COMMANDS`` naming,
as ``module:function``, what adds its options and what runs it; a module is imported only when its command
is on the command line. ``full_parser()`` builds every command at once, for tests and the manifests' check.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fakegpu.cli.terse_parser import TerseParser
from fakegpu.runtime.unix_socket import SocketPathError
from fakegpu.sharing.bug_modes import BugModeError
from fakegpu.sharing.errors import SpecError
from fakegpu.telemetry.log_format import LOG_FORMATS, configure_logging

EXIT_USAGE = 2
LOG_LEVELS = ("debug", "info", "warning", "error")
DEFAULT_LOG_LEVEL = "info"
QUIET_COMMANDS = frozenset(("devices", "labels", "catalog", "demo", "slices", "deviceclasses", "ctl", "nvidia-smi"))
"""Commands whose output is the point: library INFO lines stay out of it unless --log-level is given."""
USAGE_ERRORS = (SpecError, SocketPathError, BugModeError, ValueError)
"""Exceptions that mean bad input: one ``fakegpu: error:`` line and exit 2."""
Subparsers = Any
"""argparse's subparsers action (``argparse._SubParsersAction``)."""


def _load(reference: str) -> Any:
    """``module:attribute``, imported now."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


class _VersionAction(argparse.Action):
    """``--version``: the line is built only when asked for (it reads the package metadata and the defaults)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> None:
        sys.stdout.write(_load("fakegpu.cli.version:version_line")() + "\n")
        parser.exit()


def add_global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``--log-level`` and ``--log-format``. After a command they are ``argparse.SUPPRESS``ed unless given, so
    ``fakegpu --log-level debug demo`` and ``fakegpu demo --log-level debug`` mean the same."""
    group = parser.add_argument_group("global options (before or after the command)")
    default = None if top else argparse.SUPPRESS
    group.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default=default,
        help=f"log lines at this level and above on stderr (default {DEFAULT_LOG_LEVEL}; warning for the "
        "commands that print a result)",
    )
    group.add_argument(
        "--log-format", choices=LOG_FORMATS, default=default, help="text (default), or JSON with one object per line"
    )


@dataclass(frozen=True)
class Command:
    """A subcommand: its line in ``fakegpu --help``, what builds its parser and what runs it.

    ``options`` adds the options to a parser made here; ``parser`` instead makes the parser itself on the
    subparsers action (modules that give theirs a description or an epilog) and must use the same ``help``,
    which a test checks. ``run`` takes the parsed arguments and returns the exit status."""

    help: str
    run: str
    options: str | Callable[[argparse.ArgumentParser], None] | None = None
    parser: str | None = None


_DAEMON_OPTIONS = "fakegpu.cli.daemon_options"
_OFFLINE_OPTIONS = "fakegpu.cli.offline_options"
_DAEMONS = "fakegpu.cli.daemon_runs"
_OFFLINE = "fakegpu.cli.offline_runs"
COMMANDS: dict[str, Command] = {
    "demo": Command(
        "run the kubelet emulator and the device plugins together and show the node",
        f"{_DAEMONS}:run_demo_command",
        f"{_DAEMON_OPTIONS}:add_demo",
    ),
    "plugin": Command(
        "run the device plugin daemon next to a kubelet", f"{_DAEMONS}:run_plugin", f"{_DAEMON_OPTIONS}:add_plugin"
    ),
    "kubelet": Command(
        "run the kubelet emulator on its own (with an admin socket for 'fakegpu ctl')",
        "fakegpu.cli.kubelet_command:run_kubelet_command",
        parser="fakegpu.cli.kubelet_command:add_kubelet_parser",
    ),
    "dra": Command(
        "run the DRA driver: publish ResourceSlices and serve the kubelet DRA plugin",
        f"{_DAEMONS}:run_dra",
        f"{_DAEMON_OPTIONS}:add_dra",
    ),
    "nvidia-smi": Command(
        "print what the fake nvidia-smi shows for a node (table, -L, --query-gpu, -q, topo -m, mig -lgi...)",
        "fakegpu.cli.nvidia_smi_command:run_nvidia_smi_command",
        parser="fakegpu.cli.nvidia_smi_command:add_nvidia_smi_parser",
    ),
    "virtual-nodes": Command(
        "create KWOK nodes with fake GPUs (capacity, labels, ResourceSlices) for scheduler rehearsals",
        "fakegpu.cli.virtual_nodes_command:run_virtual_nodes_command",
        parser="fakegpu.cli.virtual_nodes_command:add_virtual_nodes_parser",
    ),
    "slices": Command(
        "print the ResourceSlices the DRA driver would publish",
        f"{_OFFLINE}:run_slices",
        f"{_OFFLINE_OPTIONS}:add_slices",
    ),
    "deviceclasses": Command(
        "print the DeviceClasses for the DRA driver",
        f"{_OFFLINE}:run_deviceclasses",
        f"{_OFFLINE_OPTIONS}:add_deviceclasses",
    ),
    "devices": Command(
        "print the resources and devices a node would advertise",
        f"{_OFFLINE}:run_devices",
        f"{_OFFLINE_OPTIONS}:add_devices",
    ),
    "labels": Command(
        "print the GPU Feature Discovery labels a node would carry",
        f"{_OFFLINE}:run_labels",
        f"{_OFFLINE_OPTIONS}:add_labels",
    ),
    "ctl": Command(
        "talk to a running daemon's admin socket: health, faults, status, the kubelet emulator's pods",
        "fakegpu.cli.ctl_command:run_ctl",
        parser="fakegpu.cli.ctl_command:add_ctl_parser",
    ),
    "catalog": Command(
        "list the GPU models fakegpu emulates", f"{_OFFLINE}:run_catalog", f"{_OFFLINE_OPTIONS}:add_catalog"
    ),
    "scenario": Command(
        "run scripted scenarios against the kubelet emulator and the plugins",
        "fakegpu.cli.scenario_command:run_scenario_command",
        parser="fakegpu.cli.scenario_command:add_scenario_parser",
    ),
    "compute-domain-controller": Command(
        "run NVIDIA's compute-domain controller (ComputeDomain templates, status, cleanup)",
        "fakegpu.cli.compute_domain_controller_command:run_compute_domain_controller_command",
        parser="fakegpu.cli.compute_domain_controller_command:add_compute_domain_controller_parser",
    ),
    "cleanup": Command(
        "remove the labels, annotation, node-status resources and host files fakegpu left on a node",
        "fakegpu.cli.cleanup_command:run_cleanup_command",
        parser="fakegpu.cli.cleanup_command:add_cleanup_parser",
    ),
}


def command_in(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (None for ``fakegpu --help``, or a word that is no command)."""
    skip = False
    for token in argv:
        if skip:
            skip = False
        elif token in ("--log-level", "--log-format"):
            skip = True
        elif token == "--" or not token.startswith("-"):
            return token if token in COMMANDS else None
    return None


def _add_command(sub: Subparsers, name: str, *, built: bool) -> None:
    command = COMMANDS[name]
    if not built:
        sub.add_parser(name, help=command.help)
    elif command.parser is not None:
        _load(command.parser)(sub)
    else:
        options = _load(command.options) if isinstance(command.options, str) else command.options
        assert options is not None, name
        options(sub.add_parser(name, help=command.help))


def _add_globals_everywhere(parser: argparse.ArgumentParser) -> None:
    """The global options on every subcommand, however deep (``scenario run``, ``ctl status``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                add_global_options(child, top=False)
                _add_globals_everywhere(child)


def build_parser(built: Callable[[str], bool]) -> TerseParser:
    """The ``fakegpu`` parser; the commands ``built`` selects get their options, the others only their name."""
    parser = TerseParser(prog="fakegpu", description="Fake NVIDIA GPUs for Kubernetes.")
    parser.add_argument("-V", "--version", action=_VersionAction, help="print the version and the emulated driver")
    add_global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        _add_command(sub, name, built=built(name))
    _add_globals_everywhere(parser)
    return parser


def full_parser() -> TerseParser:
    """Every command with all its options (imports what every command's options need)."""
    return build_parser(lambda _name: True)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed, building only the command it names; an unknown option is one line from that command."""
    chosen = command_in(argv)
    parser = build_parser(lambda name: name == chosen)
    args, extras = parser.parse_known_args(list(argv))
    if extras:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        command = sub.choices.get(args.command, parser)
        assert isinstance(command, TerseParser)
        command.unrecognized(extras)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    configure_logging(args.log_level or DEFAULT_LOG_LEVEL, args.log_format or "text")
    if args.command in QUIET_COMMANDS and args.log_level is None:
        logging.getLogger().setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        status: int = _load(COMMANDS[args.command].run)(args)
    except USAGE_ERRORS as exc:
        print(f"fakegpu: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (NotADirectoryError, PermissionError, FileExistsError) as exc:
        # A kubelet dir that is a file, or one we may not write: say which path and why.
        where = exc.filename or ""
        print(f"fakegpu: error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``fakegpu devices | head``): stop quietly, as other CLI tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
