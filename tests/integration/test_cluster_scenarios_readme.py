"""The README's cluster scenario walk-through is what the commands print: the tests' API server run on its own
(``tests.apiserver.standalone``) started exactly as the README's line has it (in the background, with no
terminal: stdin is /dev/null, as in a script), then ``fakegpu scenario run --kubeconfig`` in a process of its
own, as a user runs them; the step lines are compared with the README's, timings and the server's port aside."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER_PREFIX = "$ python -m tests.apiserver.standalone "
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


def readme_server_argv(kubeconfig: Path) -> list[str]:
    """The README's line starting the server, as argv (its ``&`` dropped, its kubeconfig path replaced)."""
    (line,) = [x for x in (ROOT / "README.md").read_text().splitlines() if x.startswith(SERVER_PREFIX)]
    words = shlex.split(line.removeprefix("$ "))
    assert words[-1] == "&", "the README starts the server in the background"
    words = [str(kubeconfig) if w == "/tmp/kc.yaml" else w for w in words[:-1]]
    return [sys.executable, *words[1:]]


def test_the_readme_walk_through_is_what_the_command_prints(tmp_path):
    kubeconfig = tmp_path / "kc.yaml"
    server = subprocess.Popen(
        readme_server_argv(kubeconfig), cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("http://")
        argv = COMMAND.split()[1:]
        argv[argv.index("/tmp/kc.yaml")] = str(kubeconfig)
        run = subprocess.run(
            [sys.executable, "-m", "fakegpu", *argv], check=False, cwd=ROOT, capture_output=True, text=True, timeout=300
        )
        assert server.poll() is None, "the server started as the README says stopped before the scenario ended"
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert run.returncode == 0, run.stdout + run.stderr
    assert [comparable(x) for x in run.stdout.splitlines()] == [comparable(x) for x in readme_output()]
