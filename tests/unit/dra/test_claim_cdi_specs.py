"""The DRA driver's per-claim CDI specs: NVIDIA's names, layout, YAML files, legacy JSON and path safety.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/cdi.go`` (``CreateClaimSpecFile``:
common edits plus one device per prepared device, ``GenerateTransientSpecName``, ``writeSpec`` saving
``<name>.yaml``, ``DeleteClaimSpecFile``) and ``cmd/gpu-kubelet-plugin/sharing.go`` for the edits.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from fakegpu.dra.claim_cdi_specs import (
    cdi_vendor,
    claim_device_name,
    claim_spec,
    claim_spec_file_name,
    remove_spec,
    write_spec,
)
from fakegpu.runtime.cdi_spec_model import render_spec, validate_spec
from tests.cdi_runtime import UnresolvableDevice, resolve

UID_DIGIT = "2e800b5e-1111-4000-8000-000000000002"  # most claim UIDs start with a digit
UID_LETTER = "e2800b5e-0000-4000-8000-000000000001"
VENDOR = "k8s.gpu.nvidia.com"


@dataclass(frozen=True)
class Dev:
    device: str
    env: tuple[str, ...]
    share_id: str | None = None
    mps_daemon_id: str | None = None


DEVICES = [Dev("gpu-0", ("FAKEGPU_VISIBLE_DEVICES=GPU-a",)), Dev("gpu-1", ("FAKEGPU_VISIBLE_DEVICES=GPU-b",))]


def test_spec_has_nvidia_common_edits_then_per_device_edits():
    """cdi.go: ``spec.WithDeviceSpecs`` and ``spec.WithEdits(commonEdits)``, commonEdits carrying
    ``NVIDIA_VISIBLE_DEVICES=void`` (nvcdi ``GetCommonEdits``)."""
    spec = claim_spec(cdi_vendor("gpu.nvidia.com"), UID_LETTER, DEVICES)
    assert spec == {
        "cdiVersion": "0.3.0",
        "kind": "k8s.gpu.nvidia.com/claim",
        "devices": [
            {"name": f"{UID_LETTER}-gpu-0", "containerEdits": {"env": ["FAKEGPU_VISIBLE_DEVICES=GPU-a"]}},
            {"name": f"{UID_LETTER}-gpu-1", "containerEdits": {"env": ["FAKEGPU_VISIBLE_DEVICES=GPU-b"]}},
        ],
        "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]},
    }
    validate_spec(spec)


def test_mps_devices_mount_their_control_daemon_directories(tmp_path):
    """sharing.go ``GetCDIContainerEdits``: shm at /dev/shm, the pipe directory at /tmp/nvidia-mps, rw bind
    mounts, appended to the device's edits (cdi.go ``deviceEdits.Append``)."""
    mps = Dev("gpu-0", ("FAKEGPU_VISIBLE_DEVICES=GPU-a", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"), None, "u-abcde")
    spec = claim_spec(VENDOR, UID_LETTER, [mps, DEVICES[1]], mps_root=tmp_path / "mps")
    options = ["rw", "nosuid", "nodev", "bind"]
    assert spec["devices"][0]["containerEdits"] == {
        "env": ["FAKEGPU_VISIBLE_DEVICES=GPU-a", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"],
        "mounts": [
            {"hostPath": str(tmp_path / "mps/u-abcde/shm"), "containerPath": "/dev/shm", "options": options},
            {"hostPath": str(tmp_path / "mps/u-abcde/pipe"), "containerPath": "/tmp/nvidia-mps", "options": options},
        ],
    }
    assert "mounts" not in spec["devices"][1]["containerEdits"]
    assert spec["cdiVersion"] == "0.3.0"  # no mount type
    with pytest.raises(ValueError, match="no MPS root"):
        claim_spec(VENDOR, UID_LETTER, [mps])


def test_env_only_spec_declares_0_3_0_unless_a_name_starts_with_a_digit():
    assert UID_DIGIT[0].isdigit()
    assert claim_spec(VENDOR, UID_LETTER, DEVICES)["cdiVersion"] == "0.3.0"
    assert claim_spec(VENDOR, UID_DIGIT, DEVICES)["cdiVersion"] == "0.5.0"


def test_share_id_is_part_of_the_device_name():
    spec = claim_spec(VENDOR, UID_LETTER, [Dev("gpu-0", ("A=1",), share_id="s1")])
    assert spec["devices"][0]["name"] == f"{UID_LETTER}-gpu-0-s1"


def test_spec_file_name_follows_cdi_transient_naming_with_nvidia_yaml():
    assert claim_spec_file_name(VENDOR, UID_LETTER) == f"k8s.gpu.nvidia.com-claim_{UID_LETTER}.yaml"


def _files(root: Path) -> list[str]:
    return sorted(os.listdir(root))


def test_write_spec_writes_yaml_atomically_world_readable_and_leaves_no_temp_files(tmp_path):
    old = os.umask(0o077)
    try:
        spec = claim_spec(VENDOR, UID_DIGIT, DEVICES)
        path = write_spec(tmp_path, spec, UID_DIGIT)
        path = write_spec(tmp_path, spec, UID_DIGIT)  # overwriting is fine
    finally:
        os.umask(old)
    assert path == tmp_path / f"k8s.gpu.nvidia.com-claim_{UID_DIGIT}.yaml"
    assert _files(tmp_path) == [path.name]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert yaml.safe_load(path.read_text()) == spec
    assert path.read_bytes() == render_spec(spec, ".yaml")


def test_a_runtime_resolves_every_device_with_the_common_edits(tmp_path):
    spec = claim_spec(VENDOR, UID_DIGIT, DEVICES)
    write_spec(tmp_path, spec, UID_DIGIT)
    edits = resolve(tmp_path, [f"{VENDOR}/claim={UID_DIGIT}-gpu-1"])
    assert edits.env == {"NVIDIA_VISIBLE_DEVICES": "void", "FAKEGPU_VISIBLE_DEVICES": "GPU-b"}
    with pytest.raises(UnresolvableDevice):
        resolve(tmp_path, [f"{VENDOR}/claim={UID_LETTER}-gpu-1"])


def test_a_legacy_json_spec_is_replaced_and_removed(tmp_path):
    """Specs of fakegpu before NVIDIA's YAML: rewriting a claim's spec removes the JSON one (two specs
    defining one device make a runtime refuse both), and unprepare removes either."""
    legacy = tmp_path / f"k8s.gpu.nvidia.com-claim_{UID_LETTER}.json"
    legacy.write_text(json.dumps(claim_spec(VENDOR, UID_LETTER, DEVICES)))
    write_spec(tmp_path, claim_spec(VENDOR, UID_LETTER, DEVICES), UID_LETTER)
    assert _files(tmp_path) == [f"k8s.gpu.nvidia.com-claim_{UID_LETTER}.yaml"]
    legacy.write_text(json.dumps(claim_spec(VENDOR, UID_DIGIT, DEVICES)))
    other = tmp_path / f"k8s.gpu.nvidia.com-claim_{UID_DIGIT}.json"
    legacy.rename(other)
    assert remove_spec(tmp_path, UID_DIGIT) is True
    assert remove_spec(tmp_path, UID_LETTER) is True
    assert _files(tmp_path) == []


def test_write_spec_refuses_devices_of_another_claim(tmp_path):
    spec = claim_spec(VENDOR, UID_LETTER, DEVICES)
    with pytest.raises(ValueError, match="does not belong to claim"):
        write_spec(tmp_path, spec, "b" + UID_LETTER[1:])
    assert _files(tmp_path) == []


@pytest.mark.parametrize("uid", ["../escape", "a/b", "..", "a..b", "/etc/passwd", ".hidden", "", "x/../../y"])
def test_path_traversal_is_rejected(tmp_path, uid):
    root = tmp_path / "cdi"
    root.mkdir()
    with pytest.raises(ValueError, match="not usable in a CDI spec"):
        claim_spec_file_name(VENDOR, uid)
    with pytest.raises(ValueError, match="not usable in a CDI spec"):
        claim_device_name(uid, "gpu-0")
    with pytest.raises(ValueError, match="not usable in a CDI spec"):
        remove_spec(root, uid)
    spec = {
        "cdiVersion": "0.3.0",
        "kind": "k8s.gpu.nvidia.com/claim",
        "devices": [{"name": "x-gpu-0", "containerEdits": {"env": ["A=1"]}}],
    }
    with pytest.raises(ValueError, match="not usable in a CDI spec"):
        write_spec(root, spec, uid)
    assert _files(root) == []
    assert _files(tmp_path) == ["cdi"]


def test_device_names_with_path_characters_are_rejected():
    with pytest.raises(ValueError, match="invalid character '/'"):
        claim_device_name(UID_LETTER, "../../etc")


def test_remove_spec_is_idempotent(tmp_path):
    path = write_spec(tmp_path, claim_spec(VENDOR, UID_LETTER, DEVICES), UID_LETTER)
    other = write_spec(tmp_path, claim_spec(VENDOR, UID_DIGIT, DEVICES), UID_DIGIT)
    assert remove_spec(tmp_path, UID_LETTER) is True
    assert not path.exists()
    assert remove_spec(tmp_path, UID_LETTER) is False
    assert _files(tmp_path) == [other.name]
