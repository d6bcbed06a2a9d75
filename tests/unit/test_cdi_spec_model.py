"""The CDI spec model both faces write with: the rules a runtime enforces, minimum versions, files.

Follows cncf-tags/container-device-interface: ``pkg/parser/parser.go`` (names), ``pkg/cdi/spec.go``
(``GenerateSpecName``, ``GenerateTransientSpecName``, validation), ``specs-go/versions.go``
(``MinimumRequiredVersion``), ``pkg/cdi/spec.go`` ``Spec.Save`` (format from the extension).
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

import pytest
import yaml

from fakegpu.runtime.cdi_spec_model import (
    minimum_version,
    new_spec,
    qualified_name,
    remove_spec_file,
    spec_file_name,
    validate_spec,
    write_spec_file,
)

# The spec the Kubernetes DRA test driver (test-driver.cdi.k8s.io) wrote on a real kubelet, v1.36.2.
GOLDEN_SPEC = json.loads(
    '{"cdiVersion":"0.3.0","kind":"test-driver.cdi.k8s.io/test","devices":[{"name":'
    '"claim-83cfdcca-a33b-45d1-932c-a04c970c9600-dev","containerEdits":{"env":'
    '["claim_real_dra_pod_dev_zh8sp_dev=true"]}}]}'
)


def test_golden_spec_passes_validation():
    validate_spec(GOLDEN_SPEC)


def test_qualified_name():
    assert qualified_name("k8s.gpu.nvidia.com", "claim", "u-gpu-0") == "k8s.gpu.nvidia.com/claim=u-gpu-0"
    assert qualified_name("k8s.device-plugin.nvidia.com", "gpu", "0:1") == "k8s.device-plugin.nvidia.com/gpu=0:1"
    with pytest.raises(ValueError, match="invalid character '/'"):
        qualified_name("k8s.gpu.nvidia.com", "claim", "a/b")


def test_spec_file_names_follow_cdi():
    """``GenerateSpecName`` and ``GenerateTransientSpecName`` (pkg/cdi/spec.go)."""
    assert (
        spec_file_name("k8s.device-plugin.nvidia.com", "gpu", None, ".json") == "k8s.device-plugin.nvidia.com-gpu.json"
    )
    assert spec_file_name("k8s.gpu.nvidia.com", "claim", "u1", ".yaml") == "k8s.gpu.nvidia.com-claim_u1.yaml"


def test_new_spec_declares_the_minimum_version_and_puts_common_edits_last():
    spec = new_spec("v.io", "c", [{"name": "d", "containerEdits": {"env": ["A=1"]}}], {"env": ["B=2"]})
    assert spec == {
        "cdiVersion": "0.3.0",
        "kind": "v.io/c",
        "devices": [{"name": "d", "containerEdits": {"env": ["A=1"]}}],
        "containerEdits": {"env": ["B=2"]},
    }
    assert new_spec("v.io", "c", [{"name": "0", "containerEdits": {"env": ["A=1"]}}])["cdiVersion"] == "0.5.0"


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


def test_write_spec_file_is_atomic_world_readable_in_an_owner_only_directory(tmp_path):
    spec = _spec()
    old = os.umask(0)
    try:
        path = write_spec_file(tmp_path / "run" / "cdi", "v-c.json", spec)
        path = write_spec_file(tmp_path / "run" / "cdi", "v-c.json", spec)  # overwriting is fine
    finally:
        os.umask(old)
    assert sorted(os.listdir(path.parent)) == ["v-c.json"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    for directory in (path.parent, path.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o755
    assert json.loads(path.read_text()) == spec


def test_the_extension_picks_yaml_in_the_spec_key_order(tmp_path):
    spec = _spec()
    path = write_spec_file(tmp_path, "v-c_1.yaml", spec)
    assert yaml.safe_load(path.read_text()) == spec
    assert path.read_text().startswith("cdiVersion: 0.3.0\nkind: test-driver.cdi.k8s.io/test\ndevices:\n")


@pytest.mark.parametrize("name", ["v-c.txt", "v-c", "../v-c.json", ".v-c.json"])
def test_write_spec_file_refuses_names_a_runtime_ignores_or_that_leave_the_root(tmp_path, name):
    root = tmp_path / "cdi"
    with pytest.raises(ValueError, match=r"must end in|would leave"):
        write_spec_file(root, name, _spec())
    assert not any(tmp_path.rglob("*.json"))


def test_failed_write_keeps_the_old_file_and_removes_the_temp_file(tmp_path, monkeypatch):
    path = write_spec_file(tmp_path, "v-c.json", _spec())

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("fakegpu.runtime.atomic_files.os.replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_spec_file(tmp_path, "v-c.json", _spec(devices=[_device(name="other")]))
    assert sorted(os.listdir(tmp_path)) == [path.name]
    assert json.loads(path.read_text()) == _spec()


def test_write_validates_before_writing_and_remove_is_idempotent(tmp_path):
    with pytest.raises(ValueError, match="KEY=VALUE"):
        write_spec_file(tmp_path, "v-c.json", _spec(devices=[_device(env=("bad",))]))
    assert os.listdir(tmp_path) == []
    write_spec_file(tmp_path, "v-c.json", _spec())
    assert remove_spec_file(tmp_path, "v-c.json") is True
    assert remove_spec_file(tmp_path, "v-c.json") is False
