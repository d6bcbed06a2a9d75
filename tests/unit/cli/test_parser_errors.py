"""A flag or value typo is one stderr line naming the flag and the valid choices, then where to read more."""

from __future__ import annotations

import pytest

from fakegpu.cli.main import COMMANDS, full_parser, main
from fakegpu.cli.terse_parser import TerseParser


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and out == ""
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["devices", "-o", "xml"],
            "fakegpu devices: error: argument -o/--output: invalid choice: 'xml' (choose from 'table', 'json', "
            "'yaml'); see 'fakegpu devices --help'",
        ),
        (["demo", "--log-level", "loud"], "argument --log-level: invalid choice: 'loud' (choose from 'debug'"),
        (["--log-format", "xml", "devices"], "fakegpu: error: argument --log-format: invalid choice: 'xml'"),
        (["slices", "--server-version", "2.1"], "argument --server-version: expected a Kubernetes version"),
        (["devices", "--nodename", "x"], "unrecognized arguments: --nodename x (did you mean --node-name?)"),
        (["labels", "--timestamp"], "argument --timestamp: expected one argument"),
        (["scenario", "run", "--verbsoe", "x"], "unrecognized arguments: --verbsoe (did you mean --verbose?)"),
        (["nosuchcommand"], "argument COMMAND: invalid choice: 'nosuchcommand'"),
    ],
)
def test_a_typo_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    err = error_of(capsys, *argv)
    assert says in err
    assert err.rstrip().endswith("--help'") and "usage:" not in err


def test_every_parser_is_terse() -> None:
    """Every subcommand and nested subcommand (``scenario run``, ``ctl status``) answers in one line."""

    def walk(parser: object, path: str) -> list[str]:
        assert isinstance(parser, TerseParser), path
        found = [path]
        for action in parser._actions:
            choices = getattr(action, "choices", None)
            if isinstance(choices, dict):
                for name, child in choices.items():
                    found += walk(child, f"{path} {name}")
        return found

    paths = walk(full_parser(), "fakegpu")
    assert {f"fakegpu {name}" for name in COMMANDS} <= set(paths)
    assert "fakegpu scenario run" in paths and "fakegpu ctl status" in paths
