"""CDI spec writer: the rules a runtime enforces, NVIDIA's names, atomic files and path safety."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakegpu.dra.cdi_specs import (
    cdi_spec,
    cdi_vendor,
    claim_device_name,
    minimum_version,
    qualified_name,
    remove_spec,
    spec_file_name,
    validate_spec,
    write_spec,
)

# The spec the Kubernetes DRA test driver wrote on a real kubelet (shared/golden/real-kubelet.md).
GOLDEN_SPEC = json.loads(
    '{"cdiVersion":"0.3.0","kind":"test-driver.cdi.k8s.io/test","devices":[{"name":'
    '"claim-83cfdcca-a33b-45d1-932c-a04c970c9600-dev","containerEdits":{"env":'
    '["claim_real_dra_pod_dev_zh8sp_dev=true"]}}]}'
)
UID_DIGIT = "2e800b5e-1111-4000-8000-000000000002"  # most claim UIDs start with a digit
UID_LETTER = "e2800b5e-0000-4000-8000-000000000001"
VENDOR = "k8s.gpu.nvidia.com"


@dataclass(frozen=True)
class Dev:
    device: str
    env: tuple[str, ...]
    share_id: str | None = None


DEVICES = [Dev("gpu-0", ("NVIDIA_VISIBLE_DEVICES=GPU-a",)), Dev("gpu-1", ("NVIDIA_VISIBLE_DEVICES=GPU-b",))]


def test_golden_spec_passes_validation():
    validate_spec(GOLDEN_SPEC)


def test_spec_has_the_golden_shape():
    spec = cdi_spec(VENDOR, UID_LETTER, DEVICES)
    assert list(spec) == list(GOLDEN_SPEC)
    assert [list(d) for d in spec["devices"]] == [list(GOLDEN_SPEC["devices"][0])] * 2
    assert list(spec["devices"][0]["containerEdits"]) == list(GOLDEN_SPEC["devices"][0]["containerEdits"])
    validate_spec(spec)


def test_spec_uses_nvidia_kind_and_claim_device_names():
    spec = cdi_spec(cdi_vendor("gpu.nvidia.com"), UID_LETTER, DEVICES)
    assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
    assert [d["name"] for d in spec["devices"]] == [f"{UID_LETTER}-gpu-0", f"{UID_LETTER}-gpu-1"]
    assert spec["devices"][1]["containerEdits"] == {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-b"]}


def test_env_only_spec_declares_0_3_0_unless_a_name_starts_with_a_digit():
    assert UID_DIGIT[0].isdigit()
    assert cdi_spec(VENDOR, UID_LETTER, DEVICES)["cdiVersion"] == "0.3.0"
    assert cdi_spec(VENDOR, UID_DIGIT, DEVICES)["cdiVersion"] == "0.5.0"


def test_share_id_is_part_of_the_device_name():
    spec = cdi_spec(VENDOR, UID_LETTER, [Dev("gpu-0", ("A=1",), share_id="s1")])
    assert spec["devices"][0]["name"] == f"{UID_LETTER}-gpu-0-s1"


def test_qualified_name():
    assert qualified_name(VENDOR, "claim", f"{UID_LETTER}-gpu-0") == f"k8s.gpu.nvidia.com/claim={UID_LETTER}-gpu-0"
    with pytest.raises(ValueError, match="invalid character '/'"):
        qualified_name(VENDOR, "claim", "a/b")


def test_spec_file_name_follows_cdi_transient_naming():
    assert spec_file_name(VENDOR, UID_LETTER) == f"k8s.gpu.nvidia.com-claim_{UID_LETTER}.json"


def _spec(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(json.dumps(GOLDEN_SPEC))
    spec.update(changes)
    return spec


def _device(name: str = "dev0", env: tuple[str, ...] = ("A=1",), **extra: Any) -> dict[str, Any]:
    return {"name": name, "containerEdits": {"env": list(env)}, **extra}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (_spec(kind="noslash"), "must be <vendor>/<class>"),
        (_spec(kind="a/b/c"), "must be <vendor>/<class>"),
        (_spec(kind="1vendor.io/x"), "vendor name '1vendor.io' must start with a letter"),
        (_spec(kind="vendor.io/cl@ss"), "invalid character '@' in CDI class name"),
        (_spec(kind="vendor.io/x-"), "must end with a letter or digit"),
        (_spec(kind="vendor.io/" + "c" * 64), "longer than 63"),
        (_spec(devices=[_device(name="gpu/0")]), "invalid character '/' in CDI device name"),
        (_spec(devices=[_device(name="-gpu")]), "must start with a letter or digit"),
        (_spec(devices=[_device(name="gpu_")]), "must end with a letter or digit"),
        (_spec(devices=[_device(env=("NOEQUALS",))]), 'is not "KEY=VALUE"'),
        (_spec(devices=[_device(env=("=value",))]), 'is not "KEY=VALUE"'),
        (_spec(devices=[_device(), _device()]), "appears twice"),
        (_spec(devices=[]), "at least one device"),
        (_spec(devices=[{"name": "x", "containerEdits": {}}]), "empty containerEdits"),
        (_spec(devices=[_device(extra=1)]), "unknown field devices[0].extra"),
        (_spec(surprise=True), "unknown field spec.surprise"),
        (_spec(cdiVersion="0.9.0"), "not a known CDI version"),
        (_spec(cdiVersion="0.3.0", devices=[_device(name="0abc")]), "needs at least 0.5.0"),
        (_spec(cdiVersion="0.5.0", annotations={"a": "b"}), "needs at least 0.6.0"),
        (_spec(cdiVersion="0.5.0", kind="vendor.io/with.dot"), "needs at least 0.6.0"),
        (
            _spec(devices=[{"name": "x", "containerEdits": {"hooks": [{"hookName": "bogus", "path": "/x"}]}}]),
            "hookName must be one of",
        ),
    ],
)
def test_validate_spec_rejects(spec, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        validate_spec(spec)


def test_validate_spec_accepts_v_prefixed_and_later_versions():
    validate_spec(_spec(cdiVersion="v0.3.0"))
    validate_spec(_spec(cdiVersion="1.1.0", devices=[_device(name="0abc")]))


@pytest.mark.parametrize(
    ("edits", "version"),
    [
        ({"env": ["A=1"]}, "0.3.0"),
        ({"mounts": [{"hostPath": "/a", "containerPath": "/b", "type": "bind"}]}, "0.4.0"),
        ({"deviceNodes": [{"path": "/dev/x", "hostPath": "/dev/y"}]}, "0.5.0"),
        ({"additionalGids": [5]}, "0.7.0"),
        ({"netDevices": [{"hostInterfaceName": "eth1", "name": "net1"}]}, "1.1.0"),
    ],
)
def test_minimum_version_follows_fields_used(edits, version):
    assert minimum_version({"kind": "v.io/c", "devices": [{"name": "d", "containerEdits": edits}]}) == version


def _files(root: Path) -> list[str]:
    return sorted(os.listdir(root))


def test_write_spec_is_atomic_world_readable_and_leaves_no_temp_files(tmp_path):
    old = os.umask(0o077)
    try:
        spec = cdi_spec(VENDOR, UID_DIGIT, DEVICES)
        path = write_spec(tmp_path, spec, UID_DIGIT)
        path = write_spec(tmp_path, spec, UID_DIGIT)  # overwriting is fine
    finally:
        os.umask(old)
    assert path == tmp_path / f"k8s.gpu.nvidia.com-claim_{UID_DIGIT}.json"
    assert _files(tmp_path) == [path.name]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert json.loads(path.read_text()) == spec


def test_failed_write_keeps_the_old_file_and_removes_the_temp_file(tmp_path, monkeypatch):
    old_spec = cdi_spec(VENDOR, UID_LETTER, DEVICES[:1])
    path = write_spec(tmp_path, old_spec, UID_LETTER)

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr("fakegpu.dra.cdi_specs.os.replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_spec(tmp_path, cdi_spec(VENDOR, UID_LETTER, DEVICES), UID_LETTER)
    assert _files(tmp_path) == [path.name]
    assert json.loads(path.read_text()) == old_spec


def test_write_spec_refuses_devices_of_another_claim(tmp_path):
    spec = cdi_spec(VENDOR, UID_LETTER, DEVICES)
    with pytest.raises(ValueError, match="does not belong to claim"):
        write_spec(tmp_path, spec, "b" + UID_LETTER[1:])
    assert _files(tmp_path) == []


def test_write_spec_validates_before_writing(tmp_path):
    with pytest.raises(ValueError, match="KEY=VALUE"):
        write_spec(tmp_path, _spec(devices=[_device(name=f"{UID_LETTER}-x", env=("bad",))]), UID_LETTER)
    assert _files(tmp_path) == []


@pytest.mark.parametrize("uid", ["../escape", "a/b", "..", "a..b", "/etc/passwd", ".hidden", "", "x/../../y"])
def test_path_traversal_is_rejected(tmp_path, uid):
    root = tmp_path / "cdi"
    root.mkdir()
    with pytest.raises(ValueError, match="not usable in a CDI spec"):
        spec_file_name(VENDOR, uid)
    with pytest.raises(ValueError, match="not usable in a CDI spec"):
        claim_device_name(uid, "gpu-0")
    with pytest.raises(ValueError, match="not usable in a CDI spec"):
        remove_spec(root, uid)
    spec = _spec(kind="k8s.gpu.nvidia.com/claim", devices=[_device(name="x-gpu-0")])
    with pytest.raises(ValueError, match="not usable in a CDI spec"):
        write_spec(root, spec, uid)
    assert _files(root) == []
    assert _files(tmp_path) == ["cdi"]


def test_device_names_with_path_characters_are_rejected():
    with pytest.raises(ValueError, match="invalid character '/'"):
        claim_device_name(UID_LETTER, "../../etc")


def test_remove_spec_is_idempotent(tmp_path):
    path = write_spec(tmp_path, cdi_spec(VENDOR, UID_LETTER, DEVICES), UID_LETTER)
    other = write_spec(tmp_path, cdi_spec(VENDOR, UID_DIGIT, DEVICES), UID_DIGIT)
    assert remove_spec(tmp_path, UID_LETTER) is True
    assert not path.exists()
    assert remove_spec(tmp_path, UID_LETTER) is False
    assert _files(tmp_path) == [other.name]
