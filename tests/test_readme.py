"""The README's first two commands are the truth: CI runs exactly the second one."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
    return [b.strip() for b in blocks]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert readme_commands()[1] in ci


def test_first_command_sets_up_and_runs_the_main_job():
    first = readme_commands()[0]
    assert first.startswith("python3 -m venv .venv && ")
    assert "pip install" in first and "fakegpu " in first
