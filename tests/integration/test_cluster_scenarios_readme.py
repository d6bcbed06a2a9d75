"""The README's cluster scenario walk-through is what the commands print: the tests' API server run on its own
(``tests.apiserver.standalone``), then ``fakegpu scenario run --kubeconfig`` in a process of its own, as a user
runs them; the step lines are compared with the README's, timings and the server's port aside."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.apiserver.standalone import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
COMMAND = "fakegpu scenario run --kubeconfig /tmp/kc.yaml --time-scale 100 scenarios/fleet-five-percent-failing.yaml"


def readme_output() -> list[str]:
    """The lines the README shows after the command, up to the end of its block."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index(f"$ {COMMAND}") + 1
    end = lines.index("```", start)
    return lines[start:end]


def comparable(line: str) -> str:
    """A line without what changes from run to run: the server's port, milliseconds, the run's seconds."""
    line = re.sub(r"http://127\.0\.0\.1:\d+", "http://127.0.0.1:PORT", line)
    line = re.sub(r"\s+\d+ ms  (PASS|FAIL)$", r"  N ms  \1", line)
    return re.sub(r"in \d+\.\d+ s$", "in N s", line)


def test_the_readme_walk_through_is_what_the_command_prints():
    with ServerProcess() as server:
        argv = COMMAND.split()[1:]
        argv[argv.index("/tmp/kc.yaml")] = str(server.kubeconfig)
        run = subprocess.run(
            [sys.executable, "-m", "fakegpu", *argv], check=False, cwd=ROOT, capture_output=True, text=True, timeout=300
        )
    assert run.returncode == 0, run.stdout + run.stderr
    assert [comparable(x) for x in run.stdout.splitlines()] == [comparable(x) for x in readme_output()]
