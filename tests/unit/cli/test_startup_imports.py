"""``fakegpu --help`` stays cheap: importing the CLI and printing the command list load no heavy library.

Counts, not times (times depend on the machine; ``bench/cli_startup.py`` measures them): each check runs in
a fresh interpreter and lists the heavy modules found in ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("grpc", "lightkube", "prometheus_client")

_PROBE = """
import contextlib, io, json, sys
from fakegpu.cli.main import main
{action}
print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def heavy_modules_after(action: str) -> list[str]:
    code = _PROBE.format(action=action, heavy=HEAVY)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True
    )
    found: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return found


def test_importing_the_cli_loads_no_heavy_library() -> None:
    assert heavy_modules_after("") == []


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["slices", "--bogus"]])
def test_help_version_and_a_typo_load_no_grpc_or_prometheus(argv: list[str]) -> None:
    """``slices`` builds its own options (lightkube's API versions) but never the daemons' telemetry."""
    action = (
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        f"    try:\n        main({argv!r})\n    except SystemExit:\n        pass"
    )
    allowed = {"lightkube"} if argv[0] == "slices" else set()
    assert set(heavy_modules_after(action)) <= allowed


def test_the_probe_sees_heavy_modules_when_a_daemon_command_is_built() -> None:
    """The check above can fail: building ``plugin``'s options does load the telemetry libraries."""
    action = (
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        main(['plugin', '--help'])\n    except SystemExit:\n        pass"
    )
    assert "prometheus_client" in heavy_modules_after(action)
