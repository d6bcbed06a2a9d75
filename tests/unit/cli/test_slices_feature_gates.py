"""``fakegpu slices --feature-gates``: the same gates as ``fakegpu dra`` (syntax, validation, DynamicMIG as the MIG
mode), a line per gate given saying what it changes, and slices as the driver would publish them with those
gates (kubernetes-sigs/dra-driver-nvidia-gpu pkg/featuregates/featuregates.go at commit 0807eed;
cmd/gpu-kubelet-plugin/device_health.go at commit bc3c4d8 for the health taints)."""

from __future__ import annotations

import pytest
import yaml

from fakegpu.cli.main import main
from fakegpu.dra.feature_gates import GATE_EFFECTS

SPEC = "gpus:\n- model: h100-80gb\n- model: h100-80gb\n  xid: 79\n- model: h100-80gb\n  xid: 43\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["slices", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def taints(out: str) -> dict[str, object]:
    return {d["name"]: d.get("taints") for s in yaml.safe_load_all(out) for d in s["spec"].get("devices", [])}


def test_the_health_gate_taints_a_node_specs_xids_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FEATURE_GATES", raising=False)
    spec = tmp_path / "node.yaml"
    spec.write_text(SPEC)
    code, out, err = run(capsys, "--node-spec", str(spec), "--node-name", "n1")
    assert (code, err) == (0, "")
    assert taints(out) == {"gpu-0": None, "gpu-1": None, "gpu-2": None}
    code, out, err = run(
        capsys, "--node-spec", str(spec), "--node-name", "n1", "--feature-gates", "NVMLDeviceHealthCheck=true"
    )
    assert code == 0
    assert err.splitlines() == [f"n1: NVMLDeviceHealthCheck=true: {GATE_EFFECTS['NVMLDeviceHealthCheck']}"]
    assert taints(out) == {
        "gpu-0": None,
        "gpu-1": [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}],
        "gpu-2": [{"key": "gpu.nvidia.com/xid", "value": "43", "effect": "None"}],
    }


def test_dynamic_mig_gate_is_the_mig_mode_and_the_checks_are_the_drivers(capsys, monkeypatch):
    monkeypatch.delenv("FEATURE_GATES", raising=False)
    code, out, err = run(capsys, "--gpus", "1xh100-80gb", "--feature-gates", "DynamicMIG=true,ConsumableShares=true")
    assert code == 0
    assert [line.split(":", 2)[1].strip() for line in err.splitlines()] == ["DynamicMIG=true", "ConsumableShares=true"]
    assert any("sharedCounters" in s["spec"] for s in yaml.safe_load_all(out))
    code, _out, err = run(capsys, "--gpus", "1xh100-80gb", "--feature-gates", "DynamicMIG=true,MPSSupport=true")
    assert code == 2
    assert "feature gate DynamicMIG is currently mutually exclusive with MPSSupport" in err
