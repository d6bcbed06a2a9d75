"""The README's main job: ``fakegpu demo`` runs end to end on a fresh environment and exits 0."""

from __future__ import annotations

import subprocess
import sys


def test_demo_runs_and_shows_capacity_labels_and_an_allocation():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fakegpu",
            "demo",
            "--gpus",
            "2xa100-40gb",
            "--mig-layout",
            "all-balanced",
            "--mig-strategy",
            "mixed",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "nvidia.com/mig-1g.5gb                     4           4  nvidia-mig-1g.5gb.sock" in out
    assert "nvidia.com/mig.strategy=mixed" in out
    assert out.count(": pod demo-pod-") == 3 and "Running" in out
    assert "env    NVIDIA_VISIBLE_DEVICES=MIG-" in out


def test_demo_default_node():
    proc = subprocess.run(
        [sys.executable, "-m", "fakegpu", "demo"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "8x NVIDIA H100 80GB HBM3" in proc.stdout
    assert "nvidia.com/gpu                            8           8" in proc.stdout


def test_daemon_with_a_file_as_kubelet_dir_exits_2(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    proc = subprocess.run(
        [sys.executable, "-m", "fakegpu", "kubelet", "--dir", str(not_a_dir)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and str(not_a_dir) in proc.stderr
