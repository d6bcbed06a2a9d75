"""--inject-nvidia-smi end to end: the daemon's files on the host, kept current, mounted by Allocate and
by CDI specs, and the mounted script showing a pod exactly the devices it was given."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dra.claim_preparer import ClaimPreparer
from dra.prepared_claims import ClaimRef, PreparedClaims
from fakegpu.cli import _parser
from fakegpu.inventory_options import inventory_inputs
from fakeplugin.daemon import run_plugin_daemon
from fakeplugin.fake_node import FakeNode
from fakeplugin.kubelet.emulator import KubeletEmulator
from kubeletapi.kubelet_paths import KubeletPaths
from sharing.inputs import InventoryInputs, load_inventory
from sharing.live_inventory import LiveInventory
from sharing.nvidia_smi.devices import from_inventory, from_json
from sharing.nvidia_smi.injection import CONTAINER_DEVICES_PATH, CONTAINER_SCRIPT_PATH
from sharing.nvidia_smi.shell_script import TIME_OVERRIDE_ENV
from telemetry.nvidia_smi_files import NvidiaSmiFiles, write_nvidia_smi_files
from tests.unit.dra.test_claim_devices import claim, result

GPU = "nvidia.com/gpu"


def smi(script: Path | str, *argv: str, env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """Run the script as a container would: sh, the container's environment, nothing else."""
    full = {"PATH": os.environ["PATH"], TIME_OVERRIDE_ENV: "Wed Feb  4 10:17:25 2026", **(env or {})}
    done = subprocess.run(["sh", str(script), *argv], env=full, capture_output=True, text=True, timeout=20, check=False)
    assert done.stderr == ""
    return done.stdout, done.returncode


def gpu_uuids(listing: str) -> list[str]:
    return [line.rsplit("UUID: ", 1)[1].rstrip(")") for line in listing.splitlines() if line.startswith("GPU ")]


def test_files_are_written_atomically_with_their_modes(tmp_path):
    inv = load_inventory(InventoryInputs(node_name="n1", gpus=("2xh100-80gb",)))
    directory = tmp_path / "var" / "run" / "fakegpu" / "nvidia-smi"
    old_umask = os.umask(0o077)  # the modes must not depend on the daemon's umask
    try:
        script, devices = write_nvidia_smi_files(directory, inv)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert stat.S_IMODE(devices.stat().st_mode) == 0o644
    assert sorted(p.name for p in directory.iterdir()) == ["devices.json", "nvidia-smi"]
    assert from_json(json.loads(devices.read_text())) == from_inventory(inv)

    # Rewriting replaces the file (rename): a reader that opened the old one still reads all of it.
    with script.open("rb") as held:
        before = script.stat().st_ino
        other = load_inventory(InventoryInputs(node_name="n1", gpus=("1xt4",)))
        write_nvidia_smi_files(directory, other)
        assert held.read().count(b"NVIDIA H100 80GB HBM3") > 0
    assert script.stat().st_ino != before
    assert b"Tesla T4" in script.read_bytes()
    assert sorted(p.name for p in directory.iterdir()) == ["devices.json", "nvidia-smi"]


def test_files_follow_the_live_inventory(tmp_path, caplog):
    inputs = InventoryInputs(node_name="n1", gpus=("2xh100-80gb",))
    live = LiveInventory(load_inventory(inputs))
    files = NvidiaSmiFiles(tmp_path / "smi")
    unsubscribe = files.follow(live)
    script = tmp_path / "smi" / "nvidia-smi"
    assert files.writes == 1
    assert smi(script, "-L")[0].count("MIG") == 0

    live.set_health(live.inventory.node.gpus[0].uuid, False)  # nvidia-smi does not show health: no write
    assert files.writes == 1

    live.replace(load_inventory(dataclasses.replace(inputs, mig_layout="all-1g.10gb")))
    assert files.writes == 2
    listing, status = smi(script, "-L")
    assert status == 0 and listing.count("  MIG 1g.10gb     Device") == 14

    # A failure after start is logged, never raised into the inventory's other listeners.
    (tmp_path / "smi" / "nvidia-smi").unlink()
    (tmp_path / "smi" / "devices.json").unlink()
    (tmp_path / "smi").rmdir()
    (tmp_path / "smi").write_text("not a directory")
    with caplog.at_level(logging.ERROR):
        live.replace(load_inventory(inputs))
    assert "cannot update the fake nvidia-smi files" in caplog.text

    unsubscribe()
    (tmp_path / "smi").unlink()
    live.replace(load_inventory(dataclasses.replace(inputs, mig_layout="all-balanced")))
    assert not (tmp_path / "smi").exists()


async def test_a_pod_sees_only_its_gpus_through_the_mounted_script(tmp_path):
    smi_dir = tmp_path / "smi"
    inputs = InventoryInputs(node_name="node-a", gpus=("8xh100-80gb",), nvidia_smi_dir=str(smi_dir))
    async with FakeNode(tmp_path / "kubelet", inputs) as node:
        unsubscribe = NvidiaSmiFiles(smi_dir).follow(node.live)
        pod = await node.run_pod("p1", {"c": {GPU: 2}})
        assert pod.admitted
        response = pod.responses["c"][GPU]
        mounts = {m.container_path: (m.host_path, m.read_only) for m in response.mounts}
        assert mounts == {
            CONTAINER_SCRIPT_PATH: (str(smi_dir / "nvidia-smi"), True),
            CONTAINER_DEVICES_PATH: (str(smi_dir / "devices.json"), True),
        }
        env = pod.env("c")
        assert env["FAKEGPU_DEVICES_FILE"] == CONTAINER_DEVICES_PATH
        script = mounts[CONTAINER_SCRIPT_PATH][0]
        listing, status = smi(script, "-L", env=env)
        assert status == 0
        assert gpu_uuids(listing) == sorted(
            env["NVIDIA_VISIBLE_DEVICES"].split(","), key=[g.uuid for g in node.inventory.node.gpus].index
        )
        assert listing.startswith("GPU 0: NVIDIA H100 80GB HBM3") and "\nGPU 1: " in listing
        count, _ = smi(script, "--query-gpu=count", "--format=csv,noheader", env=env)
        assert count == "2\n2\n"
        devices = json.loads(Path(mounts[CONTAINER_DEVICES_PATH][0]).read_text())
        assert from_json(devices) == from_inventory(node.inventory)
        unsubscribe()


async def test_a_time_slicing_replica_shows_its_physical_gpu(tmp_path):
    smi_dir = tmp_path / "smi"
    config = tmp_path / "config.yaml"
    config.write_text(
        json.dumps({"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": GPU, "replicas": 4}]}}})
    )
    inputs = InventoryInputs(
        node_name="node-a", gpus=("2xa100-40gb",), config_file=str(config), nvidia_smi_dir=str(smi_dir)
    )
    async with FakeNode(tmp_path / "kubelet", inputs) as node:
        NvidiaSmiFiles(smi_dir).follow(node.live)
        pod = await node.run_pod("p1", {"c": {GPU: 1}})
        assert pod.admitted
        env = pod.env("c")
        listing, _ = smi(smi_dir / "nvidia-smi", "-L", env=env)
        assert gpu_uuids(listing) == [env["NVIDIA_VISIBLE_DEVICES"]]
        assert listing.startswith("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-")


class _Claims:
    """The API server's side of prepare: the claims by namespace and name."""

    def __init__(self, claims: Mapping[str, Mapping[str, Any]]) -> None:
        self.claims = claims

    async def get(self, namespace: str, name: str) -> Mapping[str, Any]:
        return self.claims[name]


async def test_a_claim_gets_the_script_through_its_cdi_spec(tmp_path):
    smi_dir = tmp_path / "smi"
    inputs = InventoryInputs(
        node_name="node-a", gpus=("2xh100-80gb",), mig_layout="all-1g.10gb", nvidia_smi_dir=str(smi_dir)
    )
    live = LiveInventory(load_inventory(inputs))
    NvidiaSmiFiles(smi_dir).follow(live)
    uid = "2e800b5e-0000-4000-8000-000000000001"
    mig_device = "gpu-1-mig-1g10gb-19-3"
    allocated = claim([result(mig_device)], uid=uid)
    cdi_root = tmp_path / "cdi"
    cdi_root.mkdir()
    preparer = ClaimPreparer(
        _Claims({"x": allocated}),
        live,
        driver="gpu.nvidia.com",
        mig_mode="static",
        cdi_root=cdi_root,
        checkpoint=PreparedClaims(tmp_path / "checkpoint.json"),
    )
    await preparer.prepare(ClaimRef("default", "x", uid))
    spec = json.loads((cdi_root / f"k8s.gpu.nvidia.com-claim_{uid}.json").read_text())
    assert spec["cdiVersion"] == "0.5.0"
    mounts = {m["containerPath"]: m["hostPath"] for m in spec["containerEdits"]["mounts"]}
    assert mounts == {
        CONTAINER_SCRIPT_PATH: str(smi_dir / "nvidia-smi"),
        CONTAINER_DEVICES_PATH: str(smi_dir / "devices.json"),
    }
    env = dict(e.split("=", 1) for e in [*spec["containerEdits"]["env"], *spec["devices"][0]["containerEdits"]["env"]])
    listing, status = smi(mounts[CONTAINER_SCRIPT_PATH], "-L", env=env)
    gpu1 = live.inventory.node.gpus[1]
    mig = next(m for m in gpu1.mig_devices if m.start == 3)
    assert (listing, status) == (
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {gpu1.uuid})\n  MIG 1g.10gb     Device  0: (UUID: {mig.uuid})\n",
        0,
    )


@pytest.mark.parametrize("nvidia_smi_dir", [None])
async def test_without_the_option_nothing_is_mounted(tmp_path, nvidia_smi_dir):
    inputs = InventoryInputs(node_name="node-a", gpus=("1xt4",), nvidia_smi_dir=nvidia_smi_dir)
    async with FakeNode(tmp_path / "kubelet", inputs) as node:
        pod = await node.run_pod("p1", {"c": {GPU: 1}})
        assert list(pod.responses["c"][GPU].mounts) == []
        assert "FAKEGPU_DEVICES_FILE" not in pod.env("c")


async def test_the_plugin_daemon_writes_and_mounts_it_with_the_flag(tmp_path):
    """``fakegpu plugin --inject-nvidia-smi``: the CLI flag reaches the daemon, which writes the files
    before registering, and the kubelet's Allocate answer mounts them."""
    root = Path(tempfile.mkdtemp(prefix="fgsmi-", dir="/tmp"))
    smi_dir = tmp_path / "smi"
    args = _parser().parse_args(
        [
            "plugin",
            "--node-name",
            "n1",
            "--gpus",
            "2xa100-40gb",
            "--inject-nvidia-smi",
            "--nvidia-smi-dir",
            str(smi_dir),
        ]
    )
    inputs = dataclasses.replace(inventory_inputs(args, {}), nvidia_smi_dir=str(args.nvidia_smi_dir))
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    stop = asyncio.Event()
    task = asyncio.create_task(run_plugin_daemon(inputs, KubeletPaths(root / "kubelet"), stop=stop))
    try:
        await kubelet.wait_for(lambda: kubelet.allocatable().get(GPU) == 2 or task.done(), 10.0, "devices")
        assert not task.done()
        result = await kubelet.run_pod("p", {"c": {GPU: 1}})
        assert result.admitted
        response = result.responses["c"][GPU]
        mounts = {m.container_path: m.host_path for m in response.mounts}
        assert mounts[CONTAINER_SCRIPT_PATH] == str(smi_dir / "nvidia-smi")
        assert mounts[CONTAINER_DEVICES_PATH] == str(smi_dir / "devices.json")
        listing, code = smi(smi_dir / "nvidia-smi", "-L", env={"NVIDIA_VISIBLE_DEVICES": "all"})
        assert code == 0 and len(gpu_uuids(listing)) == 2
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5.0)
        await kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)
