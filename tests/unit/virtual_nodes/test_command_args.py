"""The ``virtual-nodes`` subcommand's flags, as the lead wires them into ``fakegpu``."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.cli.virtual_nodes_command import run_virtual_nodes, settings_from_args
from fakegpu.dra.feature_gates import FeatureGates, parse_feature_gates
from fakegpu.dra.resource_slices import SliceOptions
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.expansion import build_inventory
from fakegpu.sharing.inputs import InventoryInputs, load_config, load_node
from fakegpu.sharing.labels import gfd_labels
from fakegpu.virtual_nodes.pools import VirtualNode
from fakegpu.virtual_nodes.slice_template import direct_specs


def test_defaults(parse):
    args = parse()
    assert args.command == "virtual-nodes"
    assert (args.count, args.pool, args.name_prefix, args.concurrency) == (None, [], "fakegpu-virtual-", 16)
    assert (args.watch, args.delete, args.server_version, args.kubeconfig) == (False, False, None, None)
    settings = settings_from_args(args)
    assert settings.shape.resources() == {"cpu": "32", "memory": "256Gi", "pods": "110"}
    assert (settings.driver, settings.mig_mode, settings.api_version) == ("gpu.nvidia.com", "static", None)


def test_inventory_slice_and_version_options_are_there(parse):
    args = parse(
        "--gpus", "4xa100-40gb", "--mig-layout", "all-1g.5gb", "--mig-strategy", "mixed", "--mig-mode", "dynamic",
        "--driver-name", "gpu.example.com", "--server-version", "1.35", "--resource-api-version",
        "resource.k8s.io/v1beta2", "--pool", "a.yaml=3", "--pool", "b.yaml=1",
    )  # fmt: skip
    assert args.gpus == ["4xa100-40gb"] and args.mig_strategy == "mixed" and args.pool == ["a.yaml=3", "b.yaml=1"]
    settings = settings_from_args(args)
    assert (settings.mig_mode, settings.driver, settings.server_minor) == ("dynamic", "gpu.example.com", 35)
    assert settings.api_version == "resource.k8s.io/v1beta2"


def test_watch_and_delete_exclude_each_other(parse, capsys):
    with pytest.raises(SystemExit):
        parse("--watch", "--delete")
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--concurrency", "0"], "--concurrency"),
        (["--watch", "--resync-interval", "0"], "--resync-interval"),
        (["--watch", "--resync-interval", "-3"], "--resync-interval"),
        (["--watch", "--resync-interval", "nan"], "--resync-interval"),
        (["--watch", "--resync-interval", "inf"], "--resync-interval"),
        (["--resync-interval", "5"], "--resync-interval"),  # without --watch it would do nothing
        (["--driver-name", "Not_A_DNS_Name"], "--driver-name"),
        (["--node-pods", "1.5"], "--node-pods"),  # pods is an integer resource to the API server
        (["--node-pods", "500m"], "--node-pods"),
        (["--delete", "--name-prefix", ""], "--name-prefix"),  # would select every virtual node
        (["--delete", "--count", "3"], "--delete"),
        (["--delete", "--gpus", "1xt4"], "--delete"),
        (["--delete", "--pool", "a.yaml=2"], "--delete"),
        (["--delete", "--gpu-mode", "dra"], "--delete"),  # removes the nodes of every mode
    ],
)
def test_bad_values_name_their_flag(parse, flags, named):
    with pytest.raises(SpecError) as info:
        settings_from_args(parse(*flags))
    assert info.value.source == named


def test_good_watch_and_pod_values_pass(parse):
    settings = settings_from_args(parse("--watch", "--resync-interval", "0.5", "--node-pods", "1k"))
    assert settings.shape.pods == "1k"
    assert settings_from_args(parse("--delete", "--name-prefix", "team2-")).name_prefix == "team2-"


def one_line_naming(exc: SpecError, path: Path) -> bool:
    text = str(exc)
    return "\n" not in text and str(path) in text


async def test_a_missing_or_broken_kubeconfig_is_one_line_naming_the_file(parse, tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(SpecError) as info:
        await run_virtual_nodes(parse("--kubeconfig", str(missing)))
    assert one_line_naming(info.value, missing) and "not found" in str(info.value)
    broken = tmp_path / "broken.yaml"
    broken.write_text("just a string\n")
    with pytest.raises(SpecError, match="not a usable kubeconfig") as info:
        await run_virtual_nodes(parse("--kubeconfig", str(broken)))
    assert one_line_naming(info.value, broken)


async def test_a_kubeconfig_that_is_not_yaml_is_one_line_naming_the_file(parse, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("clusters: [\n  - {name: a\nusers: ]\n")
    with pytest.raises(SpecError, match="not valid YAML") as info:
        await run_virtual_nodes(parse("--kubeconfig", str(bad)))
    assert one_line_naming(info.value, bad)


def test_gpu_mode_flag_takes_the_three_modes_and_nothing_else(parse, capsys):
    assert parse().gpu_mode is None  # resolved to device-plugin per pool, so --delete can tell it was given
    for mode in ("device-plugin", "dra", "dra-extended"):
        assert parse("--gpu-mode", mode).gpu_mode == mode
    with pytest.raises(SystemExit):
        parse("--gpu-mode", "both")
    assert "invalid choice: 'both'" in capsys.readouterr().err


def test_the_help_says_what_each_gpu_mode_does(parse, capsys):
    with pytest.raises(SystemExit):
        parse("--help")
    text = " ".join(capsys.readouterr().out.split())
    assert "--gpu-mode {device-plugin,dra,dra-extended}" in text
    assert "device-plugin (default): nvidia.com/gpu" in text and "dra: ResourceSlices, no GPU capacity" in text
    assert "a real node runs one of the two" in text and "extendedResourceName" in text
    assert "FILE=COUNT[:MODE]" in text


def test_feature_gates_are_checked_and_the_health_gate_taints_node_spec_xids(parse, tmp_path, monkeypatch):
    """``virtual-nodes --feature-gates``: checked as NVIDIA's driver checks them (kubernetes-sigs/
    dra-driver-nvidia-gpu pkg/featuregates/featuregates.go at commit 0807eed); with NVMLDeviceHealthCheck a
    node spec's XID taints its device as the driver would (cmd/gpu-kubelet-plugin/device_health.go, bc3c4d8)."""
    monkeypatch.delenv("FEATURE_GATES", raising=False)
    assert settings_from_args(parse()).feature_gates == FeatureGates()
    settings = settings_from_args(parse("--feature-gates", "NVMLDeviceHealthCheck=true"))
    assert settings.feature_gates.enabled("NVMLDeviceHealthCheck")
    with pytest.raises(
        ValueError, match="PassthroughSupport is currently mutually exclusive with NVMLDeviceHealthCheck"
    ):
        settings_from_args(parse("--feature-gates", "NVMLDeviceHealthCheck=true,PassthroughSupport=true"))
    spec = tmp_path / "node.yaml"
    spec.write_text("gpus:\n- model: a100-40gb\n- model: a100-40gb\n  xid: 79\n")
    inputs = InventoryInputs(node_name="vn-0000", node_spec=str(spec))
    node, config = load_node(inputs), load_config(inputs)
    virtual = VirtualNode("vn-0000", "p", build_inventory(node, config), gfd_labels(node, config), mode="dra")
    for gate, want in ((False, None), (True, [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}])):
        gates = parse_feature_gates(f"NVMLDeviceHealthCheck={str(gate).lower()}")
        specs = direct_specs(virtual, SliceOptions(feature_gates=gates))
        devices = {d["name"]: d.get("taints") for s in specs for d in s.get("devices", [])}
        assert devices == {"gpu-0": None, "gpu-1": want}


def test_feature_gates_come_from_the_environment_when_no_flag_says(parse, monkeypatch):
    """As ``fakegpu dra`` and ``fakegpu slices`` (and NVIDIA's chart, which sets ``FEATURE_GATES``;
    kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/main.go at commit 0807eed): the flag wins."""
    monkeypatch.setenv("FEATURE_GATES", "FabricManagerPartitioning=true")
    assert settings_from_args(parse()).feature_gates.enabled("FabricManagerPartitioning")
    assert not settings_from_args(parse("--feature-gates", "")).feature_gates.enabled("FabricManagerPartitioning")
    monkeypatch.setenv("FEATURE_GATES", "NoSuchGate=true")
    with pytest.raises(ValueError, match="FEATURE_GATES: unrecognized feature gate: NoSuchGate"):
        settings_from_args(parse())
