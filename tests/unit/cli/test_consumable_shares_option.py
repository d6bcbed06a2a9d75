"""``fakegpu dra --consumable-shares``: NVIDIA's flag and ``CONSUMABLE_SHARES``, checked before the driver starts.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/main.go`` at commit 14046d0 (main): the
``consumable-shares`` flag (env ``CONSUMABLE_SHARES``, default ``disabled``) and ``validateCLIFlags``.
"""

from __future__ import annotations

import argparse
import json

import pytest

from fakegpu.cli.consumable_shares_option import add_consumable_shares_option, consumable_shares
from fakegpu.cli.main import main
from fakegpu.dra.consumable_shares import OFF, ConsumableShares
from fakegpu.dra.feature_gates import FeatureGates, parse_feature_gates

GATE = parse_feature_gates("ConsumableShares=true")


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_consumable_shares_option(parser)
    return parser.parse_args(list(argv))


def test_the_flag_wins_over_the_environment_and_disabled_is_the_default():
    assert consumable_shares(parsed(), {}, FeatureGates()) == OFF
    assert consumable_shares(parsed(), {"CONSUMABLE_SHARES": "memory"}, GATE) == ConsumableShares("memory")
    assert consumable_shares(parsed("--consumable-shares", "3"), {"CONSUMABLE_SHARES": "memory"}, GATE) == (
        ConsumableShares("count", 3)
    )


NEEDS_GATE = "invalid CLI flags: --consumable-shares requires feature gate ConsumableShares to be enabled"
BAD_VALUE = 'invalid CLI flags: invalid value for --consumable-shares: "half" (must be'


@pytest.mark.parametrize(
    ("argv", "env", "error"),
    [
        (["--consumable-shares", "4"], "", NEEDS_GATE),
        ([], "unlimited", NEEDS_GATE),
        (["--feature-gates", "ConsumableShares=true", "--consumable-shares", "half"], "", BAD_VALUE),
    ],
)
def test_a_bad_setting_stops_the_driver_before_it_serves(capsys, monkeypatch, tmp_path, argv, env, error):
    if env:
        monkeypatch.setenv("CONSUMABLE_SHARES", env)
    else:
        monkeypatch.delenv("CONSUMABLE_SHARES", raising=False)
    monkeypatch.delenv("FEATURE_GATES", raising=False)
    code = main(["dra", "--gpus", "1xh100-80gb", "--kubelet-dir", str(tmp_path), *argv])
    _, err = capsys.readouterr()
    assert code == 2 and error in err
    assert list(tmp_path.iterdir()) == [], "nothing is created before the flags pass"


def test_slices_prints_the_shared_devices(capsys, monkeypatch):
    """``fakegpu slices`` takes the flag as ``fakegpu dra`` does and prints the ConsumableShares gate's line."""
    monkeypatch.delenv("CONSUMABLE_SHARES", raising=False)
    argv = ["slices", "--gpus", "1xh100-80gb", "-o", "json", "--feature-gates", "ConsumableShares=true"]
    assert main([*argv, "--consumable-shares", "unlimited"]) == 0
    out, err = capsys.readouterr()
    (device,) = json.loads(out)["items"][0]["spec"]["devices"]
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"]["memory"]["requestPolicy"]["default"] == "0"
    assert "ConsumableShares=true: admits --consumable-shares" in err
    assert main(argv) == 0  # the gate alone changes nothing, as with NVIDIA
    (device,) = json.loads(capsys.readouterr()[0])["items"][0]["spec"]["devices"]
    assert "allowMultipleAllocations" not in device
