"""MIG profiles with attribute suffixes (``+me``, ``+me.all``, ``+gfx``, ``-me``) through every face.

The board that has all of them is the RTX PRO 6000 Blackwell Server Edition (NVIDIA's MIG user guide,
supported-mig-profiles.html, driver 580; the catalog's numbers are a real ``nvidia-smi mig -lgip`` of it).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakegpu.dra.resource_slices import SliceOptions, build_slice_specs
from fakegpu.sharing.catalog import CATALOG
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import load_inventory
from fakegpu.sharing.mig_parted import choose_generated, generated_layout_names
from fakegpu.sharing.plugin_config import ResourcePatternRule
from tests.inventory_builders import counts, inputs, inventory, labels

RTX = CATALOG["rtx-pro-6000"]
SUFFIXED = {
    "1g.24gb+me": "1g.24gb.me",
    "1g.24gb+gfx": "1g.24gb.gfx",
    "1g.24gb+me.all": "1g.24gb.me.all",
    "1g.24gb-me": "1g.24gb-me",
    "2g.48gb+gfx": "2g.48gb.gfx",
    "2g.48gb+me.all": "2g.48gb.me.all",
    "2g.48gb-me": "2g.48gb-me",
    "4g.96gb+gfx": "4g.96gb.gfx",
}
"""Profile -> its part of NVIDIA's resource name: ``+`` becomes ``.``, ``-me`` stays."""

ONE_OF_EACH_1G = {
    "model": "rtx-pro-6000",
    "migEnabled": True,
    "migDevices": [
        {"profile": "1g.24gb", "start": 0},
        {"profile": "1g.24gb-me", "start": 3},
        {"profile": "1g.24gb+gfx", "start": 6},
        {"profile": "1g.24gb+me", "start": 9},
    ],
}
"""Four 1g instances on one GPU whose profiles all begin with ``1g.24gb``: the case #1807 is about."""


def test_the_board_has_every_suffix_profile_nvidia_lists() -> None:
    assert {p.name for p in RTX.mig_profiles} == {"1g.24gb", "2g.48gb", "4g.96gb", *SUFFIXED}
    assert {p.name: p.gi_profile for p in RTX.mig_profiles if p.name in SUFFIXED} == {
        "1g.24gb+me": "1_SLICE_REV1",
        "1g.24gb+gfx": "1_SLICE_GFX",
        "1g.24gb+me.all": "1_SLICE_ALL_ME",
        "1g.24gb-me": "1_SLICE_NO_ME",
        "2g.48gb+gfx": "2_SLICE_GFX",
        "2g.48gb+me.all": "2_SLICE_ALL_ME",
        "2g.48gb-me": "2_SLICE_NO_ME",
        "4g.96gb+gfx": "4_SLICE_GFX",
    }


@pytest.mark.parametrize(("profile", "resource"), sorted(SUFFIXED.items()))
def test_mixed_strategy_exposes_each_suffix_as_its_own_resource(tmp_path: Path, profile: str, resource: str) -> None:
    """Follows NVIDIA/k8s-device-plugin internal/rm/rm.go (AddDefaultResourcesToConfig: one resource per
    profile, ``mig-<profile>`` with ``+`` -> ``.``) and api/config/v1/resources.go (#1807) @ v0.20.0."""
    layout = "all-" + resource
    inv = inventory(tmp_path, "2xrtx-pro-6000", layout=layout, cli={"mig_strategy": "mixed"})
    per_gpu = choose_generated(layout, [RTX, RTX])[0].counts
    assert counts(inv) == {f"nvidia.com/mig-{resource}": 2 * sum(n for _, n in per_gpu)}


def test_profiles_sharing_a_prefix_stay_separate_resources(tmp_path: Path) -> None:
    """Follows NVIDIA/k8s-device-plugin api/config/v1/resources.go @ v0.20.0 (#1807): before the anchoring,
    the default pattern ``1g.24gb`` also matched ``1g.24gb-me`` and ``1g.24gb+...`` and swallowed them."""
    inv = inventory(tmp_path, node_spec={"gpus": [ONE_OF_EACH_1G]}, cli={"mig_strategy": "mixed"})
    assert counts(inv) == {
        "nvidia.com/mig-1g.24gb": 1,
        "nvidia.com/mig-1g.24gb-me": 1,
        "nvidia.com/mig-1g.24gb.gfx": 1,
        "nvidia.com/mig-1g.24gb.me": 1,
    }


@pytest.mark.parametrize(
    ("pattern", "value", "matches"),
    [
        ("1g.24gb", "1g.24gb", True),
        ("1g.24gb", "1g.24gb-me", False),
        ("1g.24gb", "1g.24gb+me.all", False),
        ("1g.24gb", "1g.24gb+gfx", False),
        ("1g.24gb", "x1g.24gb", False),
        ("1g.24gb-me", "1g.24gb-me", True),
        ("1g.24gb+me.all", "1g.24gb+me.all", True),
        ("1g.24gb+me", "1g.24gb+me.all", False),
        ("1g.24gb*", "1g.24gb+me.all", True),
        ("*", "4g.96gb+gfx", True),
        ("1g.24gb", "1gX24gb", False),
    ],
)
def test_resource_patterns_are_anchored(pattern: str, value: str, matches: bool) -> None:
    """Follows NVIDIA/k8s-device-plugin api/config/v1/resources.go and resources_test.go @ v0.20.0
    (wildCardToRegexp gained ``^``/``$``, #1807); ``.`` and ``+`` in a pattern are literal."""
    assert ResourcePatternRule(pattern, "nvidia.com/x").matches(value) is matches


def test_a_custom_pattern_no_longer_swallows_suffixed_profiles(tmp_path: Path) -> None:
    """Follows NVIDIA/k8s-device-plugin internal/rm/device_map.go @ v0.20.0: with the patterns honoured
    (fakegpu's --experimental-honor-resources), a ``1g.24gb`` rule leaves ``1g.24gb-me`` unmatched, which
    NVIDIA refuses at start with its text."""
    config: dict[str, Any] = {
        "version": "v1",
        "resources": {"mig": [{"pattern": "1g.24gb", "name": "mig-small"}, {"pattern": "1g.24gb+*", "name": "mig-x"}]},
    }

    def honoured() -> dict[str, int]:
        given = inputs(tmp_path, node_spec={"gpus": [ONE_OF_EACH_1G]}, config=config, cli={"mig_strategy": "mixed"})
        return counts(load_inventory(dataclasses.replace(given, honor_custom_resources=True)))

    with pytest.raises(SpecError, match=re.escape("MIG profile '1g.24gb-me' does not match any resource patterns")):
        honoured()
    config["resources"]["mig"].append({"pattern": "*-me", "name": "mig-nome"})
    assert honoured() == {"nvidia.com/mig-small": 1, "nvidia.com/mig-x": 2, "nvidia.com/mig-nome": 1}


def test_gfd_labels_for_suffix_resources(tmp_path: Path) -> None:
    """Follows NVIDIA/k8s-device-plugin internal/lm/resource.go and internal/lm/mig-strategy.go @ v0.20.0:
    mixed strategy labels each resource by its name, engines as the profile has them."""
    got = labels(tmp_path, node_spec={"gpus": [ONE_OF_EACH_1G]}, cli={"mig_strategy": "mixed"})
    assert got["nvidia.com/mig-1g.24gb-me.count"] == "1"
    assert got["nvidia.com/mig-1g.24gb-me.engines.decoder"] == "0"
    assert got["nvidia.com/mig-1g.24gb.gfx.count"] == "1"
    assert got["nvidia.com/mig-1g.24gb.me.engines.ofa"] == "1"
    assert got["nvidia.com/mig-1g.24gb.engines.ofa"] == "0"
    assert got["nvidia.com/mig-1g.24gb.memory"] == "24192"
    assert not [k for k in got if "+" in k or "+" in got[k]]


def test_dra_device_names_compact_suffixes_as_nvidia_does(tmp_path: Path) -> None:
    """Follows kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/mig.go @ 0545e9e
    (MigSpecTuple.ToCanonicalName): the profile loses its dots, then toRFC1123Compliant turns ``+`` into
    ``-``; ``+me`` and ``-me`` compact alike and only the GI profile ID (21 vs 67) tells them apart."""
    node = inventory(tmp_path, node_spec={"gpus": [{"model": "rtx-pro-6000", "migEnabled": True}]}).node
    opts = SliceOptions(mig_mode="dynamic", server_minor=36, api_version="resource.k8s.io/v1")
    specs = build_slice_specs(node, opts, {})
    names = {d["name"] for spec in specs for d in spec.get("devices", [])}
    for name in (
        "gpu-0-mig-1g24gb-14-0",
        "gpu-0-mig-1g24gb-me-21-9",
        "gpu-0-mig-1g24gb-me-67-3",
        "gpu-0-mig-1g24gb-gfx-47-6",
        "gpu-0-mig-1g24gb-meall-65-0",
        "gpu-0-mig-2g48gb-meall-64-6",
        "gpu-0-mig-2g48gb-me-66-0",
        "gpu-0-mig-4g96gb-gfx-32-0",
    ):
        assert name in names
    per_profile = Counter(m.group(1) for n in names if (m := re.fullmatch(r"gpu-0-mig-(.+-\d+)-\d+", n)))
    assert per_profile["1g24gb-me-21"] == 4 and per_profile["1g24gb-me-67"] == 4
    assert per_profile["4g96gb-gfx-32"] == 1


def test_mig_parted_names_suffix_layouts_with_dots() -> None:
    """Follows NVIDIA/mig-parted's shipped config for 0x2BB510DE (``all-1g.24gb.gfx`` holds
    ``1g.24gb+gfx: 4``, ``all-1g.24gb-me`` holds ``1g.24gb-me: 4``); fakegpu's own ``+`` spelling still works."""
    names = generated_layout_names([RTX])
    for layout in ("all-1g.24gb.me", "all-1g.24gb.gfx", "all-1g.24gb.me.all", "all-1g.24gb-me", "all-4g.96gb.gfx"):
        assert layout in names
    assert not [n for n in names if "+" in n]
    assert choose_generated("all-1g.24gb.gfx", [RTX])[0].counts == (("1g.24gb+gfx", 4),)
    assert choose_generated("all-1g.24gb-me", [RTX])[0].counts == (("1g.24gb-me", 4),)
    assert choose_generated("all-1g.24gb+me.all", [RTX])[0].counts == (("1g.24gb+me.all", 1),)
    assert choose_generated("all-1g.24gb.me.all", [RTX])[0].counts == (("1g.24gb+me.all", 1),)
    assert choose_generated("all-balanced", [RTX])[0].counts == (("1g.24gb", 2), ("2g.48gb", 1))
    with pytest.raises(SpecError, match=re.escape("unknown MIG layout 'all-1g.24gb.nope'")):
        choose_generated("all-1g.24gb.nope", [RTX])


def test_a_mig_parted_file_with_suffix_profiles(tmp_path: Path) -> None:
    """A mig-parted config as NVIDIA/mig-parted ships for 0x2BB510DE (layouts re-typed here): suffixed
    profiles are mig-devices keys as nvidia-smi names them, and the plugin then serves each as its own
    resource (NVIDIA/k8s-device-plugin internal/rm/rm.go @ v0.20.0)."""
    parted = {
        "version": "v1",
        "mig-configs": {
            "all-1g.24gb.me.all": [
                {
                    "device-filter": ["0x2BB510DE"],
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": {"1g.24gb+me.all": 1, "1g.24gb-me": 3},
                },
            ],
        },
    }
    config_file = tmp_path / "mig-parted.yaml"
    config_file.write_text(yaml.safe_dump(parted))
    given = inputs(tmp_path, "2xrtx-pro-6000", layout="all-1g.24gb.me.all", cli={"mig_strategy": "mixed"})
    got = counts(load_inventory(dataclasses.replace(given, mig_config=str(config_file))))
    assert got == {"nvidia.com/mig-1g.24gb.me.all": 2, "nvidia.com/mig-1g.24gb-me": 6}
