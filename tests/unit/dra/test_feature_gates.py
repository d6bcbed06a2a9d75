"""NVIDIA's DRA feature gates: names, defaults, the component-base syntax and the start-up checks.

Follows kubernetes-sigs/dra-driver-nvidia-gpu pkg/featuregates/featuregates.go at v0.4.1 and at commit 0807eed
on main (gates, defaults, ValidateFeatureGates) and k8s.io/component-base featuregate/feature_gate.go (Set:
syntax and error texts)."""

from __future__ import annotations

import pytest

from fakegpu.dra.feature_gates import (
    GATE_EFFECTS,
    KNOWN_GATES,
    FeatureGates,
    gate_lines,
    parse_feature_gates,
    validate_feature_gates,
)


def test_defaults_are_nvidias():
    gates = FeatureGates()
    assert not gates.enabled("TimeSlicingSettings")
    assert not gates.enabled("MPSSupport")
    assert not gates.enabled("DynamicMIG")
    assert gates.enabled("IMEXDaemonsWithDNSNames") and gates.enabled("ComputeDomainCliques")
    with pytest.raises(KeyError):
        gates.enabled("NoSuchGate")


def test_the_charts_value_parses_with_its_trailing_comma():
    # NVIDIA's chart renders featureGates as `Name=value,` for each key (templates/kubeletplugin.yaml).
    gates = parse_feature_gates("MPSSupport=true,TimeSlicingSettings=true,")
    assert gates.enabled("MPSSupport") and gates.enabled("TimeSlicingSettings")
    assert str(gates) == "MPSSupport=true,TimeSlicingSettings=true"
    assert parse_feature_gates(" MPSSupport = T ,DynamicMIG=0").explicit == {"MPSSupport": True, "DynamicMIG": False}
    assert parse_feature_gates("").explicit == {}


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("MPSSupport", "missing bool value for MPSSupport"),
        ("MPSSupport=yes", 'invalid value of MPSSupport=yes, err: strconv.ParseBool: parsing "yes": invalid syntax'),
        ("MpsSupport=true", "unrecognized feature gate: MpsSupport"),
    ],
)
def test_syntax_errors_read_like_component_base(value, error):
    with pytest.raises(ValueError) as err:
        parse_feature_gates(value)
    assert str(err.value) == error


def test_all_alpha_sets_every_alpha_gate_not_set_explicitly():
    gates = parse_feature_gates("AllAlpha=true,DynamicMIG=false")
    assert gates.enabled("MPSSupport") and gates.enabled("TimeSlicingSettings")
    assert not gates.enabled("DynamicMIG")
    assert all(gates.enabled(g) == d for g, (d, stage) in KNOWN_GATES.items() if stage == "BETA")


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("DynamicMIG=true,MPSSupport=true", "feature gate DynamicMIG is currently mutually exclusive with MPSSupport"),
        (
            "DynamicMIG=true,PassthroughSupport=true",
            "feature gate DynamicMIG is currently mutually exclusive with PassthroughSupport",
        ),
        ("ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=false", "requires IMEXDaemonsWithDNSNames"),
        ("DeviceMetadata=true", "feature gate DeviceMetadata requires PassthroughSupport to also be enabled"),
    ],
)
def test_start_up_validation(value, error):
    with pytest.raises(ValueError, match="^feature gate validation failed: .*" + error):
        validate_feature_gates(parse_feature_gates(value))


def test_valid_combinations_pass():
    for value in ("", "DynamicMIG=true,TimeSlicingSettings=true", "MPSSupport=true,TimeSlicingSettings=true"):
        validate_feature_gates(parse_feature_gates(value))


# Re-typed from kubernetes-sigs/dra-driver-nvidia-gpu pkg/featuregates/featuregates.go: at v0.4.1 the first nine
# driver gates, on main (commit 0807eed) the rest; NodeAllocatableResources is in main's list at commit bccebfd
# (after ConsumableShares, alpha, off; cmd/gpu-kubelet-plugin/node_allocatable.go there), PerNodeGPUConfig is main's
# later per-node config gate (cmd/gpu-kubelet-plugin/driverconfig.go at commit 14046d0). Name: (default, stage).
NVIDIA_V0_4 = {
    "TimeSlicingSettings": (False, "ALPHA"),
    "MPSSupport": (False, "ALPHA"),
    "IMEXDaemonsWithDNSNames": (True, "BETA"),
    "PassthroughSupport": (False, "ALPHA"),
    "NVMLDeviceHealthCheck": (False, "ALPHA"),
    "DynamicMIG": (False, "ALPHA"),
    "ComputeDomainCliques": (True, "BETA"),
    "CrashOnNVLinkFabricErrors": (True, "BETA"),
    "DeviceMetadata": (False, "ALPHA"),
}
NVIDIA_MAIN = {
    **NVIDIA_V0_4,
    "FabricManagerPartitioning": (False, "ALPHA"),
    "HostManagedIMEXDaemon": (False, "ALPHA"),
    "NodeLocalFabricIPC": (False, "ALPHA"),
    "DRAListTypeAttributes": (False, "ALPHA"),
    "ConsumableShares": (False, "ALPHA"),
    "NodeAllocatableResources": (False, "ALPHA"),
    "PerNodeGPUConfig": (False, "ALPHA"),
}
LOGGING = {
    "ContextualLogging": (True, "BETA"),
    "LoggingAlphaOptions": (False, "ALPHA"),
    "LoggingBetaOptions": (True, "BETA"),
}


def test_every_gate_of_nvidias_list_with_its_stage_and_default_in_nvidias_order():
    assert dict(KNOWN_GATES) == {**NVIDIA_MAIN, **LOGGING}
    assert list(KNOWN_GATES)[: len(NVIDIA_MAIN)] == list(NVIDIA_MAIN)


def test_every_gate_says_what_it_changes_in_one_line():
    assert set(GATE_EFFECTS) == set(KNOWN_GATES)
    assert all(text and "\n" not in text for text in GATE_EFFECTS.values())


def test_gate_lines_name_the_gates_given_with_their_value():
    lines = gate_lines(parse_feature_gates("NVMLDeviceHealthCheck=true,ComputeDomainCliques=false,MPSSupport=false"))
    assert [line.split(":", 1)[0] for line in lines] == [
        "MPSSupport=false (the default)",
        "NVMLDeviceHealthCheck=true",
        "ComputeDomainCliques=false",
    ]
    assert lines[1] == f"NVMLDeviceHealthCheck=true: {GATE_EFFECTS['NVMLDeviceHealthCheck']}"
    # A gate set to false says it is off before what it would do: the line never reads as if it were on.
    assert lines[0] == f"MPSSupport=false (the default): off (on: {GATE_EFFECTS['MPSSupport']})"
    assert lines[2] == f"ComputeDomainCliques=false: off (on: {GATE_EFFECTS['ComputeDomainCliques']})"
    # AllBeta stands for every beta gate it sets.
    assert [line.split("=", 1)[0] for line in gate_lines(parse_feature_gates("AllBeta=false"))] == [
        g for g, (_, stage) in KNOWN_GATES.items() if stage == "BETA"
    ]
    assert gate_lines(FeatureGates()) == []


def test_node_allocatable_resources_is_accepted_without_effect():
    """kubernetes-sigs/dra-driver-nvidia-gpu pkg/featuregates/featuregates.go at commit bccebfd (main): the gate is
    alpha and off, in no ValidateFeatureGates pair; its only check (cmd/gpu-kubelet-plugin/node_allocatable.go:
    overhead flags need the gate) has no flag to check in fakegpu, so any value starts and the gate's line says
    it changes nothing."""
    assert not FeatureGates().enabled("NodeAllocatableResources")
    for value in ("NodeAllocatableResources=true", "NodeAllocatableResources=true,DynamicMIG=true"):
        validate_feature_gates(parse_feature_gates(value))
    (line,) = gate_lines(parse_feature_gates("NodeAllocatableResources=true"))
    assert line.startswith("NodeAllocatableResources=true: ") and line.endswith("accepted without effect")


def test_health_gate_validation_follows_main():
    # Main (0807eed): PassthroughSupport excludes NVMLDeviceHealthCheck; DynamicMIG with it is no longer refused
    # (v0.4.x refused it).
    with pytest.raises(
        ValueError, match="PassthroughSupport is currently mutually exclusive with NVMLDeviceHealthCheck"
    ):
        validate_feature_gates(parse_feature_gates("PassthroughSupport=true,NVMLDeviceHealthCheck=true"))
    validate_feature_gates(parse_feature_gates("DynamicMIG=true,NVMLDeviceHealthCheck=true"))
