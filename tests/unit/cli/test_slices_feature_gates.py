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


def test_the_health_gate_line_says_when_the_server_version_takes_no_taints(tmp_path, capsys, monkeypatch):
    """Device taints are published from Kubernetes 1.36 (DRADeviceTaints alpha from 1.33, beta and on by default
    from 1.36: kubernetes/kubernetes pkg/features/kube_features.go @ v1.36.0): for 1.35 the gate's line says the
    slices carry none, and they carry none; for 1.36 the line is the gate's alone."""
    monkeypatch.delenv("FEATURE_GATES", raising=False)
    spec = tmp_path / "node.yaml"
    spec.write_text(SPEC)
    base = ("--node-spec", str(spec), "--node-name", "n1", "--feature-gates", "NVMLDeviceHealthCheck=true")
    code, out, err = run(capsys, *base, "--server-version", "1.35")
    assert code == 0
    assert err.splitlines() == [
        f"n1: NVMLDeviceHealthCheck=true: {GATE_EFFECTS['NVMLDeviceHealthCheck']}; on Kubernetes 1.35 these slices "
        "carry no taints (before 1.36 DRADeviceTaints is off by default and the API server drops them)"
    ]
    assert set(taints(out).values()) == {None}
    code, out, err = run(capsys, *base, "--server-version", "1.36")
    assert code == 0
    assert err.splitlines() == [f"n1: NVMLDeviceHealthCheck=true: {GATE_EFFECTS['NVMLDeviceHealthCheck']}"]


def test_dynamic_mig_gate_is_the_mig_mode_and_the_checks_are_the_drivers(capsys, monkeypatch):
    monkeypatch.delenv("FEATURE_GATES", raising=False)
    code, out, err = run(capsys, "--gpus", "1xh100-80gb", "--feature-gates", "DynamicMIG=true,ConsumableShares=true")
    assert code == 0
    assert [line.split(":", 2)[1].strip() for line in err.splitlines()] == ["DynamicMIG=true", "ConsumableShares=true"]
    assert any("sharedCounters" in s["spec"] for s in yaml.safe_load_all(out))
    code, _out, err = run(capsys, "--gpus", "1xh100-80gb", "--feature-gates", "DynamicMIG=true,MPSSupport=true")
    assert code == 2
    assert "feature gate DynamicMIG is currently mutually exclusive with MPSSupport" in err


def attributes(out: str) -> dict[str, dict[str, object]]:
    return {d["name"]: d["attributes"] for s in yaml.safe_load_all(out) for d in s["spec"].get("devices", [])}


def test_the_list_attributes_gate_publishes_numa_node_as_a_list(tmp_path, capsys, monkeypatch):
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/numa.go (configuredNUMAAttributeForm), main @
    0545e9e (after v0.4.1, PR #1261): with DRAListTypeAttributes the driver publishes
    `resource.kubernetes.io/numaNode` as `ints`; `fakegpu slices` given that gate prints the slices the driver would
    publish with it."""
    monkeypatch.delenv("FEATURE_GATES", raising=False)
    spec = tmp_path / "node.yaml"
    spec.write_text("numaNodes: 2\ngpus:\n- {model: h100-80gb, count: 2, numa: [0, 1]}\n")
    code, out, _err = run(capsys, "--node-spec", str(spec), "--node-name", "n1")
    assert code == 0
    assert attributes(out)["gpu-1"]["resource.kubernetes.io/numaNode"] == {"int": 1}
    code, out, _err = run(
        capsys, "--node-spec", str(spec), "--node-name", "n1", "--feature-gates", "DRAListTypeAttributes=true"
    )
    assert code == 0
    assert attributes(out)["gpu-1"]["resource.kubernetes.io/numaNode"] == {"ints": [1]}


def test_the_fabric_manager_gate_publishes_partition_attributes(capsys, monkeypatch):
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/deviceinfo.go (addFabricManagerAttributes),
    main @ 88b3014 (after PR #1273): with FabricManagerPartitioning every full GPU of an HGX baseboard carries
    `gpuModuleID` and `partition1/2/4/8`; `fakegpu slices` with the gate (here through `$FEATURE_GATES`, as NVIDIA's
    chart sets it) prints them, without it none."""
    monkeypatch.delenv("FEATURE_GATES", raising=False)
    code, out, _err = run(capsys, "--gpus", "8xh100-80gb", "--node-name", "n1")
    assert code == 0
    assert "gpuModuleID" not in attributes(out)["gpu-0"]
    monkeypatch.setenv("FEATURE_GATES", "FabricManagerPartitioning=true")
    code, out, _err = run(capsys, "--gpus", "8xh100-80gb", "--node-name", "n1")
    assert code == 0
    gpu7 = attributes(out)["gpu-7"]
    assert {k: gpu7[k] for k in ("gpuModuleID", "partition1", "partition2", "partition4", "partition8")} == {
        "gpuModuleID": {"int": 8},
        "partition1": {"int": 15},
        "partition2": {"int": 7},
        "partition4": {"int": 3},
        "partition8": {"int": 1},
    }


def test_the_consumable_shares_line_says_when_the_server_version_takes_no_shares(capsys, monkeypatch):
    """NVIDIA publishes allowMultipleAllocations and request policies only where the API has them (Kubernetes
    1.34+, KEP-5075; kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/consumable_shares.go at commit
    f49e778): for 1.33 the gate's line says the slices carry none, and they carry none."""
    monkeypatch.delenv("FEATURE_GATES", raising=False)
    monkeypatch.delenv("CONSUMABLE_SHARES", raising=False)
    base = ("--node-name", "n1", "--feature-gates", "ConsumableShares=true", "--consumable-shares", "4")
    old = ("--server-version", "1.33", "--resource-api-version", "resource.k8s.io/v1beta2")
    code, out, err = run(capsys, *base, *old)
    assert code == 0
    assert err.splitlines() == [
        f"n1: ConsumableShares=true: {GATE_EFFECTS['ConsumableShares']}; on Kubernetes 1.33 these slices carry no "
        "allowMultipleAllocations or request policies (the API has them from 1.34, as NVIDIA publishes them)"
    ]
    devices = [d for s in yaml.safe_load_all(out) for d in s["spec"].get("devices", [])]
    assert devices and not any("allowMultipleAllocations" in str(d) for d in devices)
    code, out, err = run(capsys, *base, "--server-version", "1.34")
    assert code == 0
    assert err.splitlines() == [f"n1: ConsumableShares=true: {GATE_EFFECTS['ConsumableShares']}"]
    devices = [d for s in yaml.safe_load_all(out) for d in s["spec"].get("devices", [])]
    assert devices and all(d.get("allowMultipleAllocations") for d in devices)
