"""Each command takes only the options it reads, every option says what it does, and global flags go anywhere."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu.cli.main import COMMANDS, full_parser, main, parse

ROOT = Path(__file__).resolve().parents[3]


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def all_parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    out: list[tuple[str, argparse.ArgumentParser]] = []
    todo: list[tuple[str, argparse.ArgumentParser]] = [("fakegpu", full_parser())]
    while todo:
        path, parser = todo.pop()
        out.append((path, parser))
        todo += [(f"{path} {name}", child) for name, child in subparsers(parser).items()]
    return out


def test_every_option_has_help_text() -> None:
    missing = [
        f"{path} {action.option_strings[0]}"
        for path, parser in all_parsers()
        for action in parser._actions
        if action.option_strings and not action.help
    ]
    assert missing == []


def test_the_command_list_says_what_each_command_module_says() -> None:
    """``fakegpu --help`` lists ``COMMANDS[...].help``; a module that makes its own parser must agree."""
    top = full_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    listed = {choice.dest: choice.help for choice in sub._choices_actions}
    assert listed == {name: command.help for name, command in COMMANDS.items()}


@pytest.mark.parametrize("command", ["slices", "dra"])
@pytest.mark.parametrize(
    "flag", ["--config-file", "--mig-strategy", "--device-list-strategy", "--experimental-honor-resources"]
)
def test_dra_commands_refuse_device_plugin_flags(capsys: pytest.CaptureFixture[str], command: str, flag: str) -> None:
    """The DRA driver publishes the node's devices as they are: a device-plugin flag would be ignored."""
    with pytest.raises(SystemExit) as exited:
        main([command, flag, "x"])
    assert exited.value.code == 2
    assert f"fakegpu {command}: error: unrecognized arguments: {flag}" in capsys.readouterr().err


def test_device_plugin_commands_keep_the_config_flags() -> None:
    for command in ("plugin", "demo", "devices", "labels", "nvidia-smi", "virtual-nodes"):
        assert parse([command, "--mig-strategy", "mixed"]).mig_strategy == "mixed", command


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-level", "debug", "--log-format", "json", "devices"],
        ["devices", "--log-level", "debug", "--log-format", "json"],
        ["--log-level", "warning", "devices", "--log-level", "debug", "--log-format", "json"],
    ],
)
def test_global_flags_before_or_after_the_command(argv: list[str]) -> None:
    args = parse(argv)
    assert (args.log_level, args.log_format) == ("debug", "json")


def test_global_flags_after_a_nested_command() -> None:
    assert parse(["scenario", "list", "--log-level", "error"]).log_level == "error"


def test_without_global_flags_the_defaults_apply() -> None:
    args = parse(["devices"])
    assert (args.log_level, args.log_format) == (None, None)


def test_demo_log_level_debug_shows_debug_lines() -> None:
    """The demo keeps library INFO lines out of its output by default, but an explicit level is obeyed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "fakegpu.cli.main", "demo", "--gpus", "1xt4", "--node-name", "n1"]
    quiet = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=True)
    loud = subprocess.run(
        [*argv, "--log-level", "debug"], check=False, capture_output=True, text=True, env=env, timeout=120
    )
    assert loud.returncode == 0, loud.stderr
    assert " DEBUG fakegpu.fakeplugin.rpc: nvidia.com/gpu Allocate: OK" in loud.stderr
    assert "DEBUG" not in quiet.stderr and "INFO" not in quiet.stderr
    assert "sample allocation" in loud.stdout
