"""What preparing a claim leaves on the node across unprepare, restarts and reboots: the checkpoint's boot ID,
the GPUs' compute mode and time slice, and multi-user MPS; through the real DRA driver over Unix sockets.

Each test names the kubernetes-sigs/dra-driver-nvidia-gpu file and tag or commit it follows.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.dra.feature_gates import FeatureGates, parse_feature_gates
from fakegpu.dra.prepared_claims import PreparedClaims, checksum
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.inventory import Inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.nvidia_smi.injection import SCRIPT_FILE
from fakegpu.telemetry.nvidia_smi.shell_script import TIME_OVERRIDE_ENV
from fakegpu.telemetry.nvidia_smi_files import NvidiaSmiFiles
from tests.apiserver import serving
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.cdi_runtime import claim_spec_path
from tests.claim_builders import GPU_CONFIG_API, allocated_claim, gpu_config, opaque_config
from tests.dra_kubelet_client import prepare, unprepare
from tests.eventually import eventually
from tests.integration.started_dra_drivers import StartedDrivers, write_boot_id

NODE = "node-a"
SHARING = parse_feature_gates("TimeSlicingSettings=true,MPSSupport=true")
MPS = gpu_config({"strategy": "MPS"})


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE) as server:
        yield server


@pytest.fixture
def boot_id(root: Path) -> Path:
    """The fake node's own boot ID (what ``--boot-id-file`` names); a test reboots the node by rewriting it."""
    return write_boot_id(root, "0d6bd0b5-9a41-4a0e-8a5c-000000000001")


Driver = Callable[..., Any]


@pytest.fixture
async def driver(root: Path, apiserver: FakeApiServer, boot_id: Path) -> AsyncIterator[Driver]:
    """Start a DRA driver on ``root``'s kubelet directory (one at a time: ``restart`` stops the previous one)."""
    running = StartedDrivers(root)

    async def start(inventory: Inventory | str = "2xh100-80gb", gates: FeatureGates = SHARING) -> DraDriver:
        await running.stop_all()
        if isinstance(inventory, str):
            inventory = load_inventory(InventoryInputs(node_name=NODE, gpus=(inventory,)))
        settings = DraSettings(cdi_root=root / "cdi", feature_gates=gates, boot_id_file=boot_id)
        return await running.start(LiveInventory(inventory), settings, apiserver)

    yield start
    await running.stop_all()


def checkpoint(root: Path) -> PreparedClaims:
    return PreparedClaims.in_dir(root / "kubelet/plugins/gpu.nvidia.com")


def reset_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "fakegpu.dra.boot_reset"]


def checkpoint_data(root: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(checkpoint(root).path.read_text())["data"]
    return data


async def prepared(server: FakeApiServer, drv: DraDriver, name: str, devices: list[str], config: Any = None) -> str:
    """Create an allocated claim and prepare it over the socket; returns its UID."""
    configs = [opaque_config(config)] if config is not None else []
    uid: str = server.create_direct(allocated_claim(name, NODE, devices, config=configs))["metadata"]["uid"]
    response = await prepare(drv.plugin.dra_socket, [("default", name, uid)])
    assert response.claims[uid].error == ""
    return uid


def smi(directory: Path, *argv: str, visible: str) -> str:
    """The fake nvidia-smi the CDI specs mount, run as in a container given ``visible``."""
    env = {
        "PATH": os.environ["PATH"],
        TIME_OVERRIDE_ENV: "Wed Feb  4 10:17:25 2026",
        "FAKEGPU_VISIBLE_DEVICES": visible,
    }
    done = subprocess.run(
        ["sh", str(directory / SCRIPT_FILE), *argv], env=env, capture_output=True, text=True, timeout=20, check=True
    )
    return done.stdout


# --- item 1: the checkpoint belongs to one boot ---------------------------------------------------------------


async def test_a_new_boot_id_discards_the_prepared_claims(apiserver, driver, root, boot_id, caplog):
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/device_state.go (NewDeviceState) and
    checkpointv.go (CheckpointV2.NodeBootID, at 9292f4d), pkg/bootid, since v0.4.0 (PR #1066): the
    checkpoint records the boot ID; a restart in the same boot keeps the claims, a new boot ID logs
    ``Invalidating checkpoint: checkpoint nodeBootID "<old>" != current "<new>"`` and ``Create empty
    checkpoint`` and starts empty, so the kubelet's next prepare really prepares again."""
    caplog.set_level(logging.INFO, logger="fakegpu.dra.boot_reset")
    first_boot = boot_id.read_text().strip()
    drv = await driver()
    assert checkpoint_data(root) == {"version": "v1", "preparedClaims": [], "nodeBootID": first_boot}
    assert reset_log(caplog) == ["Create empty checkpoint"]
    uid = await prepared(apiserver, drv, "c", ["gpu-0"], MPS)
    spec = claim_spec_path(root / "cdi", uid)
    mps_dirs = root / "kubelet/plugins/gpu.nvidia.com/mps"
    assert spec.exists() and any(mps_dirs.iterdir())
    assert checkpoint_data(root)["nodeBootID"] == first_boot

    caplog.clear()
    await driver()  # a restart of the plugin in the same boot
    assert list(checkpoint(root).load()) == [uid]
    assert reset_log(caplog) == []

    boot_id.write_text("0d6bd0b5-9a41-4a0e-8a5c-000000000002\n")  # the node rebooted
    drv = await driver()
    assert reset_log(caplog) == [
        f'Invalidating checkpoint: checkpoint nodeBootID "{first_boot}" != current '
        '"0d6bd0b5-9a41-4a0e-8a5c-000000000002"',
        "Create empty checkpoint",
    ]
    assert checkpoint_data(root) == {
        "version": "v1",
        "preparedClaims": [],
        "nodeBootID": "0d6bd0b5-9a41-4a0e-8a5c-000000000002",
    }
    assert not spec.exists() and not any(mps_dirs.iterdir()), "what a reboot leaves: no spec, no MPS directories"
    response = await prepare(drv.plugin.dra_socket, [("default", "c", uid)])
    assert response.claims[uid].error == "" and spec.exists()
    assert drv.preparer.prepares == 1, "prepared again, not answered from the old boot's checkpoint"


async def test_a_checkpoint_without_boot_id_keeps_its_claims(apiserver, driver, root, boot_id, caplog):
    """device_state.go (NewDeviceState) since v0.4.0: a checkpoint written before boot IDs is kept and
    the current boot ID injected (logged at NVIDIA's verbosity 4); a boot ID that cannot be read stops
    NVIDIA's plugin (``read node boot id: ...``), fakegpu logs that text and keeps the claims."""
    caplog.set_level(logging.DEBUG, logger="fakegpu.dra.boot_reset")
    drv = await driver("1xt4")
    uid = await prepared(apiserver, drv, "c", ["gpu-0"])
    doc = json.loads(checkpoint(root).path.read_text())
    del doc["data"]["nodeBootID"]  # as an older driver wrote it
    checkpoint(root).path.write_text(json.dumps({"checksum": checksum(doc["data"]), "data": doc["data"]}))
    await driver("1xt4")
    assert list(checkpoint(root).load()) == [uid]
    assert checkpoint_data(root)["nodeBootID"] == boot_id.read_text().strip()
    assert reset_log(caplog) == [
        "Create empty checkpoint",
        "The existing checkpoint file does not contain a boot ID, injecting current boot ID",
    ]

    boot_id.unlink()
    await driver("1xt4")
    assert list(checkpoint(root).load()) == [uid]
    assert f"read node boot id: failed to read boot ID from {boot_id}: open {boot_id}: no such file or directory" in (
        caplog.text
    )


# --- item 2: MPS puts the GPU in Exclusive_Process while it runs -------------------------------------------


async def test_mps_compute_mode_is_exclusive_while_prepared_and_default_after(apiserver, driver, root, boot_id):
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/sharing.go at 14fd2e6 (main, PR #1262):
    ``MpsControlDaemon.Start`` sets the claim's full GPUs to ``EXCLUSIVE_PROCESS``, ``Stop`` (at unprepare)
    back to ``DEFAULT``; a restart of the plugin leaves the GPU as it was, a reboot resets it. nvidia-smi
    reads it as NVML does: ``Exclusive_Process`` (``E. Process`` in the table) and ``Default``."""
    drv = await driver()
    smi_dir = root / "nvidia-smi"
    gpu0, gpu1 = (g.uuid for g in drv.live.inventory.node.gpus)
    unfollow = NvidiaSmiFiles(smi_dir).follow(drv.live)
    query = ("--query-gpu=uuid,compute_mode", "--format=csv,noheader")
    try:
        assert smi(smi_dir, *query, visible="all") == f"{gpu0}, Default\n{gpu1}, Default\n"
        uid = await prepared(apiserver, drv, "mps", ["gpu-0"], MPS)
        assert drv.live.gpu_policies.compute_mode(gpu0) == "Exclusive_Process"
        assert smi(smi_dir, *query, visible="all") == f"{gpu0}, Exclusive_Process\n{gpu1}, Default\n"
        assert "E. Process |" in smi(smi_dir, visible=gpu0)
        (mode,) = [line for line in smi(smi_dir, "-q", visible=gpu0).splitlines() if "Compute Mode" in line]
        assert mode.split(":") == ["    Compute Mode                          ", " Exclusive_Process"]
    finally:
        unfollow()

    drv = await driver()  # the plugin restarts; the GPU keeps its mode
    assert drv.live.gpu_policies.compute_mode(gpu0) == "Exclusive_Process"
    unfollow = NvidiaSmiFiles(smi_dir).follow(drv.live)
    try:
        response = await unprepare(drv.plugin.dra_socket, [("default", "mps", uid)])
        assert response.claims[uid].error == ""
        assert drv.live.gpu_policies.compute_mode(gpu0) == "Default"
        await eventually(
            lambda: smi(smi_dir, *query, visible=gpu0) == f"{gpu0}, Default\n", "nvidia-smi back to Default"
        )
        assert "E. Process" not in smi(smi_dir, visible=gpu0)
    finally:
        unfollow()

    await prepared(apiserver, drv, "mps-2", ["gpu-1"], MPS)
    assert drv.live.gpu_policies.compute_mode(gpu1) == "Exclusive_Process"
    boot_id.write_text("0d6bd0b5-9a41-4a0e-8a5c-000000000009\n")
    drv = await driver()
    assert drv.live.gpu_policies.compute_mode(gpu1) == "Default", "a reboot resets the GPU"


async def test_a_prepare_that_failed_after_setting_the_gpu_is_undone_by_unprepare(apiserver, driver, root):
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/device_state.go at 094807e (main): prepare
    records ``PrepareStarted``, applies the configs (the MPS daemon puts the GPU in ``EXCLUSIVE_PROCESS``, a
    time slice is set), then writes the claim's CDI spec; when that write fails the claim stays started. NVIDIA's
    unprepare of a started claim is a no-op outside DynamicMIG, leaving the GPU as prepare set it; fakegpu
    resets it (a README "Differences from NVIDIA" row), so a failed pod does not leave its GPU in
    Exclusive_Process or on a Long time slice."""
    drv = await driver()
    gpu0, gpu1 = (g.uuid for g in drv.live.inventory.node.gpus)
    long = gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})
    cdi = root / "cdi"
    if cdi.exists():
        cdi.rmdir()
    cdi.write_text("not a directory: the spec write fails\n")
    uids = {}
    for name, device, config in (("mps", "gpu-0", MPS), ("long", "gpu-1", long)):
        uids[name] = apiserver.create_direct(allocated_claim(name, NODE, [device], config=[opaque_config(config)]))[
            "metadata"
        ]["uid"]
        response = await prepare(drv.plugin.dra_socket, [("default", name, uids[name])])
        assert response.claims[uids[name]].error != ""
    assert [c.state for c in checkpoint(root).load().values()] == ["PrepareStarted", "PrepareStarted"]
    assert drv.live.gpu_policies.compute_mode(gpu0) == "Exclusive_Process", "set before the spec write failed"
    assert drv.live.gpu_policies.time_slice(gpu1) == "Long", "set before the spec write failed"

    cdi.unlink()
    for name, uid in uids.items():
        assert (await unprepare(drv.plugin.dra_socket, [("default", name, uid)])).claims[uid].error == ""
    assert checkpoint(root).load() == {}
    assert drv.live.gpu_policies.compute_mode(gpu0) == "Default"
    assert drv.live.gpu_policies.time_slice(gpu1) == "Default"


# --- item 3: no implicit time slicing; a time slice set is reset -----------------------------------------------


async def test_time_slice_only_from_a_stated_strategy_and_reset_on_unprepare(apiserver, driver, root):
    """kubernetes-sigs/dra-driver-nvidia-gpu PR #1183 (main at ed0d0e5): api/nvidia.com/resource/v1beta1/
    gpuconfig.go no longer turns a missing ``sharing`` into TimeSlicing, and cmd/gpu-kubelet-plugin/
    device_state.go records ``timeSliceApplied`` and resets the GPU to the ``Default`` interval at
    unprepare only when prepare set one (SetTimeSlice: compute mode ``DEFAULT``, then the interval)."""
    drv = await driver()
    gpu0, gpu1 = (g.uuid for g in drv.live.inventory.node.gpus)
    plain = {"apiVersion": GPU_CONFIG_API, "kind": "GpuConfig"}
    untouched = await prepared(apiserver, drv, "plain", ["gpu-1"], plain)
    (entry,) = [c for c in checkpoint_data(root)["preparedClaims"] if c["uid"] == untouched]
    assert "timeSlice" not in entry["devices"][0]
    assert not any(e.startswith("NVIDIA_TIME_SLICE_INTERVAL=") for e in entry["devices"][0]["env"])

    long = gpu_config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})
    uid = await prepared(apiserver, drv, "long", ["gpu-0"], long)
    (entry,) = [c for c in checkpoint_data(root)["preparedClaims"] if c["uid"] == uid]
    assert entry["devices"][0]["timeSlice"] == "Long"
    assert (drv.live.gpu_policies.time_slice(gpu0), drv.live.gpu_policies.time_slice(gpu1)) == ("Long", "Default")

    drv = await driver()  # the GPU keeps its interval across a restart of the plugin
    assert drv.live.gpu_policies.time_slice(gpu0) == "Long"
    assert (await unprepare(drv.plugin.dra_socket, [("default", "long", uid)])).claims[uid].error == ""
    assert drv.live.gpu_policies.time_slice(gpu0) == "Default"


# --- item 4: multi-user MPS needs Volta -----------------------------------------------------------------------


def pascal_first(gpus: str) -> Inventory:
    """A node whose GPU 0 reports compute capability 6.1 (a Pascal board: not in fakegpu's catalog, which
    starts at Volta, so the test makes one from the V100's entry)."""
    inventory = load_inventory(InventoryInputs(node_name=NODE, gpus=(gpus,)))
    first = inventory.node.gpus[0]
    pascal = dataclasses.replace(first, model=dataclasses.replace(first.model, compute_capability=(6, 1)))
    return dataclasses.replace(
        inventory, node=dataclasses.replace(inventory.node, gpus=(pascal, *inventory.node.gpus[1:]))
    )


async def test_multi_user_mps_needs_volta(apiserver, driver, root):
    """kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/sharing.go and mps_capability.go at
    421c0f4 (main, PR #1153): ``multiUser: true`` (the daemon's ``-M``, clients of several UIDs on one
    daemon) fails the claim with NVIDIA's text when a full GPU of the group is older than compute
    capability 7.0; a V100 (7.0) passes, and the claim is not prepared otherwise."""
    multi = gpu_config({"strategy": "MPS", "mpsConfig": {"multiUser": True}})
    drv = await driver(pascal_first("2xv100-32gb"))
    gpu0, gpu1 = (g.uuid for g in drv.live.inventory.node.gpus)
    uid = apiserver.create_direct(allocated_claim("multi", NODE, ["gpu-0", "gpu-1"], config=[opaque_config(multi)]))[
        "metadata"
    ]["uid"]
    response = await prepare(drv.plugin.dra_socket, [("default", "multi", uid)])
    assert response.claims[uid].error.endswith(
        "error applying config: error starting MPS control daemon: multiuser mode was requested but is not "
        f'supported: {gpu0} has insufficient cudaComputeCapability "6.1", wanted >= "7.0"'
    )
    assert drv.live.gpu_policies.compute_mode(gpu0) == "Default", "nothing was started"
    assert checkpoint(root).load() == {}

    await prepared(apiserver, drv, "volta", ["gpu-1"], multi)
    assert drv.live.gpu_policies.compute_mode(gpu1) == "Exclusive_Process"
