"""--inject-nvidia-smi: Allocate's mounts (device plugin) and CDI mounts (DRA), only when enabled."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from fakegpu.dra.claim_cdi_specs import claim_spec, write_spec
from fakegpu.fakeplugin.allocate_response import container_allocate_response, validate_request
from fakegpu.runtime.cdi_spec_model import minimum_version, validate_spec
from fakegpu.sharing.inputs import load_inventory
from fakegpu.sharing.inventory import Inventory
from fakegpu.telemetry.nvidia_smi.injection import DEFAULT_DRA_DIR, DEFAULT_PLUGIN_DIR
from tests.inventory_builders import inputs, inventory, time_slicing
from tests.unit.fakeplugin.test_allocate_response import summary

SMI_DIR = "/var/run/fakegpu/nvidia-smi/device-plugin"
MOUNTS = [
    ("/usr/bin/nvidia-smi", f"{SMI_DIR}/nvidia-smi", True),
    ("/run/fakegpu/devices.json", f"{SMI_DIR}/devices.json", True),
]


def allocate(inv: Inventory, ids: list[str], name: str = "nvidia.com/gpu") -> dict[str, Any]:
    res = inv.resource(name)
    assert res is not None
    validate_request(res, ids)
    return summary(container_allocate_response(inv, res, ids, annotation_id=lambda: "fixed"))


def test_defaults_live_under_the_hostpath_both_daemonsets_mount():
    assert DEFAULT_PLUGIN_DIR.startswith("/var/run/fakegpu/") and DEFAULT_DRA_DIR.startswith("/var/run/fakegpu/")
    assert len({DEFAULT_PLUGIN_DIR, DEFAULT_DRA_DIR}) == 2


def test_the_setting_travels_from_inputs_to_the_config(tmp_path):
    on = load_inventory(dataclasses.replace(inputs(tmp_path, "1xt4"), nvidia_smi_dir=SMI_DIR))
    assert on.config.nvidia_smi_dir == SMI_DIR
    assert inventory(tmp_path, "1xt4").config.nvidia_smi_dir is None


@pytest.mark.parametrize(
    ("strategy", "nvidia_mounts"),
    [
        ("envvar", []),
        ("volume-mounts", ["/var/run/nvidia-container-devices/{g0}"]),
        ("cdi-cri", []),
        ("cdi-annotations", []),
    ],
)
def test_allocate_adds_the_mounts_only_with_the_option(tmp_path, strategy, nvidia_mounts):
    cli = {"device_list_strategy": strategy}
    off = inventory(tmp_path, "2xh100-80gb", cli=cli)
    on = load_inventory(dataclasses.replace(inputs(tmp_path, "2xh100-80gb", cli=cli), nvidia_smi_dir=SMI_DIR))
    g0 = off.node.gpus[0].uuid
    plain = allocate(off, [g0])
    injected = allocate(on, [g0])
    assert [m[0] for m in plain["mounts"]] == [p.format(g0=g0) for p in nvidia_mounts]
    assert injected["mounts"] == plain["mounts"] + MOUNTS
    # Whatever the strategy (the CDI ones set no NVIDIA_VISIBLE_DEVICES), the script learns the devices.
    assert injected["envs"] == {
        **plain["envs"],
        "FAKEGPU_DEVICES_FILE": "/run/fakegpu/devices.json",
        "FAKEGPU_VISIBLE_DEVICES": g0,
    }
    assert {k: v for k, v in injected.items() if k not in ("mounts", "envs")} == {
        k: v for k, v in plain.items() if k not in ("mounts", "envs")
    }
    assert "FAKEGPU_DEVICES_FILE" not in plain["envs"]


def test_replicas_get_the_mounts_and_the_parent_in_visible_devices(tmp_path):
    base = inputs(tmp_path, "1xh100-80gb", config=time_slicing(4))
    on = load_inventory(dataclasses.replace(base, nvidia_smi_dir=SMI_DIR))
    res = on.resource("nvidia.com/gpu")
    assert res is not None
    ids = [d.id for d in res.devices[:2]]
    got = allocate(on, ids)
    assert got["envs"]["NVIDIA_VISIBLE_DEVICES"] == on.node.gpus[0].uuid
    assert got["envs"]["FAKEGPU_VISIBLE_DEVICES"] == on.node.gpus[0].uuid
    assert got["mounts"] == MOUNTS


@pytest.mark.parametrize("id_strategy", ["uuid", "index"])
def test_fakegpu_visible_devices_uses_the_runtime_ids_of_the_strategy(tmp_path, id_strategy):
    cli = {"device_list_strategy": "cdi-cri", "device_id_strategy": id_strategy, "mig_strategy": "mixed"}
    base = inputs(tmp_path, "2xa100-40gb", cli=cli, layout="all-balanced")
    on = load_inventory(dataclasses.replace(base, nvidia_smi_dir=SMI_DIR))
    mig = on.node.gpus[1].mig_devices[1]
    name = f"nvidia.com/mig-{mig.profile.name}"
    got = allocate(on, [mig.uuid], name)
    assert got["envs"]["FAKEGPU_VISIBLE_DEVICES"] == (mig.uuid if id_strategy == "uuid" else "1:1")
    assert "NVIDIA_VISIBLE_DEVICES" not in got["envs"]


@dataclass(frozen=True)
class Dev:
    device: str
    env: tuple[str, ...]
    share_id: str | None = None
    mps_daemon_id: str | None = None


DEVICES = [Dev("gpu-0", ("FAKEGPU_VISIBLE_DEVICES=GPU-a",))]
UID_LETTER = "e2800b5e-0000-4000-8000-000000000001"
UID_DIGIT = "2e800b5e-1111-4000-8000-000000000002"


def test_cdi_spec_without_the_option_is_unchanged():
    spec = claim_spec("k8s.gpu.nvidia.com", UID_LETTER, DEVICES)
    assert spec["containerEdits"] == {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}
    assert spec["devices"][0]["containerEdits"] == {"env": ["FAKEGPU_VISIBLE_DEVICES=GPU-a"]}
    assert spec == claim_spec("k8s.gpu.nvidia.com", UID_LETTER, DEVICES, nvidia_smi_dir=None)


@pytest.mark.parametrize(("uid", "version"), [(UID_LETTER, "0.3.0"), (UID_DIGIT, "0.5.0")])
def test_cdi_spec_mounts_the_script_and_keeps_the_lowest_version(uid, version):
    spec = claim_spec("k8s.gpu.nvidia.com", uid, DEVICES, nvidia_smi_dir="/var/run/fakegpu/nvidia-smi/dra")
    assert list(spec) == ["cdiVersion", "kind", "devices", "containerEdits"]
    assert spec["cdiVersion"] == version
    assert spec["devices"][0]["containerEdits"] == {"env": ["FAKEGPU_VISIBLE_DEVICES=GPU-a"]}
    assert spec["containerEdits"] == {
        "env": ["NVIDIA_VISIBLE_DEVICES=void", "FAKEGPU_DEVICES_FILE=/run/fakegpu/devices.json"],
        "mounts": [
            {
                "hostPath": "/var/run/fakegpu/nvidia-smi/dra/nvidia-smi",
                "containerPath": "/usr/bin/nvidia-smi",
                "options": ["ro", "nosuid", "nodev", "bind"],
            },
            {
                "hostPath": "/var/run/fakegpu/nvidia-smi/dra/devices.json",
                "containerPath": "/run/fakegpu/devices.json",
                "options": ["ro", "nosuid", "nodev", "bind"],
            },
        ],
    }
    validate_spec(spec)
    # A mount type would need 0.4.0: the spec stays valid for runtimes with older CDI libraries.
    typed = json.loads(json.dumps(spec))
    typed["containerEdits"]["mounts"][0]["type"] = "bind"
    assert minimum_version(typed) == max(version, "0.4.0")


def test_cdi_spec_with_mounts_is_written_and_reloads(tmp_path):
    spec = claim_spec("k8s.gpu.nvidia.com", UID_DIGIT, DEVICES, nvidia_smi_dir="/d")
    path = write_spec(tmp_path, spec, UID_DIGIT)
    assert yaml.safe_load(path.read_text()) == spec
