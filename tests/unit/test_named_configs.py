"""Per-node config selection follows NVIDIA's config-manager rules and says why a choice fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.named_configs import available_configs, choose_config, parse_fallback_strategies


def configs(tmp_path: Path, *names: str) -> Path:
    for name in names:
        (tmp_path / name).write_text("version: v1\n")
    return tmp_path


def test_a_mounted_configmap_lists_its_keys_not_its_bookkeeping(tmp_path):
    # A ConfigMap volume holds ..data and a timestamped dir next to one symlink per key.
    data = tmp_path / "..2026_11_29_12_00_00.1"
    data.mkdir()
    (data / "a100").write_text("version: v1\n")
    (tmp_path / "..data").symlink_to(data.name)
    (tmp_path / "a100").symlink_to("..data/a100")
    (tmp_path / "subdir").mkdir()
    assert available_configs(tmp_path) == ["a100"]


def test_the_label_names_the_config(tmp_path):
    choice = choose_config("ts4", configs(tmp_path, "default", "ts4"))
    assert (choice.name, choice.path) == ("ts4", str(tmp_path / "ts4"))


def test_a_label_naming_no_config_is_refused_with_the_choices(tmp_path):
    with pytest.raises(SpecError) as err:
        choose_config("missing", configs(tmp_path, "default", "ts4"))
    assert str(err.value) == (
        "node label nvidia.com/device-plugin.config: specified config missing does not exist (available: default, ts4)"
    )


def test_no_label_takes_the_default_config_first(tmp_path):
    assert choose_config("", configs(tmp_path, "default", "ts4"), default_config="ts4").name == "ts4"
    with pytest.raises(SpecError, match=r"^--default-config: specified config nope does not exist"):
        choose_config("", tmp_path, default_config="nope")


@pytest.mark.parametrize(
    ("names", "fallbacks", "expected"),
    [
        (("default", "ts4"), ("named", "single"), "default"),
        (("ts4",), ("named", "single"), "ts4"),
        (("ts4",), ("single", "named"), "ts4"),
        (("ts4", "mps"), ("named", "single", "empty"), ""),
    ],
)
def test_fallbacks_apply_in_order(tmp_path, names, fallbacks, expected):
    choice = choose_config("", configs(tmp_path, *names), fallbacks=fallbacks)
    assert choice.name == expected
    if not expected:
        assert choice.path == os.devnull
        assert choice.describe == "the empty config"


def test_when_every_fallback_fails_the_error_lists_them(tmp_path):
    with pytest.raises(SpecError, match="all fallbacks failed \\(fallbacks: named,single; available: mps, ts4\\)"):
        choose_config("", configs(tmp_path, "ts4", "mps"), fallbacks=("named", "single"))


def test_an_empty_or_missing_directory_is_an_error(tmp_path):
    with pytest.raises(SpecError, match="no configuration files available"):
        choose_config("x", tmp_path)
    with pytest.raises(SpecError, match="error reading directory"):
        choose_config("x", tmp_path / "absent")


def test_fallback_strategies_parse_and_reject_unknown_names():
    assert parse_fallback_strategies("named, single,,empty") == ("named", "single", "empty")
    assert parse_fallback_strategies("") == ()
    with pytest.raises(SpecError, match=r"^FALLBACK_STRATEGIES: unknown fallback strategy: first"):
        parse_fallback_strategies("named,first", "FALLBACK_STRATEGIES")
