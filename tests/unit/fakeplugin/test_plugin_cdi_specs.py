"""The device plugin's CDI specs resolve every device name Allocate returns, for every CDI strategy.

Follows NVIDIA/k8s-device-plugin v0.20.0: ``internal/cdi/cdi.go`` (``CreateSpecFile``: one spec per class,
``k8s.device-plugin.nvidia.com-<class>.json`` in /var/run/cdi; ``AdditionalDevices``),
``internal/plugin/server.go`` (``updateResponseForCDI``: the names Allocate returns) and nvcdi's specs
(NVIDIA/nvidia-container-toolkit ``pkg/nvcdi``: common ``NVIDIA_VISIBLE_DEVICES=void``, the device ``all``).
Names are resolved as a CDI runtime does (``tests/cdi_runtime.py``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from fakegpu.fakeplugin.allocate_response import container_allocate_response, control_device_paths, device_paths
from fakegpu.fakeplugin.plugin_cdi_specs import PluginCdiSpecs, plugin_specs
from fakegpu.runtime.cdi_spec_model import validate_spec
from fakegpu.sharing.inputs import load_inventory
from fakegpu.sharing.inventory import Device, Inventory
from fakegpu.sharing.live_inventory import LiveInventory
from tests.cdi_runtime import UnresolvableDevice, load_specs, resolve
from tests.inventory_builders import inputs, inventory, mps, time_slicing

CDI = "k8s.device-plugin.nvidia.com"
VM = "/var/run/nvidia-container-devices"

STRATEGIES = [
    "cdi-cri",
    "cdi-annotations",
    "envvar,cdi-cri",
    "cdi-annotations,cdi-cri",
    "volume-mounts,cdi-annotations",
]
# (GPUs, MIG layout, config, extra CLI flags): plain GPUs, time-slicing replicas, MPS replicas, MIG mixed and
# single, and replicas of MIG devices.
SHARING: dict[str, tuple[str, str | None, dict[str, Any] | None, dict[str, Any]]] = {
    "none": ("2xh100-80gb", None, None, {}),
    "replicas": ("2xh100-80gb", None, time_slicing(3), {}),
    "mps": ("2xh100-80gb", None, mps(2), {}),
    "mig-mixed": ("2xh100-80gb", "all-3g.40gb", None, {"mig_strategy": "mixed"}),
    "mig-single": ("2xa100-40gb", "all-1g.5gb", None, {"mig_strategy": "single"}),
    "mig-replicas": (
        "1xh100-80gb",
        "all-3g.40gb",
        time_slicing(2, "nvidia.com/mig-3g.40gb"),
        {"mig_strategy": "mixed"},
    ),
}


def names_of(response: Any) -> list[str]:
    """The CDI device names a runtime gets: the CRI field, or the value of the CDI annotation."""
    if response.cdi_devices:
        return [c.name for c in response.cdi_devices]
    (value,) = response.annotations.values()
    return str(value).split(",")


def setup(tmp_path: Path, sharing: str, strategies: str, id_strategy: str, **cli: Any) -> tuple[Inventory, Path]:
    gpus, layout, config, extra = SHARING[sharing]
    flags = {"device_list_strategy": strategies, "device_id_strategy": id_strategy, **extra, **cli}
    inv = inventory(tmp_path, gpus, layout=layout, config=config, cli=flags)
    root = tmp_path / "cdi"
    PluginCdiSpecs(root).update(inv)
    return inv, root


def shown_id(device: Device, id_strategy: str) -> str:
    return device.index_id if id_strategy == "index" else device.base_id.split("::", 1)[0]


@pytest.mark.parametrize("id_strategy", ["uuid", "index"])
@pytest.mark.parametrize("sharing", list(SHARING))
@pytest.mark.parametrize("strategies", STRATEGIES)
def test_every_device_allocate_names_resolves(tmp_path, strategies, sharing, id_strategy):
    inv, root = setup(tmp_path, sharing, strategies, id_strategy)
    assert os.listdir(root) == [f"{CDI}-gpu.json"]
    assert inv.resources and all(r.devices for r in inv.resources)
    for resource in inv.resources:
        for device in resource.devices:
            response = container_allocate_response(inv, resource, [device.id])
            names = names_of(response)
            assert names == [f"{CDI}/gpu={shown_id(device, id_strategy)}"]
            edits = resolve(root, names)
            assert edits.env == {"NVIDIA_VISIBLE_DEVICES": "void"}
            assert edits.mount_targets == [f"{VM}/{shown_id(device, id_strategy)}"]
        # Several devices of a resource at once (two replicas of one GPU name it twice in NVIDIA's
        # terms; fakegpu names it once): every name resolves and each device is mounted once.
        ids = [d.id for d in resource.devices[:3]]
        if resource.fail_requests_greater_than_one:
            continue
        edits = resolve(root, names_of(container_allocate_response(inv, resource, ids)))
        wanted = list(dict.fromkeys(f"{VM}/{shown_id(d, id_strategy)}" for d in resource.devices[:3]))
        assert edits.mount_targets == wanted


@pytest.mark.parametrize("strategies", ["envvar", "volume-mounts", "envvar,volume-mounts"])
def test_no_spec_without_a_cdi_strategy(tmp_path, strategies):
    """``cdi.New`` returns the null handler unless ``AnyCDIEnabled``."""
    inv = inventory(tmp_path, "1xh100-80gb", cli={"device_list_strategy": strategies})
    assert plugin_specs(inv) == {}
    assert PluginCdiSpecs(tmp_path / "cdi").update(inv) == []
    assert not (tmp_path / "cdi").exists()


def test_the_spec_is_nvidia_shaped(tmp_path):
    """nvcdi's spec: a device per GPU, no merged ``all`` (the plugin sets no ``WithMergedDeviceOptions``),
    common ``NVIDIA_VISIBLE_DEVICES=void`` (nvidia-container-toolkit ``pkg/nvcdi/wrapper.go``)."""
    inv, root = setup(tmp_path, "none", "cdi-cri", "uuid")
    g0, g1 = (g.uuid for g in inv.node.gpus)
    spec = json.loads((root / f"{CDI}-gpu.json").read_text())
    assert spec["kind"] == f"{CDI}/gpu"
    assert [d["name"] for d in spec["devices"]] == [g0, g1]
    assert spec["containerEdits"] == {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}
    with pytest.raises(UnresolvableDevice):
        resolve(root, [f"{CDI}/gpu=all"])
    # The lowest version that fits, as nvcdi's spec builder writes; a runtime with a CDI 0.6+ library loads it.
    assert spec["cdiVersion"] == "0.3.0"
    for version in ("0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"):
        validate_spec({**spec, "cdiVersion": version})
    assert stat.S_IMODE((root / f"{CDI}-gpu.json").stat().st_mode) == 0o644
    assert stat.S_IMODE(root.stat().st_mode) == 0o755


@pytest.mark.parametrize("sharing", ["none", "replicas", "mig-mixed", "mig-replicas"])
def test_pass_device_specs_puts_allocates_device_nodes_in_the_spec(tmp_path, sharing):
    """With ``--pass-device-specs`` the container gets the nodes Allocate's DeviceSpecs would carry with
    envvar (``internal/plugin/server.go`` ``apiDeviceSpecs``: control nodes only where they exist), control
    nodes spec-wide as nvcdi puts them."""
    inv, root = setup(
        tmp_path, sharing, "cdi-cri", "uuid", pass_device_specs=True, nvidia_dev_root="/run/nvidia/driver"
    )
    for resource in inv.resources:
        device = resource.devices[-1]
        edits = resolve(root, names_of(container_allocate_response(inv, resource, [device.id])))
        assert edits.node_paths == device_paths(inv, [device])
        control = control_device_paths()  # those this machine has, as Allocate sends them
        assert edits.node_paths[: len(control)] == control
        assert {n["hostPath"] for n in edits.device_nodes} == {f"/run/nvidia/driver{p}" for p in edits.node_paths}
        assert all(n["permissions"] == "rw" for n in edits.device_nodes)


def test_no_device_nodes_without_pass_device_specs(tmp_path):
    _, root = setup(tmp_path, "mig-mixed", "cdi-cri", "uuid")
    for name in load_specs(root):
        assert resolve(root, [name]).device_nodes == []


def test_inject_nvidia_smi_mounts_the_fake_tool(tmp_path):
    inv = load_inventory(
        dataclasses.replace(
            inputs(tmp_path, "2xh100-80gb", cli={"device_list_strategy": "cdi-cri"}), nvidia_smi_dir="/d"
        )
    )
    root = tmp_path / "cdi"
    PluginCdiSpecs(root).update(inv)
    g0 = inv.node.gpus[0].uuid
    edits = resolve(root, [f"{CDI}/gpu={g0}"])
    assert edits.env == {"NVIDIA_VISIBLE_DEVICES": "void", "FAKEGPU_DEVICES_FILE": "/run/fakegpu/devices.json"}
    assert edits.mount_targets == ["/usr/bin/nvidia-smi", "/run/fakegpu/devices.json", f"{VM}/{g0}"]
    assert [m["hostPath"] for m in edits.mounts[:2]] == ["/d/nvidia-smi", "/d/devices.json"]


FABRIC_NODE: dict[str, Any] = {
    "version": "v1",
    "gpus": [{"model": "b200", "count": 4}],
    "fabric": {"clusterUUID": "1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10", "cliqueID": 1},
}
IMEX_CHANNEL0 = "/dev/nvidia-caps-imex-channels/channel0"


def test_imex_channels_and_additional_classes_resolve_in_nvidia_order(tmp_path):
    """``AdditionalDevices``: gdrcopy, gds, mofed, each ``<class>=all`` with its own spec file."""
    config = {"version": "v1", "imex": {"channelIDs": [0]}}
    cli = {"device_list_strategy": "cdi-cri", "gds_enabled": True, "mofed_enabled": True, "gdrcopy_enabled": True}
    inv = inventory(tmp_path, config=config, cli=cli, node_spec=FABRIC_NODE)
    root = tmp_path / "cdi"
    PluginCdiSpecs(root).update(inv)
    assert sorted(os.listdir(root)) == sorted(
        f"{CDI}-{c}.json" for c in ("gpu", "imex-channel", "gdrcopy", "gds", "mofed")
    )
    resource = inv.resources[0]
    names = names_of(container_allocate_response(inv, resource, [resource.devices[0].id]))
    assert [n.split("/", 1)[1].split("=")[0] for n in names] == [
        "gpu",
        "imex-channel",
        "gdrcopy",
        "gds",
        "mofed",
    ]
    edits = resolve(root, names)
    assert edits.env["NVIDIA_GDRCOPY"] == edits.env["NVIDIA_GDS"] == edits.env["NVIDIA_MOFED"] == "enabled"
    assert edits.device_nodes == [{"path": IMEX_CHANNEL0, "hostPath": IMEX_CHANNEL0}]


def test_the_imex_channel_spec_is_one_device_node(tmp_path):
    """NVIDIA v0.17 internal/cdi/imex.go: kind k8s.device-plugin.nvidia.com/imex-channel, device "0" whose
    only edit is deviceNodes [{path, hostPath}] (no type, major, minor: the runtime stats the host path);
    hostPath under the host dev root (the root transformer in internal/cdi/cdi.go)."""
    config = {"version": "v1", "imex": {"channelIDs": [0], "required": True}, "flags": {"nvidiaDevRoot": "/run/drv"}}
    inv = inventory(tmp_path, config=config, cli={"device_list_strategy": "cdi-annotations"}, node_spec=FABRIC_NODE)
    spec = plugin_specs(inv)[f"{CDI}-imex-channel.json"]
    assert spec == {
        "cdiVersion": "0.5.0",
        "kind": f"{CDI}/imex-channel",
        "devices": [
            {
                "name": "0",
                "containerEdits": {"deviceNodes": [{"path": IMEX_CHANNEL0, "hostPath": f"/run/drv{IMEX_CHANNEL0}"}]},
            }
        ],
    }
    validate_spec(spec)


@pytest.mark.parametrize("node_spec", [None, {**FABRIC_NODE, "fabric": {**FABRIC_NODE["fabric"], "imexChannels": 0}}])
def test_no_imex_channel_spec_where_the_channel_is_missing(tmp_path, node_spec):
    """NVIDIA writes the imex-channel spec only when GetChannels found a channel (``len(imexChannels) > 0``)."""
    config = {"version": "v1", "imex": {"channelIDs": [0]}}
    inv = inventory(tmp_path, "4xb200", config=config, cli={"device_list_strategy": "cdi-cri"}, node_spec=node_spec)
    assert sorted(plugin_specs(inv)) == [f"{CDI}-gpu.json"]


def test_specs_follow_the_live_inventory_and_write_only_changes(tmp_path):
    """Rewritten on every inventory change (NVIDIA rewrites on every restart of its plugins)."""
    first = inventory(tmp_path, "2xh100-80gb", cli={"device_list_strategy": "cdi-cri"})
    live = LiveInventory(first)
    specs = PluginCdiSpecs(tmp_path / "cdi")
    unsubscribe = specs.follow(live)
    assert specs.writes == 1
    live.set_health(first.node.gpus[0].uuid, False)
    assert specs.writes == 1  # health is not in the spec
    second = inventory(tmp_path, "4xh100-80gb", cli={"device_list_strategy": "cdi-cri", "device_id_strategy": "index"})
    live.replace(second)
    assert specs.writes == 2
    resolve(tmp_path / "cdi", [f"{CDI}/gpu=3"])
    with pytest.raises(UnresolvableDevice):
        resolve(tmp_path / "cdi", [f"{CDI}/gpu={first.node.gpus[0].uuid}"])
    (tmp_path / "cdi" / f"{CDI}-gpu.json").unlink()
    live.replace(second)
    assert specs.writes == 3  # a deleted spec comes back with the next change
    unsubscribe()
