"""NVIDIA's DRA feature gates: names, defaults, the component-base syntax and the start-up checks.

Follows kubernetes-sigs/dra-driver-nvidia-gpu pkg/featuregates/featuregates.go (gates, defaults,
ValidateFeatureGates) and k8s.io/component-base featuregate/feature_gate.go (Set: syntax and error texts)."""

from __future__ import annotations

import pytest

from fakegpu.dra.feature_gates import KNOWN_GATES, FeatureGates, parse_feature_gates, validate_feature_gates


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
