"""The fakegpu command line: output shapes, env fallbacks, and bad input as one line with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from fakegpu.cli.main import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_devices_json_shape(capsys):
    code, out, _ = run(capsys, "devices", "--gpus", "2xh100-80gb", "--node-name", "n1", "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {"resources", "labels"}
    devices = doc["resources"]["nvidia.com/gpu"]
    assert [set(d) for d in devices] == [{"id", "health", "numa", "parent"}] * 2
    assert devices[0]["health"] == "Healthy" and devices[0]["numa"] == 0 and devices[0]["id"] == devices[0]["parent"]
    assert doc["labels"]["nvidia.com/gpu.count"] == "2"


def test_devices_is_deterministic_for_a_node_name(capsys):
    first = run(capsys, "devices", "--node-name", "n1", "-o", "yaml")[1]
    assert first == run(capsys, "devices", "--node-name", "n1", "-o", "yaml")[1]
    assert first != run(capsys, "devices", "--node-name", "n2", "-o", "yaml")[1]
    assert len(yaml.safe_load(first)["resources"]["nvidia.com/gpu"]) == 8


def test_node_name_from_env(capsys, monkeypatch):
    monkeypatch.setenv("NODE_NAME", "from-env")
    a = run(capsys, "devices", "-o", "json")[1]
    b = run(capsys, "devices", "--node-name", "from-env", "-o", "json")[1]
    assert a == b


def test_env_flag_names(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("MIG_STRATEGY", "mixed")
    code, out, _ = run(capsys, "devices", "--gpus", "1xh100-80gb", "--mig-layout", "all-3g.40gb", "-o", "json")
    assert code == 0 and list(json.loads(out)["resources"]) == ["nvidia.com/mig-3g.40gb"]
    config = tmp_path / "c.yaml"
    config.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 3\n"
    )
    monkeypatch.setenv("CONFIG_FILE", str(config))
    monkeypatch.setenv("MIG_STRATEGY", "none")
    code, out, _ = run(capsys, "devices", "--gpus", "1xl4", "-o", "json")
    assert len(json.loads(out)["resources"]["nvidia.com/gpu"]) == 3


def test_table_output(capsys):
    code, out, _ = run(
        capsys, "devices", "--gpus", "1xa100-40gb", "--mig-layout", "all-balanced", "--mig-strategy", "mixed"
    )
    assert code == 0
    assert "nvidia.com/mig-1g.5gb" in out and "0:0" in out and "3g.20gb" in out


def test_labels_text(capsys):
    code, out, _ = run(capsys, "labels", "--gpus", "1xt4", "--timestamp", "1700000000")
    assert code == 0
    assert "nvidia.com/gpu.product=Tesla-T4\n" in out
    assert "nvidia.com/gfd.timestamp=1700000000\n" in out


def test_warnings_go_to_stderr(capsys, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("flags:\n  renameByDefault: true\n")
    code, _out, err = run(capsys, "devices", "--gpus", "1xt4", "--config-file", str(config))
    assert code == 0 and "fakegpu: warning:" in err and "flags.renameByDefault" in err


def test_catalog(capsys):
    code, out, _ = run(capsys, "catalog", "-v")
    assert code == 0 and "NVIDIA H100 80GB HBM3" in out and "unverified:" in out and "1_SLICE_REV2" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["devices", "--gpus", "8xh100-80gb", "--mig-layout", "all-1g.10gb", "--mig-strategy", "bogus"],
            "--mig-strategy: unknown MIG strategy: bogus",
        ),
        (["devices", "--node-spec", "/nonexistent/node.yaml"], "/nonexistent/node.yaml: node spec not found"),
        (
            ["devices", "--mig-strategy", "single", "--mig-layout", "all-balanced"],
            "more than one MIG device type present on node",
        ),
        (["labels", "--config-file", "/nonexistent.yaml"], "/nonexistent.yaml: config file not found"),
        (["devices", "--pass-device-specs", "maybe"], "--pass-device-specs: could not parse 'maybe' as bool"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("fakegpu: error: ") and message in err
    assert err.count("\n") == 1


def test_console_script_never_prints_a_traceback(tmp_path):
    bad = tmp_path / "garbage.yaml"
    bad.write_bytes(b"\x00\x01\x02 not yaml: [")
    proc = subprocess.run(
        [sys.executable, "-m", "fakegpu", "devices", "--node-spec", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert str(bad) in proc.stderr


def test_slices_and_deviceclasses_print_valid_objects(capsys):
    code, out, _ = run(
        capsys,
        "slices",
        "--gpus",
        "2xh100-80gb",
        "--mig-mode",
        "dynamic",
        "--node-name",
        "n1",
        "--server-version",
        "1.35",
        "--node-uid",
        "6a1e9e2c-0000-4000-8000-000000000001",
    )
    assert code == 0
    docs = list(yaml.safe_load_all(out))
    assert len(docs) == 3 and docs[0]["spec"].get("sharedCounters")
    for doc in docs:
        kubernetes_validate.validate(doc, "1.35.0", strict=True)
    code, out, _ = run(capsys, "deviceclasses")
    classes = list(yaml.safe_load_all(out))
    assert [c["metadata"]["name"] for c in classes] == ["gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"]
    for doc in classes:
        kubernetes_validate.validate(doc, "1.36.0", strict=True)


def test_deviceclasses_map_nvidia_com_gpu_on_v1_unless_told_not_to(capsys):
    """NVIDIA's chart sets extendedResourceName: nvidia.com/gpu on the gpu.nvidia.com class on resource.k8s.io/v1
    (kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu, since v25.12.0)."""
    _, out, _ = run(capsys, "deviceclasses")
    gpu, mig, vfio = yaml.safe_load_all(out)
    assert gpu["spec"]["extendedResourceName"] == "nvidia.com/gpu" and "extendedResourceName" not in mig["spec"]
    assert "extendedResourceName" not in vfio["spec"]
    _, out, _ = run(capsys, "deviceclasses", "--extended-resource-name", "")
    assert "extendedResourceName" not in out
    _, out, _ = run(capsys, "deviceclasses", "--resource-api-version", "resource.k8s.io/v1beta2")
    assert "extendedResourceName" not in out


@pytest.mark.parametrize(
    ("argv", "env", "error"),
    [
        (["--feature-gates", "MpsSupport=true"], "", "--feature-gates: unrecognized feature gate: MpsSupport"),
        ([], "MPSSupport", "FEATURE_GATES: missing bool value for MPSSupport"),
        (
            ["--mig-mode", "dynamic", "--feature-gates", "MPSSupport=true"],
            "",
            "feature gate validation failed: feature gate DynamicMIG is currently mutually exclusive with MPSSupport",
        ),
        ([], "DynamicMIG=true,MPSSupport=true,", "mutually exclusive with MPSSupport"),
        (
            ["--mig-mode", "static", "--feature-gates", "DynamicMIG=true"],
            "",
            "contradicts feature gate DynamicMIG=true",
        ),
    ],
)
def test_dra_feature_gates_are_checked_before_start(capsys, monkeypatch, tmp_path, argv, env, error):
    """kubernetes-sigs/dra-driver-nvidia-gpu pkg/featuregates/featuregates.go (ValidateFeatureGates) and
    cmd/gpu-kubelet-plugin/main.go: the gates come from --feature-gates or $FEATURE_GATES (NVIDIA's chart), and
    a bad value or combination stops the driver before it serves anything."""
    monkeypatch.setenv("FEATURE_GATES", env)
    code, _, err = run(capsys, "dra", "--gpus", "1xh100-80gb", "--kubelet-dir", str(tmp_path), *argv)
    assert code == 2 and error in err
    assert list(tmp_path.iterdir()) == [], "nothing is created before the gates pass"


def test_bad_driver_name_exits_2(capsys):
    code, out, err = run(capsys, "slices", "--driver-name", "Bad_Name")
    assert code == 2 and "driver name 'Bad_Name'" in err and out == ""


@pytest.mark.parametrize(
    ("field", "missing"),
    [("certificate-authority", "ca.crt"), ("client-certificate", "client.crt"), ("client-key", "client.key")],
)
def test_a_kubeconfig_naming_a_missing_file_names_that_file(capsys, tmp_path, field, missing):
    """Before the first API call, not as the bare ``[Errno 2] No such file or directory`` Python's ``ssl``
    raises; relative paths resolve against the kubeconfig's directory, as client-go resolves them
    (kubernetes/client-go ``tools/clientcmd/loader.go``, ``ResolveLocalPaths``)."""
    for name in ("ca.crt", "client.crt", "client.key"):
        if name != missing:
            (tmp_path / name).write_text("pem\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": "https://127.0.0.1:1", "certificate-authority": "ca.crt"}}
                ],
                "users": [{"name": "u", "user": {"client-certificate": "client.crt", "client-key": "client.key"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    code, _, err = run(
        capsys, "plugin", "--label-node", "--kubeconfig", str(kubeconfig), "--kubelet-dir", str(tmp_path)
    )
    assert (code, err) == (2, f"fakegpu: error: {kubeconfig}: {field} {tmp_path / missing} does not exist\n")


def test_cleanup_says_so_when_nothing_is_left(capsys, tmp_path):
    """``fakegpu cleanup`` on a clean host: one line, exit 0, nothing touched."""
    code, out, err = run(capsys, "cleanup", "--node", "n1", "--skip-api", "--host-root", str(tmp_path))
    assert (code, out, err) == (0, "nothing of fakegpu's left on node n1\n", "")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "flag", "says"),
    [
        (["--pool", "h100.yaml=3:both"], "--pool", "MODE must be one of device-plugin, dra, dra-extended"),
        (["--gpus", "8xh100-80gb", "--mig-mode", "dynamic"], "--mig-mode", "add --gpu-mode dra"),
        (["--delete", "--gpu-mode", "dra"], "--delete", "drop --gpu-mode"),
    ],
)
def test_virtual_nodes_gpu_mode_mistakes_are_one_line_naming_the_flag(capsys, argv, flag, says):
    """Refused before any API server is contacted (no kubeconfig is read: the run would fail otherwise)."""
    code, out, err = run(capsys, "virtual-nodes", "--kubeconfig", "/nonexistent/kubeconfig", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and flag in err and says in err, err


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--status-interval", "0"], "argument --status-interval: must be more than 0 seconds, got '0'"),
        (["--status-interval", "soon"], "argument --status-interval: expected seconds (a number), got 'soon'"),
        (["--namespace", "Driver_NS"], "argument --namespace: 'Driver_NS' is not a namespace name"),
        (["--resource-api-version", "resource.k8s.io/v2"], "argument --resource-api-version: invalid choice"),
    ],
)
def test_compute_domain_controller_refuses_bad_options(capsys, argv, error):
    with pytest.raises(SystemExit) as info:
        main(["compute-domain-controller", *argv])
    assert info.value.code == 2
    assert error in capsys.readouterr().err


def test_compute_domain_controller_names_a_missing_kubeconfig(capsys, tmp_path):
    missing = tmp_path / "nope.yaml"
    code, _, err = run(capsys, "compute-domain-controller", "--kubeconfig", str(missing))
    assert code == 2
    assert str(missing) in err and "fakegpu: error:" in err


def test_deviceclasses_add_the_compute_domain_classes_on_request(capsys):
    _, plain, _ = run(capsys, "deviceclasses", "-o", "json")
    _, with_cd, _ = run(capsys, "deviceclasses", "--compute-domains", "-o", "json")
    names = [c["metadata"]["name"] for c in json.loads(with_cd)["items"]]
    assert names == [
        "gpu.nvidia.com",
        "mig.nvidia.com",
        "vfio.gpu.nvidia.com",
        "compute-domain-daemon.nvidia.com",
        "compute-domain-default-channel.nvidia.com",
    ]
    assert json.loads(with_cd)["items"][:3] == json.loads(plain)["items"]
