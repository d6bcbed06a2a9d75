"""The NVIDIA device plugin configs in deploy/ load with fakegpu's own loader (as NVIDIA reads them) and give
the documented resources on the hardware the device-plugin DaemonSet describes, selected the way the
running plugin selects them (node label, then fallbacks)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from fakegpu.cli.inventory_options import inventory_inputs
from fakegpu.cli.node_options import node_settings
from fakegpu.fakeplugin.node_sync import ConfigSelection
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.nvidia_config import load_nvidia_config
from tests.deploy.manifests import (
    EXAMPLES,
    container_env,
    fakegpu_argv,
    load_docs,
    one,
    only_container,
    parse_cli,
    render,
    resource_counts,
    write_config_dir,
)

NODE = "fakegpu-worker"
CONFIG_MAP = "fakegpu-device-plugin-configs"

# What each named config advertises on the DaemonSet's node (2x H100 80GB, MIG layout all-1g.10gb):
# (resource counts, sharing strategy of nvidia.com/gpu or None). deploy/README.md quotes these numbers.
EXPECTED: dict[str, tuple[dict[str, int], str | None]] = {
    "default": ({"nvidia.com/gpu": 2}, "none"),
    "time-slicing-4": ({"nvidia.com/gpu": 8}, "time-slicing"),
    "mps-2": ({"nvidia.com/gpu": 4}, "mps"),
    "mig-single": ({"nvidia.com/gpu": 14}, "none"),
    "mig-mixed": ({"nvidia.com/mig-1g.10gb": 14}, None),
}
EXAMPLE_CONFIGS = sorted((EXAMPLES / "configs").glob("*.yaml"))


def named_configs() -> dict[str, str]:
    data: dict[str, str] = one(render("device-plugin"), "ConfigMap", CONFIG_MAP)["data"]
    return data


def plugin_inputs(config_dir: Path) -> tuple[InventoryInputs, ConfigSelection]:
    """The DaemonSet's container as the plugin sees it on NODE: parsed args, env, and its config selection
    with ``config_dir`` standing in for the ConfigMap mount."""
    container = only_container(one(render("device-plugin"), "DaemonSet", "fakegpu-device-plugin"))
    args = parse_cli(fakegpu_argv(container))
    env = container_env(container, NODE)
    args.config_dir = config_dir
    settings = node_settings(args, env)
    assert settings.selection is not None, "the DaemonSet should select its config by node label"
    return inventory_inputs(args, env), settings.selection


def test_named_configs_are_the_documented_set() -> None:
    assert sorted(named_configs()) == sorted(EXPECTED)


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_named_config_loads_without_warnings(key: str, tmp_path: Path) -> None:
    path = tmp_path / key
    path.write_text(named_configs()[key])
    config, warnings = load_nvidia_config(str(path))
    # Unknown keys are warnings, not errors (NVIDIA ignores them silently): a typo must fail here.
    assert warnings == []
    assert config.version == "v1"


@pytest.mark.parametrize("label", ["", *sorted(EXPECTED)])
def test_node_label_selects_config_with_expected_resources(label: str, tmp_path: Path) -> None:
    inputs, selection = plugin_inputs(write_config_dir(named_configs(), tmp_path / "available-configs"))
    chosen, described = selection.inputs_for(inputs, label)
    name = label or "default"  # no label: fallback "named" picks the config called default
    assert described == f"config {name}"
    inventory = load_inventory(chosen)
    counts, sharing = EXPECTED[name]
    assert resource_counts(inventory) == counts
    assert list(inventory.warnings) == []
    gpu = inventory.resource("nvidia.com/gpu")
    assert (gpu.sharing if gpu else None) == sharing


def test_time_slicing_shares_each_physical_gpu_four_ways(tmp_path: Path) -> None:
    inputs, selection = plugin_inputs(write_config_dir(named_configs(), tmp_path / "available-configs"))
    chosen, _ = selection.inputs_for(inputs, "time-slicing-4")
    gpu = load_inventory(chosen).resource("nvidia.com/gpu")
    assert gpu is not None
    per_parent: dict[str, int] = {}
    for device in gpu.devices:
        per_parent[device.parent] = per_parent.get(device.parent, 0) + 1
    assert sorted(per_parent.values()) == [4, 4]


def test_example_configmaps_exist() -> None:
    names = sorted(p.stem for p in EXAMPLE_CONFIGS)
    assert names == ["mig-mixed", "mig-single", "mps", "time-slicing"]


@pytest.mark.parametrize("path", EXAMPLE_CONFIGS, ids=lambda p: p.stem)
def test_example_configmap_loads_and_matches_the_named_config(path: Path, tmp_path: Path) -> None:
    (cm,) = load_docs(path)
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["namespace"] == "fakegpu"
    data: dict[str, str] = cm["data"]
    assert len(data) == 1, "one config per example, so the fallback 'single' can pick it"
    ((key, text),) = data.items()
    config_file = tmp_path / key
    config_file.write_text(text)
    _, warnings = load_nvidia_config(str(config_file))
    assert warnings == []
    # The same config under the same name as in the DaemonSet's set, so labels mean the same everywhere.
    assert yaml.safe_load(text) == yaml.safe_load(named_configs()[key])


@pytest.mark.parametrize("path", EXAMPLE_CONFIGS, ids=lambda p: p.stem)
def test_example_configmap_alone_is_picked_for_an_unlabelled_node(path: Path, tmp_path: Path) -> None:
    """deploy/README.md: point the DaemonSet's config volume at one example and unlabelled nodes use it."""
    (cm,) = load_docs(path)
    inputs, selection = plugin_inputs(write_config_dir(cm["data"], tmp_path / "available-configs"))
    chosen, _ = selection.inputs_for(inputs, "")
    ((key, _),) = cm["data"].items()
    assert resource_counts(load_inventory(chosen)) == EXPECTED[key][0]


def test_mps_needs_the_daemonsets_mps_root(tmp_path: Path) -> None:
    """mps-2 works only because the DaemonSet sets MPS_ROOT; without it the plugin refuses the config."""
    inputs, selection = plugin_inputs(write_config_dir(named_configs(), tmp_path / "available-configs"))
    chosen, _ = selection.inputs_for(inputs, "mps-2")
    assert chosen.env.get("MPS_ROOT")
    without = dataclasses.replace(chosen, env={k: v for k, v in chosen.env.items() if k != "MPS_ROOT"})
    with pytest.raises(SpecError, match="mps-root"):
        load_inventory(without)
