"""The scenario runner: every catalog file passes; failures exit 1 with expected/got; bad files exit 2."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fakegpu.cli.main import main
from fakegpu.testing.scenario import EXIT_BAD_FILE, EXIT_FAIL, EXIT_PASS, run_files
from fakegpu.testing.scenario.cluster_model import is_cluster_data, read_scenario_data

ROOT = Path(__file__).resolve().parents[2]
EVERY_FILE = sorted((ROOT / "scenarios").glob("*.yaml"))
CATALOG = [p for p in EVERY_FILE if not is_cluster_data(read_scenario_data(p))]
"""The node scenarios; the cluster ones run against an API server (tests/integration/test_cluster_scenarios.py)."""

HEADER = "name: t\nissue: example/repo#1\ndescription: a test scenario\n"


def write(tmp_path: Path, body: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + body)
    return path


async def run(*paths: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = await run_files(list(paths), out, err)
    return status, out.getvalue(), err.getvalue()


def test_the_catalog_has_at_least_twelve_scenarios():
    assert len(CATALOG) >= 12


@pytest.mark.parametrize("path", CATALOG, ids=lambda p: p.stem)
async def test_catalog_scenario_passes(path: Path, timing):
    started = time.monotonic()
    status, out, err = await run(path)
    assert status == EXIT_PASS, out + err
    assert err == ""
    assert out.splitlines()[-1].startswith("PASS ")
    assert " FAIL" not in out
    timing.within(time.monotonic() - started, 5, "a scenario (keep them fast: advance the clock instead of waiting)")


async def test_step_lines_show_number_kind_timing_and_result(tmp_path):
    path = write(
        tmp_path, "node: {gpus: 2xa100-40gb}\nsteps:\n  - wait: 0.01\n  - expect: {capacity: {nvidia.com/gpu: 2}}\n"
    )
    status, out, _ = await run(path)
    assert status == EXIT_PASS
    lines = out.splitlines()
    assert lines[0] == f"scenario t (example/repo#1): {path}"
    assert "start" in lines[1] and lines[1].endswith("PASS")
    assert lines[2].split()[:2] == ["0", "wait"] and " ms  PASS" in lines[2]
    assert lines[3].split()[:2] == ["1", "expect"] and lines[3].endswith("PASS")
    assert lines[4].startswith("PASS t: start and 2 step(s) in ")


async def test_plugins_looked_returns_after_a_whole_watch_step(tmp_path):
    """The barrier for "the plugins did nothing": its line counts the watch steps it saw, two at least (so
    one began after it did); the no-reregistration mode then shows its capacity 0 at once."""
    path = write(
        tmp_path,
        "node: {gpus: 2xt4, bugs: [no-reregistration]}\nsteps:\n  - restart: kubelet\n  - plugins_looked: true\n"
        "  - expect_now: {capacity: {nvidia.com/gpu: 0}}\n",
    )
    status, out, err = await run(path)
    assert status == EXIT_PASS, out + err
    line = out.splitlines()[3]
    assert line.split()[:2] == ["1", "plugins_looked"] and line.endswith("PASS"), line
    seen = re.search(r"the plugins' watch loop looks again: (\d+) watch step\(s\)", line)
    assert seen is not None and int(seen.group(1)) >= 2, line


async def test_failed_expectation_exits_1_with_expected_and_got(tmp_path):
    body = (
        "node: {gpus: 2xa100-40gb}\n"
        "steps:\n"
        "  - expect: {capacity: {nvidia.com/gpu: 2}}\n"
        "  - expect: {allocatable: {nvidia.com/gpu: 3}, within: 0.1}\n"
        "  - wait: 0\n"
    )
    status, out, err = await run(write(tmp_path, body))
    assert status == EXIT_FAIL
    assert err == ""
    assert "allocatable[nvidia.com/gpu]: expected 3, got 2" in out
    assert any(line.split()[:2] == ["1", "expect"] and line.endswith("FAIL") for line in out.splitlines())
    assert not any(line.split()[:2] == ["2", "wait"] for line in out.splitlines()), "stops at the first failure"
    assert out.splitlines()[-1].startswith("FAIL t after ")


async def test_wrong_allocation_outcome_exits_1(tmp_path):
    body = "node: {gpus: 1xl4}\nsteps:\n  - allocate: {pod: p1, resources: {nvidia.com/gpu: 2}}\n"
    status, out, _ = await run(write(tmp_path, body))
    assert status == EXIT_FAIL
    assert "expected: admitted" in out
    assert "got: Failed (OutOfnvidia.com/gpu): Pod was rejected: Node didn't have enough resource" in out


async def test_expected_start_error_that_does_not_happen_exits_1(tmp_path):
    body = "node: {gpus: 1xl4}\nexpect_start_error: more than one MIG device type\n"
    status, out, _ = await run(write(tmp_path, body))
    assert status == EXIT_FAIL
    assert "expected: start error containing 'more than one MIG device type'" in out
    assert "got: a node serving nvidia.com/gpu" in out


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "steps:\n  - wait: 0\n  - explode: {now: true}\n",
            "s.yaml: steps[1]: unknown step kind 'explode'; expected one of: expect, expect_now, xid,",
        ),
        (
            "steps:\n  - wait: 0\n  - wait: 0\n  - wait: 0\n"
            "  - allocate: {pod: p1, resources: {nvidia.com/gpu: '2'}}\n",
            "s.yaml: steps[3].allocate.resources.nvidia.com/gpu: Input should be a valid integer (found '2')",
        ),
        ("steps:\n  - restart: kubelets\n", "s.yaml: steps[0].restart: Input should be 'kubelet' or 'plugins'"),
        ("steps:\n  - xid: {xid: 79}\n", "s.yaml: steps[0].xid: give exactly one of 'gpu' (an index) or 'device'"),
        (
            "steps:\n  - allocate: {pod: p1, resources: {nvidia.com/gpu: 1}, count: 2}\n",
            "steps[0].allocate.count: unknown field",
        ),
        (
            "steps:\n  - {wait: 0, xid: {gpu: 0, xid: 79}}\n",
            "s.yaml: steps[0]: a step has exactly one key (its kind), found 2",
        ),
        ("steps:\n  - wait\n", "s.yaml: steps[0]: a step is a mapping with one key (its kind), found str"),
        ("colour: blue\nsteps:\n  - wait: 0\n", "s.yaml: colour: unknown field"),
        ("node: {gpus: 2}\nsteps:\n  - wait: 0\n", "s.yaml: node.gpus"),
        ("steps: []\n", "s.yaml: steps: a scenario needs steps, or expect_start_error"),
        ("steps:\n  - xid: {gpu: 42, xid: 79}\n", "s.yaml: steps[0].xid: no device, GPU UUID or GPU index '42'"),
        ("steps:\n  - end_streams: example.com/nothing\n", "s.yaml: steps[0].end_streams: no plugin serves"),
        ("steps:\n  - delete_pod: ghost\n", "s.yaml: steps[0].delete_pod: no pod 'ghost' was allocated"),
        ("node: {gpus: 2xfoo}\nsteps:\n  - wait: 0\n", "s.yaml: node: --gpus: unknown GPU model 'foo'"),
        (
            "node: {config: {version: v1, sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}}}"
            "\n"
            "steps:\n  - wait: 0\n",
            "s.yaml: node: node.config: sharing.timeSlicing.resources[0]: number of replicas must be >= 2",
        ),
        ("steps:\n  - expect: {within: 1}\n", "s.yaml: steps[0].expect: give at least one of capacity"),
        ("steps: [wait: 0\n", "s.yaml: line 5, column 1: invalid YAML: expected ',' or ']'"),
    ],
    ids=[
        "unknown-kind",
        "wrong-type",
        "bad-literal",
        "no-target",
        "unknown-step-field",
        "two-kinds",
        "scalar-step",
        "unknown-top-level-key",
        "bad-gpus-type",
        "no-steps",
        "unknown-gpu",
        "unknown-resource",
        "unknown-pod",
        "unknown-model",
        "bad-nvidia-config",
        "empty-expect",
        "yaml-syntax",
    ],
)
async def test_bad_file_exits_2_with_one_line(tmp_path, body, message):
    status, _, err = await run(write(tmp_path, body))
    assert status == EXIT_BAD_FILE
    assert err.count("\n") == 1, err
    assert err.startswith("fakegpu: error: ") and message in err, err
    assert "Traceback" not in err


async def test_binary_garbage_and_missing_file_exit_2(tmp_path):
    garbage = tmp_path / "garbage.yaml"
    garbage.write_bytes(bytes(range(256)) * 4)
    status, _, err = await run(garbage)
    assert status == EXIT_BAD_FILE
    assert err == f"fakegpu: error: {garbage}: scenario file is not UTF-8 text (bad byte at offset 128)\n"
    missing = tmp_path / "missing.yaml"
    status, _, err = await run(missing)
    assert status == EXIT_BAD_FILE
    assert err == f"fakegpu: error: {missing}: scenario file not found\n"


async def test_several_files_give_the_worst_status_and_a_summary(tmp_path):
    good = write(tmp_path, "node: {gpus: 1xl4}\nsteps:\n  - wait: 0\n", "good.yaml")
    bad = write(tmp_path, "steps:\n  - nope: 1\n", "bad.yaml")
    failing = write(tmp_path, "node: {gpus: 1xl4}\nsteps:\n  - expect: {capacity: {x.com/y: 1}, within: 0}\n", "f.yaml")
    status, out, err = await run(good, failing, bad)
    assert status == EXIT_BAD_FILE
    assert out.splitlines()[-1] == "3 scenario files: 1 passed, 1 failed, 1 bad"
    assert "bad.yaml: steps[0]: unknown step kind 'nope'" in err
    status, _, _ = await run(good, failing)
    assert status == EXIT_FAIL


def test_cli_scenario_run_and_list(capsys, tmp_path):
    path = CATALOG[0]
    assert main(["scenario", "run", str(path)]) == EXIT_PASS
    out, err = capsys.readouterr()
    assert out.splitlines()[-1].startswith("PASS ") and err == ""
    assert main(["scenario", "list", str(ROOT / "scenarios")]) == EXIT_PASS
    out, _ = capsys.readouterr()
    assert len(out.splitlines()) == len(EVERY_FILE)
    assert "NVIDIA/k8s-device-plugin#210" in out
    bad = write(tmp_path, "steps:\n  - wait: '1'\n")
    assert main(["scenario", "list", str(bad)]) == EXIT_BAD_FILE
    assert main(["scenario", "run", str(bad)]) == EXIT_BAD_FILE
    _, err = capsys.readouterr()
    assert err.splitlines() == [f"fakegpu: error: {bad}: steps[0].wait: Input should be a valid number (found '1')"] * 2


def test_cli_entry_point_bad_file_has_no_traceback(tmp_path):
    bad = write(tmp_path, "steps:\n  - allocate: {pod: p1}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "fakegpu", "scenario", "run", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == EXIT_BAD_FILE
    assert proc.stderr == f"fakegpu: error: {bad}: steps[0].allocate.resources: Field required\n"


async def test_a_fault_the_device_plugin_can_never_see_is_a_bad_file(tmp_path):
    """Regression: ``fault: {rpc: NodePrepareResources}`` passed though the device plugin never serves that
    RPC, so the fault could never fire. Now the file is refused before a node starts: exit 2, one line
    naming the file, the step and the RPCs a fault can name here."""
    body = (
        "node: {gpus: 1xl4}\n"
        "steps:\n"
        "  - fault: {rpc: NodePrepareResources, code: UNAVAILABLE}\n"
        "  - allocate: {pod: p1, resources: {nvidia.com/gpu: 1}}\n"
    )
    path = write(tmp_path, body)
    status, out, err = await run(path)
    assert status == EXIT_BAD_FILE
    assert out == ""
    assert err == (
        f"fakegpu: error: {path}: steps[0].fault.rpc: 'NodePrepareResources' is an RPC of the DRA driver, not of "
        "the device plugin this scenario drives; expected one of: GetDevicePluginOptions, ListAndWatch, "
        "GetPreferredAllocation, Allocate, PreStartContainer\n"
    )
