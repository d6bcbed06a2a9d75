"""The README's standalone-node walkthrough, run command by command, its output compared with the README's.

The ``console`` block under "A standalone node, driven from the shell" is the truth: ``$`` lines are
commands, the lines after one its output. Daemons (``... &``) run as real ``fakegpu`` processes; every other
command goes through ``fakegpu.cli.main``. ``/tmp/node`` becomes a fresh directory; everything else,
UUIDs included, must come out exactly as the README shows it.
"""

from __future__ import annotations

import asyncio
import functools
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakegpu.cli.main import main
from fakegpu.control.client import admin_call
from fakegpu.control.protocol import AdminError
from tests.eventually import eventually

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
HEADING = "### A standalone node, driven from the shell"
README_DIR = "/tmp/node"


@dataclass
class Step:
    command: str
    output: str

    @property
    def daemon(self) -> bool:
        return self.command.endswith("&")

    def argv(self, node_dir: Path) -> list[str]:
        """The arguments after ``fakegpu``, with the README's directory replaced and the redirections
        (``> log 2>&1``) dropped."""
        words = shlex.split(self.command.replace(README_DIR, str(node_dir)).rstrip("&"))
        assert words[0] == "fakegpu", self.command
        redirect = next((i for i, w in enumerate(words) if w.startswith((">", "2>"))), len(words))
        return words[1:redirect]


def walkthrough() -> list[Step]:
    text = README.read_text()
    assert HEADING in text, f"README has no section {HEADING!r}"
    block = re.search(r"```console\n(.*?)\n```", text[text.index(HEADING) :], flags=re.S)
    assert block is not None, f"no console block under {HEADING!r}"
    steps: list[Step] = []
    for line in block[1].splitlines():
        if line.startswith("$ "):
            steps.append(Step(line[2:], ""))
        else:
            steps[-1].output += line + "\n"
    return steps


def test_the_walkthrough_does_what_the_issue_asks():
    commands = [s.command for s in walkthrough()]
    assert [c.split()[1] for c in commands] == ["kubelet", "plugin", "ctl", "ctl", "ctl", "ctl", "ctl"]
    ctl_ops = [shlex.split(c)[4] for c in commands[2:]]
    assert ctl_ops == ["run-pod", "xid", "status", "restart-kubelet", "pods"]
    assert "--request nvidia.com/gpu=2" in commands[2] and "--node-name" in commands[1]


async def _run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = await asyncio.to_thread(main, argv)
    out, err = capsys.readouterr()
    assert err == "", f"fakegpu {' '.join(argv)} wrote to stderr: {err}"
    return code, out


async def _prints(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> bool:
    code, out = await _run_main(argv, capsys)
    return code == 0 and out == expected


async def _kubelet_answers(sock: Path) -> dict[str, int]:
    try:
        status = await admin_call(sock, "status")
    except AdminError:
        return {}
    return {r["name"]: r["allocatable"] for r in status["resources"]} | {"up": 1}


async def test_readme_standalone_walkthrough(root, capsys):
    node_dir = root / "node"
    kubelet_sock = node_dir / "fakegpu-kubelet.sock"
    daemons: list[asyncio.subprocess.Process] = []
    try:
        for step in walkthrough():
            argv = step.argv(node_dir)
            if step.daemon:
                log = open(root / f"{argv[0]}.log", "wb")  # noqa: SIM115 - the process writes it until the end
                daemons.append(
                    await asyncio.create_subprocess_exec(
                        sys.executable, "-m", "fakegpu", *argv, cwd=ROOT, stdout=log, stderr=log
                    )
                )
                log.close()
                # What a person's pause does: the kubelet answers, then the plugin has registered.
                if argv[0] == "kubelet":
                    await eventually(lambda: _kubelet_answers(kubelet_sock), "the kubelet's admin socket", 30)
                else:
                    await eventually(lambda: _gpus_registered(kubelet_sock), "the plugin to register its GPUs", 30)
                continue
            expected = step.output.replace(README_DIR, str(node_dir))
            if argv[3] == "status":
                # The XID reaches the kubelet through ListAndWatch after ``ctl xid`` answers.
                check = functools.partial(_prints, argv, expected, capsys)
                await eventually(check, f"fakegpu {' '.join(argv)} to print the README's output", 10)
                continue
            code, out = await _run_main(argv, capsys)
            assert (code, out) == (0, expected), f"fakegpu {' '.join(argv)}"
    finally:
        for proc in reversed(daemons):
            if proc.returncode is None:
                proc.terminate()
            assert await asyncio.wait_for(proc.wait(), 30) == 0, (root / "kubelet.log").read_text()


async def _gpus_registered(sock: Path) -> bool:
    return (await _kubelet_answers(sock)).get("nvidia.com/gpu") == 4
