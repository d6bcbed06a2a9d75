"""``fakegpu scenario`` from the command line: directories, the step column of ``list``, progress."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from fakegpu.cli.main import main
from fakegpu.testing.scenario import EXIT_BAD_FILE, EXIT_FAIL, EXIT_PASS

HEADER = "issue: example/repo#1\ndescription: a test scenario\nnode: {gpus: 2xh100-80gb}\n"


def write(root: Path, name: str, body: str) -> Path:
    path = root / f"{name}.yaml"
    path.write_text(f"name: {name}\n" + HEADER + body)
    return path


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_run_a_directory_runs_every_file_sorted_with_a_summary(tmp_path, capsys):
    write(tmp_path, "b-fails", "steps:\n  - expect_now: {capacity: {nvidia.com/gpu: 3}}\n")
    write(tmp_path, "a-passes", "steps:\n  - expect_now: {capacity: {nvidia.com/gpu: 2}}\n")
    write(tmp_path, "c-passes", "steps:\n  - wait: 0\n")
    (tmp_path / "notes.txt").write_text("not a scenario")
    assert main(["scenario", "run", str(tmp_path)]) == EXIT_FAIL
    out, err = capsys.readouterr()
    headers = [line.split()[1] for line in out.splitlines() if line.startswith("scenario ")]
    assert headers == ["a-passes", "b-fails", "c-passes"]
    assert out.splitlines()[-1] == "3 scenario files: 2 passed, 1 failed, 0 bad"
    assert err == ""


def test_run_an_empty_directory_is_one_error_line(tmp_path, capsys):
    assert main(["scenario", "run", str(tmp_path)]) == EXIT_BAD_FILE
    err = capsys.readouterr().err
    assert err == f"fakegpu: error: {tmp_path}: no scenario files (*.yaml) in this directory\n"


def test_list_shows_a_start_error_scenario_as_such(tmp_path, capsys):
    write(tmp_path, "fails-to-start", "expect_start_error: boom\n")
    write(tmp_path, "one-step", "steps:\n  - wait: 0\n")
    write(tmp_path, "two-steps", "steps:\n  - wait: 0\n  - wait: 0\n")
    assert main(["scenario", "list", str(tmp_path)]) == EXIT_PASS
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "start error" in rows[str(tmp_path / "fails-to-start.yaml")]
    assert " 0 steps" not in rows[str(tmp_path / "fails-to-start.yaml")]
    assert "1 step " in rows[str(tmp_path / "one-step.yaml")]
    assert "2 steps " in rows[str(tmp_path / "two-steps.yaml")]


def test_a_start_error_scenario_says_it_failed_to_start_as_expected(tmp_path, capsys):
    path = tmp_path / "fails.yaml"
    path.write_text(
        "name: fails\nissue: example/repo#1\ndescription: d\n"
        "node: {gpus: 2xh100-80gb, mig_layout: all-nonsense}\nexpect_start_error: all-nonsense\n"
    )
    assert main(["scenario", "run", str(path)]) == EXIT_PASS
    assert "PASS fails: failed to start as expected in " in capsys.readouterr().out


def test_a_long_run_shows_progress_on_a_terminal(tmp_path, monkeypatch):
    out, err = Terminal(), Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    write(tmp_path, "slow", "steps:\n  - wait: 1.3\n  - wait: 0\n")
    assert main(["scenario", "run", str(tmp_path)]) == EXIT_PASS
    assert "scenario steps: 0/2 (0/s, 1 s)" in err.getvalue()
    assert err.getvalue().endswith("\r\x1b[K"), "the progress line is erased at the end"
    assert "\r\x1b[Kscenario slow" in out.getvalue(), "each output line first erases the progress line"


def test_a_run_to_a_pipe_has_no_terminal_codes(tmp_path, capsys):
    write(tmp_path, "quick", "steps:\n  - wait: 0\n")
    assert main(["scenario", "run", str(tmp_path)]) == EXIT_PASS
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and err == ""


def test_list_of_the_catalog_shows_start_error_scenarios_and_step_counts(capsys):
    assert main(["scenario", "list"]) == EXIT_PASS
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "start error" in rows["mig-single-strategy-empty-gpu"]
    assert "  9 steps  kubelet-restart-without-reregistration" in rows["kubelet-restart-without-reregistration"]
