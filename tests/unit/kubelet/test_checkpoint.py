"""kubelet_internal_checkpoint: the golden real-kubelet file must load, and our output must round-trip."""

import base64
import json
import os
import pathlib
import stat

import pytest

from fakegpu.kubelet import checkpoint as cp

# Verbatim as a real kubelet (v1.36.2) wrote it after a restart, for a plugin of example.com/gpu (2 GPUs x 2 replicas).
GOLDEN = """{
  "Data": {
    "PodDeviceEntries": [
      {
        "PodUID": "646adfe9-36fb-4618-a97c-360463c868fd",
        "ContainerName": "c",
        "ResourceName": "example.com/gpu",
        "DeviceIDs": {
          "0": [
            "GPU-00000000-aaaa-bbbb-cccc-000000000000::0"
          ]
        },
        "AllocResp": "CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS0wMDAwMDAwMC1hYWFhLWJiYmItY2NjYy0wMDAwMDAwMDAwMDA="
      }
    ],
    "RegisteredDevices": {
      "example.com/gpu": [
        "GPU-00000000-aaaa-bbbb-cccc-000000000000::1",
        "GPU-00000001-aaaa-bbbb-cccc-000000000000::0",
        "GPU-00000001-aaaa-bbbb-cccc-000000000000::1",
        "GPU-00000000-aaaa-bbbb-cccc-000000000000::0"
      ],
      "example.com/resource": []
    }
  },
  "Checksum": 3608033264
}
"""
GOLDEN_CHECKSUM = 3608033264
ALLOC = base64.b64decode("CkIKFk5WSURJQV9WSVNJQkxFX0RFVklDRVMSKEdQVS0wMDAwMDAwMC1hYWFhLWJiYmItY2NjYy0wMDAwMDAwMDAwMDA=")


def _sample() -> cp.CheckpointData:
    return cp.CheckpointData(
        pod_device_entries=[
            cp.PodDevicesEntry(
                pod_uid="uid-1",
                container_name="main",
                resource_name="nvidia.com/gpu",
                device_ids={-1: ["GPU-a"], 1: ["GPU-b", "GPU-c"]},
                alloc_resp=b"\x00\x01binary\xff",
            )
        ],
        registered_devices={"nvidia.com/gpu": ["GPU-a", "GPU-b", "GPU-c"], "nvidia.com/mig-1g.10gb": []},
    )


def test_golden_checkpoint_loads_and_checksum_matches_real_kubelet():
    data = cp.loads(GOLDEN, "golden")
    assert cp.checksum(data) == GOLDEN_CHECKSUM
    (entry,) = data.pod_device_entries
    assert entry.pod_uid == "646adfe9-36fb-4618-a97c-360463c868fd"
    assert entry.container_name == "c"
    assert entry.resource_name == "example.com/gpu"
    assert entry.device_ids == {0: ["GPU-00000000-aaaa-bbbb-cccc-000000000000::0"]}
    assert entry.alloc_resp == ALLOC
    assert data.registered_devices["example.com/resource"] == []
    assert len(data.registered_devices["example.com/gpu"]) == 4


def test_golden_dumps_is_the_kubelet_json_compacted():
    data = cp.loads(GOLDEN, "golden")
    assert cp.dumps(data) == json.dumps(json.loads(GOLDEN), separators=(",", ":"))


def test_round_trip_with_negative_numa_key():
    data = _sample()
    text = cp.dumps(data)
    doc = json.loads(text)
    assert list(doc) == ["Data", "Checksum"]
    assert doc["Data"]["PodDeviceEntries"][0]["DeviceIDs"] == {"-1": ["GPU-a"], "1": ["GPU-b", "GPU-c"]}
    assert doc["Checksum"] == cp.checksum(data)
    assert cp.loads(text, "mem") == data


def test_empty_checkpoint_has_null_entries_like_the_kubelet():
    data = cp.CheckpointData(pod_device_entries=[], registered_devices={})
    text = cp.dumps(data)
    assert text.startswith('{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":')
    assert cp.loads(text, "mem") == data


def test_nil_and_empty_are_hashed_differently_on_load():
    doc = json.loads(cp.dumps(cp.CheckpointData(pod_device_entries=[], registered_devices={})))
    doc["Data"]["PodDeviceEntries"] = []  # a kubelet would have hashed `[]`, not `<nil>`
    with pytest.raises(cp.CheckpointError, match="checksum mismatch"):
        cp.loads(json.dumps(doc), "mem")


def test_boot_id_is_kept_but_not_hashed():
    data = cp.CheckpointData(pod_device_entries=[], registered_devices={"r": []}, boot_id="b00t")
    text = cp.dumps(data)
    assert json.loads(text)["BootID"] == "b00t"
    assert cp.checksum(data) == json.loads(text)["Checksum"]
    assert cp.loads(text, "mem") == data


def test_html_characters_are_escaped_like_go():
    data = cp.CheckpointData(pod_device_entries=[], registered_devices={"a<b>&c": []})
    text = cp.dumps(data)
    assert "\\u003c" in text and "\\u003e" in text and "\\u0026" in text
    assert cp.loads(text, "mem") == data


def test_tampered_content_is_corrupted():
    tampered = GOLDEN.replace('"ContainerName": "c"', '"ContainerName": "d"')
    with pytest.raises(cp.CheckpointError, match=r"checkpoint is corrupted: golden: checksum mismatch"):
        cp.loads(tampered, "golden")


def test_tampered_checksum_is_corrupted():
    with pytest.raises(cp.CheckpointError, match="checksum mismatch"):
        cp.loads(GOLDEN.replace("3608033264", "3608033265"), "golden")


def test_bad_json_names_the_file():
    with pytest.raises(cp.CheckpointError, match=r"/var/lib/kubelet/x: invalid JSON"):
        cp.loads('{"Data": ', "/var/lib/kubelet/x")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("Checksum"), "missing field checkpoint.Checksum"),
        (lambda d: d.pop("Data"), "missing field checkpoint.Data"),
        (lambda d: d["Data"].pop("RegisteredDevices"), "missing field Data.RegisteredDevices"),
        (lambda d: d["Data"]["PodDeviceEntries"][0].pop("AllocResp"), r"PodDeviceEntries\[0\]\.AllocResp"),
        (lambda d: d["Data"]["PodDeviceEntries"][0].update(DeviceIDs={"x": []}), "not a NUMA node id"),
        (lambda d: d["Data"]["PodDeviceEntries"][0].update(DeviceIDs=["a"]), "v1 checkpoint format"),
        (lambda d: d["Data"]["PodDeviceEntries"][0].update(AllocResp="!!"), "not valid base64"),
        (lambda d: d.update(Checksum="1"), "unsigned integer"),
    ],
)
def test_malformed_checkpoint_is_rejected(mutate, message):
    doc = json.loads(GOLDEN)
    mutate(doc)
    with pytest.raises(cp.CheckpointError, match=message):
        cp.loads(json.dumps(doc), "f")


def test_write_atomically_mode_0600_no_temp_files(tmp_path: pathlib.Path):
    path = tmp_path / cp.CHECKPOINT_NAME
    old_umask = os.umask(0)
    try:
        cp.write_atomically(path, _sample())
        cp.write_atomically(path, _sample())  # overwrite in place
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [cp.CHECKPOINT_NAME]
    assert cp.read(path) == _sample()


def test_read_missing_file_is_none(tmp_path: pathlib.Path):
    assert cp.read(tmp_path / cp.CHECKPOINT_NAME) is None


def test_read_bad_file_names_it(tmp_path: pathlib.Path):
    path = tmp_path / cp.CHECKPOINT_NAME
    path.write_text("not json")
    with pytest.raises(cp.CheckpointError, match=str(path)):
        cp.read(path)


def test_read_golden_file(tmp_path: pathlib.Path):
    path = tmp_path / cp.CHECKPOINT_NAME
    path.write_text(GOLDEN)
    data = cp.read(path)
    assert data is not None
    assert cp.checksum(data) == GOLDEN_CHECKSUM
