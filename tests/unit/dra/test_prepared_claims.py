"""The DRA checkpoint: two-phase entries, atomic 0600 writes, checksums and crash recovery."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fakegpu.dra.device_map import published_devices
from fakegpu.dra.prepare_plan import PreparePlan, prepare_plan
from fakegpu.dra.prepared_claims import (
    CHECKPOINT_FILE,
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    CheckpointCorrupted,
    ClaimRef,
    PreparedClaims,
    checksum,
    parse_result,
    result_json,
)
from fakegpu.sharing.node import build_node
from fakegpu.sharing.node_spec import parse_node_spec

NODE = "node-a"
UID = "2e800b5e-0000-4000-8000-000000000001"
UID2 = "7f11aa00-0000-4000-8000-000000000002"


def preparation(uid: str = UID, devices: tuple[str, ...] = ("gpu-0",)) -> PreparePlan:
    n = build_node(parse_node_spec({"gpus": [{"model": "h100-80gb", "count": 2}]}, "t"), NODE, source="t")
    results = [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": d} for d in devices]
    claim = {
        "metadata": {"namespace": "default", "name": f"claim-{uid[:4]}", "uid": uid},
        "status": {"allocation": {"devices": {"results": results}}},
    }
    return prepare_plan(claim, "gpu.nvidia.com", NODE, published_devices(n, "static"))


def ref(prep: PreparePlan) -> ClaimRef:
    return ClaimRef(namespace=prep.namespace, name=prep.name, uid=prep.uid)


def test_missing_file_loads_empty(tmp_path):
    store = PreparedClaims.in_dir(tmp_path / "plugins" / "gpu.nvidia.com")
    assert store.load() == {}
    assert store.get(UID) is None
    assert store.started_only() == []
    assert not store.path.exists()


def test_round_trip(tmp_path):
    store = PreparedClaims.in_dir(tmp_path)
    prep = preparation(devices=("gpu-0", "gpu-1"))
    store.start(ref(prep), prep)
    store.complete(UID)
    loaded = PreparedClaims(tmp_path / CHECKPOINT_FILE).load()
    assert list(loaded) == [UID]
    entry = loaded[UID]
    assert (entry.namespace, entry.name, entry.state) == ("default", prep.name, PREPARE_COMPLETED)
    assert entry.devices == prep.results
    assert entry.plan == prep
    assert entry.devices[1].cdi_ids == (f"k8s.gpu.nvidia.com/claim={UID}-gpu-1",)


def test_file_is_private_atomic_and_checksummed(tmp_path):
    old = os.umask(0o022)
    try:
        store = PreparedClaims.in_dir(tmp_path)
        prep = preparation()
        store.start(ref(prep), prep)
        store.complete(UID)
    finally:
        os.umask(old)
    assert sorted(os.listdir(tmp_path)) == [CHECKPOINT_FILE]
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    doc = json.loads(store.path.read_text())
    canonical = json.dumps(doc["data"], sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert doc["checksum"] == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    (entry,) = doc["data"]["preparedClaims"]
    assert set(entry) == {"uid", "namespace", "name", "state", "driver", "pool", "devices"}
    assert entry["devices"][0]["cdiDeviceIDs"] == [f"k8s.gpu.nvidia.com/claim={UID}-gpu-0"]


def test_tampering_is_detected(tmp_path):
    store = PreparedClaims.in_dir(tmp_path)
    prep = preparation()
    store.start(ref(prep), prep)
    doc = json.loads(store.path.read_text())
    doc["data"]["preparedClaims"][0]["state"] = PREPARE_COMPLETED
    store.path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointCorrupted, match="checksum mismatch") as err:
        PreparedClaims.in_dir(tmp_path).load()
    assert str(store.path) in str(err.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "invalid JSON"),
        ("[]", "expected an object with checksum and data"),
        ('{"data": {}}', "expected an object with checksum and data"),
    ],
)
def test_unreadable_checkpoint_names_the_file(tmp_path, text, message):
    path = tmp_path / CHECKPOINT_FILE
    path.write_text(text)
    with pytest.raises(CheckpointCorrupted, match=message) as err:
        PreparedClaims(path).load()
    assert str(path) in str(err.value)


def _rewrite(path: Path, mutate: Callable[[dict[str, Any]], object]) -> None:
    doc = json.loads(path.read_text())
    mutate(doc["data"])
    canonical = json.dumps(doc["data"], sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    doc["checksum"] = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    path.write_text(json.dumps(doc))


def test_well_checksummed_but_invalid_entries_are_corrupt(tmp_path):
    store = PreparedClaims.in_dir(tmp_path)
    prep = preparation()
    store.start(ref(prep), prep)
    _rewrite(store.path, lambda d: d["preparedClaims"][0].update(state="Halfway"))
    with pytest.raises(CheckpointCorrupted, match="state 'Halfway'"):
        PreparedClaims.in_dir(tmp_path).load()
    _rewrite(store.path, lambda d: d.update(version="v9"))
    with pytest.raises(CheckpointCorrupted, match="unsupported version 'v9'"):
        PreparedClaims.in_dir(tmp_path).load()


def test_fields_from_a_newer_version_are_tolerated(tmp_path):
    store = PreparedClaims.in_dir(tmp_path)
    prep = preparation()
    store.start(ref(prep), prep)
    _rewrite(store.path, lambda d: d["preparedClaims"][0].update(futureField={"x": 1}))
    assert PreparedClaims.in_dir(tmp_path).load()[UID].devices == prep.results


def test_crash_between_start_and_complete_leaves_a_started_claim(tmp_path):
    store = PreparedClaims.in_dir(tmp_path)
    done, half = preparation(), preparation(UID2, ("gpu-1",))
    store.start(ref(done), done)
    store.complete(UID)
    store.start(ref(half), half)
    del store  # the process dies before writing the CDI spec and completing

    restarted = PreparedClaims.in_dir(tmp_path)
    claims = restarted.load()
    assert claims[UID2].state == PREPARE_STARTED
    assert claims[UID].state == PREPARE_COMPLETED
    started = restarted.started_only()
    assert [c.uid for c in started] == [UID2]
    assert started[0].devices == half.results  # what to roll back


def test_crash_while_writing_complete_keeps_the_started_state(tmp_path, monkeypatch):
    store = PreparedClaims.in_dir(tmp_path)
    prep = preparation()
    store.start(ref(prep), prep)

    def crash(src, dst):
        raise OSError("power loss")

    monkeypatch.setattr("fakegpu.runtime.atomic_files.os.replace", crash)
    with pytest.raises(OSError, match="power loss"):
        store.complete(UID)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == [CHECKPOINT_FILE]
    assert PreparedClaims.in_dir(tmp_path).load()[UID].state == PREPARE_STARTED


def test_started_claim_can_be_redone_but_completed_one_cannot(tmp_path):
    store = PreparedClaims.in_dir(tmp_path)
    prep = preparation()
    store.start(ref(prep), prep)
    redo = preparation(devices=("gpu-1",))
    assert store.start(ref(redo), redo).devices == redo.results
    store.complete(UID)
    with pytest.raises(ValueError, match="already PrepareCompleted"):
        store.start(ref(prep), prep)
    assert store.load()[UID].devices == redo.results


def test_start_refuses_a_preparation_of_another_claim(tmp_path):
    store = PreparedClaims.in_dir(tmp_path)
    with pytest.raises(ValueError, match=f"preparation is for claim {UID}, not {UID2}"):
        store.start(ClaimRef("default", "x", UID2), preparation())
    assert not store.path.exists()


def test_complete_of_an_unknown_claim_fails(tmp_path):
    with pytest.raises(KeyError, match="no checkpoint entry"):
        PreparedClaims.in_dir(tmp_path).complete(UID)


def test_remove_is_idempotent(tmp_path):
    store = PreparedClaims.in_dir(tmp_path)
    prep, other = preparation(), preparation(UID2, ("gpu-1",))
    store.start(ref(prep), prep)
    store.start(ref(other), other)
    assert store.remove(UID) is True
    assert store.remove(UID) is False
    assert store.remove("never-prepared") is False
    assert list(PreparedClaims.in_dir(tmp_path).load()) == [UID2]


def test_claims_are_listed_by_uid(tmp_path):
    store = PreparedClaims.in_dir(tmp_path)
    for p in (preparation(UID2, ("gpu-1",)), preparation()):
        store.start(ref(p), p)
    assert [c.uid for c in store.claims()] == [UID, UID2]


def test_prepared_result_json_round_trip():
    n = build_node(parse_node_spec({"gpus": [{"model": "h100-80gb", "count": 1}]}, "t"), NODE, source="t")
    shared = {"request": "main/sub", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0", "shareID": "abc"}
    claim = {
        "metadata": {"namespace": "default", "name": "shared", "uid": UID},
        "status": {"allocation": {"devices": {"results": [shared]}}},
    }
    (r,) = prepare_plan(claim, "gpu.nvidia.com", NODE, published_devices(n, "static")).results
    assert r.request_name == "main"
    assert result_json(r)["shareID"] == "abc"
    assert parse_result(result_json(r)) == r
    assert parse_result({**result_json(r), "futureField": 1}) == r
    assert "mpsControlDaemonID" not in result_json(r)
    mps = dataclasses.replace(r, mps_daemon_id=f"{UID}-abcde")
    assert result_json(mps)["mpsControlDaemonID"] == f"{UID}-abcde"
    assert parse_result(result_json(mps)) == mps  # the spec written again after a reboot mounts the same dirs


# --- the boot the claims belong to ------------------------------------------------------------------------


def test_boot_id_is_kept_across_writes_and_a_new_boot_forgets_the_claims(tmp_path):
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/checkpointv.go at 9292f4d: ``nodeBootID``
    beside the claims, omitted while empty; a fresh checkpoint for a new boot holds no claims."""
    store = PreparedClaims.in_dir(tmp_path)
    prep = preparation()
    store.start(ref(prep), prep)
    assert "nodeBootID" not in json.loads(store.path.read_text())["data"]
    assert store.for_boot("boot-1", keep=True) == []
    store.complete(UID)
    again = PreparedClaims.in_dir(tmp_path)
    assert again.node_boot_id == "boot-1" and list(again.load()) == [UID]
    (forgotten,) = again.for_boot("boot-2", keep=False)
    assert forgotten.uid == UID
    assert PreparedClaims.in_dir(tmp_path).load() == {}
    assert json.loads(again.path.read_text())["data"]["nodeBootID"] == "boot-2"


def test_a_boot_id_that_is_not_a_string_is_corruption(tmp_path):
    store = PreparedClaims.in_dir(tmp_path)
    store.for_boot("boot-1", keep=True)
    doc = json.loads(store.path.read_text())
    doc["data"]["nodeBootID"] = 7
    doc["checksum"] = checksum(doc["data"])
    store.path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointCorrupted, match=r"data\.nodeBootID must be a string"):
        PreparedClaims.in_dir(tmp_path).load()


def test_time_slice_of_an_entry_written_before_the_field_comes_from_its_env():
    """NVIDIA reads a missing ``timeSliceApplied`` as applied (device_state.go ``ptr.Deref(..., true)``): an
    older fakegpu entry that set the interval variable is reset at unprepare too."""
    result = dataclasses.replace(preparation().results[0], env=("NVIDIA_TIME_SLICE_INTERVAL=Long",), time_slice="Long")
    data = result_json(result)
    assert data["timeSlice"] == "Long"
    del data["timeSlice"]
    assert parse_result(data).time_slice == "Long"
    assert parse_result({**data, "env": []}).time_slice is None
