"""--inject-nvidia-smi end to end: the daemon's files on the host, kept current, mounted by Allocate and
by CDI specs, and the mounted script showing a pod exactly the devices it was given."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import pytest

from fakegpu.cli.inventory_options import inventory_inputs
from fakegpu.cli.main import full_parser
from fakegpu.cli.nvidia_smi_command import apply_inject_flags, run_nvidia_smi_command
from fakegpu.dra.daemon import DraSettings, run_dra_daemon
from fakegpu.dra.device_map import published_devices
from fakegpu.dra.gpu_prepare import GpuClaimPreparer
from fakegpu.dra.prepared_claims import ClaimRef, PreparedClaims
from fakegpu.fakeplugin.daemon import run_plugin_daemon
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.gpu_faults import GpuFault
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.nvidia_smi.devices import from_inventory, from_json, from_node
from fakegpu.telemetry.nvidia_smi.injection import CONTAINER_DEVICES_PATH, CONTAINER_SCRIPT_PATH
from fakegpu.telemetry.nvidia_smi.shell_script import TIME_OVERRIDE_ENV
from fakegpu.telemetry.nvidia_smi_files import NvidiaSmiFiles, rewrite_in_place, write_nvidia_smi_files
from fakegpu.testing.fake_node import FakeNode
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.cdi_runtime import claim_spec_path, read_spec_file, resolve
from tests.claim_builders import allocated_claim
from tests.daemon_tasks import stop_and_wait
from tests.dra_kubelet_client import prepare
from tests.eventually import eventually

GPU = "nvidia.com/gpu"
CUDA_IMAGE_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
"""What nvidia/cuda images set in their own environment; the container's env from Allocate or CDI wins."""
ALL = {"NVIDIA_VISIBLE_DEVICES": "all"}


def smi(script: Path | str, *argv: str, env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """Run the script as a container would: sh, the container's environment, nothing else."""
    full = {"PATH": os.environ["PATH"], TIME_OVERRIDE_ENV: "Wed Feb  4 10:17:25 2026", **(env or {})}
    done = subprocess.run(["sh", str(script), *argv], env=full, capture_output=True, text=True, timeout=20, check=False)
    assert done.stderr == ""
    return done.stdout, done.returncode


def cdi_env(spec: Mapping[str, Any], image: Mapping[str, str] | None = None) -> dict[str, str]:
    """A container's env given a CDI spec: the image's, then spec-wide edits, then the devices' edits."""
    edits = [
        *spec.get("containerEdits", {}).get("env", []),
        *(e for d in spec["devices"] for e in d["containerEdits"]["env"]),
    ]
    return {**(image or {}), **dict(e.split("=", 1) for e in edits)}


def cdi_mounts(spec: Mapping[str, Any]) -> dict[str, str]:
    return {m["containerPath"]: m["hostPath"] for m in spec["containerEdits"]["mounts"]}


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
    assert smi(script, "-L", env=ALL)[0].count("MIG") == 0

    live.set_health(live.inventory.node.gpus[0].uuid, False)  # nvidia-smi does not show health: no write
    assert files.writes == 1

    live.replace(load_inventory(dataclasses.replace(inputs, mig_layout="all-1g.10gb")))
    assert files.writes == 2
    listing, status = smi(script, "-L", env=ALL)
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
    async with FakeNode(tmp_path / "kubelet", inputs) as node:  # it writes the files, as the daemon does
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
        # topo -m: the pod's two GPUs only, numbered from 0, linked as the HGX baseboard links them.
        matrix, status = smi(script, "topo", "-m", env=env)
        assert status == 0 and matrix.splitlines()[:3] == [
            "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID",
            "GPU0\t X \tNV18\t\t0\t\tN/A",
            "GPU1\tNV18\t X \t\t0\t\tN/A",
        ]
        assert smi(script, "mig", "-lgi", env=env) == ("No MIG-enabled devices found.\n", 6)
        devices = json.loads(Path(mounts[CONTAINER_DEVICES_PATH][0]).read_text())
        assert from_json(devices) == from_inventory(node.inventory)


@pytest.mark.parametrize("strategy", ["cdi-cri", "cdi-annotations", "envvar", "volume-mounts"])
async def test_a_pod_sees_its_gpu_whatever_the_device_list_strategy(tmp_path, strategy):
    """The CDI strategies set no NVIDIA_VISIBLE_DEVICES and the image says ``all``: the script still shows
    exactly the pod's GPU, from the FAKEGPU_VISIBLE_DEVICES Allocate sets. With a CDI strategy the runtime
    also injects the plugin's spec (NVIDIA/k8s-device-plugin ``internal/cdi/cdi.go`` ``CreateSpecFile``):
    its common edits mount the same script and void the image's NVIDIA_VISIBLE_DEVICES."""
    smi_dir = tmp_path / "smi"
    inputs = InventoryInputs(
        node_name="node-a",
        gpus=("8xh100-80gb",),
        cli_flags={"device_list_strategy": strategy},
        nvidia_smi_dir=str(smi_dir),
    )
    async with FakeNode(tmp_path / "kubelet", inputs, cdi_root=tmp_path / "cdi") as node:
        # The node writes the fake nvidia-smi files and, with a CDI strategy, the plugin's CDI specs.
        pod = await node.run_pod("p1", {"c": {GPU: 1}})
        assert pod.admitted
        response = pod.responses["c"][GPU]
        # The kubelet's own record of what it allocated, independent of any env the plugin set.
        (given,) = [list(a.device_ids) for a in node.kubelet.manager.allocations if a.pod_uid == "p1"]
        assert len(given) == 1 and response.envs["FAKEGPU_VISIBLE_DEVICES"] == given[0]
        env = {**CUDA_IMAGE_ENV, **pod.env("c")}
        if strategy.startswith("cdi"):
            assert "NVIDIA_VISIBLE_DEVICES" not in pod.env("c")
            names = [c.name for c in response.cdi_devices] or next(iter(response.annotations.values())).split(",")
            edits = resolve(tmp_path / "cdi", names)
            env.update(edits.env)
            assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
            mounts = {m["containerPath"]: m["hostPath"] for m in edits.mounts}
            assert mounts[CONTAINER_SCRIPT_PATH] == str(smi_dir / "nvidia-smi")
            assert mounts[CONTAINER_DEVICES_PATH] == str(smi_dir / "devices.json")
        else:
            assert not (tmp_path / "cdi").exists()
        listing, status = smi(smi_dir / "nvidia-smi", "-L", env=env)
        assert (status, gpu_uuids(listing)) == (0, given)
        count, _ = smi(smi_dir / "nvidia-smi", "--query-gpu=count,uuid", "--format=csv,noheader", env=env)
        assert count == f"1, {given[0]}\n"


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
        pod = await node.run_pod("p1", {"c": {GPU: 1}})
        assert pod.admitted
        env = {**CUDA_IMAGE_ENV, **pod.env("c")}
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
    allocated = allocated_claim("x", "node-a", [mig_device], uid=uid)
    cdi_root = tmp_path / "cdi"
    cdi_root.mkdir()
    preparer = GpuClaimPreparer(
        _Claims({"x": allocated}),
        live,
        driver="gpu.nvidia.com",
        mig_mode="static",
        cdi_root=cdi_root,
        checkpoint=PreparedClaims(tmp_path / "checkpoint.json"),
    )
    await preparer.prepare(ClaimRef("default", "x", uid))
    spec = read_spec_file(claim_spec_path(cdi_root, uid))
    assert spec["cdiVersion"] == "0.5.0"
    mounts = cdi_mounts(spec)
    assert mounts == {
        CONTAINER_SCRIPT_PATH: str(smi_dir / "nvidia-smi"),
        CONTAINER_DEVICES_PATH: str(smi_dir / "devices.json"),
    }
    env = cdi_env(spec, CUDA_IMAGE_ENV)
    listing, status = smi(mounts[CONTAINER_SCRIPT_PATH], "-L", env=env)
    gpu1 = live.inventory.node.gpus[1]
    mig = next(m for m in gpu1.mig_devices if m.start == 3)
    assert (listing, status) == (
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {gpu1.uuid})\n  MIG 1g.10gb     Device  0: (UUID: {mig.uuid})\n",
        0,
    )


async def test_a_dynamic_mig_claim_sees_its_mig_device(tmp_path):
    """DRA ``--mig-mode dynamic``: prepare hands out a MIG device that is not in the inventory (its UUID is
    ``mig_uuid`` of its profile and placement); the files written with dynamic MIG know it, and the
    container sees that one device on a GPU in MIG mode whose memory it may not read."""
    smi_dir = tmp_path / "smi"
    inputs = InventoryInputs(node_name="node-a", gpus=("2xh100-80gb",), nvidia_smi_dir=str(smi_dir))
    live = LiveInventory(load_inventory(inputs))
    NvidiaSmiFiles(smi_dir, dynamic_mig=True).follow(live)
    published = published_devices(live.inventory.node, "dynamic")
    name = next(n for n, d in published.items() if d.kind == "mig" and d.parent_index == 1 and d.profile == "3g.40gb")
    uid = "2e800b5e-0000-4000-8000-000000000002"
    cdi_root = tmp_path / "cdi"
    cdi_root.mkdir()
    preparer = GpuClaimPreparer(
        _Claims({"x": allocated_claim("x", "node-a", [name], uid=uid)}),
        live,
        driver="gpu.nvidia.com",
        mig_mode="dynamic",
        cdi_root=cdi_root,
        checkpoint=PreparedClaims(tmp_path / "checkpoint.json"),
    )
    (prepared,) = await preparer.prepare(ClaimRef("default", "x", uid))
    assert prepared.uuid not in {m.uuid for g in live.inventory.node.gpus for m in g.mig_devices}
    spec = read_spec_file(claim_spec_path(cdi_root, uid))
    env = cdi_env(spec, CUDA_IMAGE_ENV)
    script = cdi_mounts(spec)[CONTAINER_SCRIPT_PATH]
    gpu1 = live.inventory.node.gpus[1]
    assert smi(script, "-L", env=env) == (
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {gpu1.uuid})\n  MIG 3g.40gb     Device  0: (UUID: {prepared.uuid})\n",
        0,
    )
    query, status = smi(script, "--query-gpu=mig.mode.current,memory.total", "--format=csv,noheader", env=env)
    assert (query, status) == ("Enabled, [Insufficient Permissions]\n", 0)
    table, _ = smi(script, env=env)
    assert "|                    N/A |     N/A      Default |" in table and "40448MiB" in table
    # mig -lgi / -lci list the one instance the claim created, as GPU 0 of the container.
    options = from_node(live.inventory.node, dynamic_mig=True).gpus[1].mig_options
    option = next(m for m in options if m.uuid == prepared.uuid)
    instances, status = smi(script, "mig", "-lgi", env=env)
    assert status == 0
    assert instances.splitlines()[5:] == [
        f"|   0  MIG 3g.40gb          9     {option.gi_id:>4}          {option.start}:4     |",
        "+-------------------------------------------------------+",
    ]
    computes, _ = smi(script, "mig", "-lci", env=env)
    assert "MIG 3g.40gb          2         0          0:3     |" in computes
    # Without dynamic MIG in the files, the same container would see nothing: the regression this guards.
    write_nvidia_smi_files(tmp_path / "static", live.inventory)
    assert smi(tmp_path / "static" / "nvidia-smi", "-L", env=env) == ("No devices were found\n", 6)


@pytest.mark.parametrize("strategy", ["envvar", "volume-mounts", "cdi-cri", "cdi-annotations"])
@pytest.mark.parametrize("sharing", [None, "time-slicing"])
async def test_without_the_option_nothing_is_mounted(tmp_path, strategy, sharing):
    """Every device list strategy, whole GPUs and replicas: no fake nvidia-smi mount and no fakegpu env."""
    config = None
    if sharing:
        config = tmp_path / "config.yaml"
        config.write_text(
            json.dumps({"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": GPU, "replicas": 2}]}}})
        )
    inputs = InventoryInputs(
        node_name="node-a",
        gpus=("2xt4",),
        cli_flags={"device_list_strategy": strategy},
        config_file=str(config) if config else None,
    )
    async with FakeNode(tmp_path / "kubelet", inputs) as node:
        assert node.inventory.config.nvidia_smi_dir is None
        pod = await node.run_pod("p1", {"c": {GPU: 1}})
        assert pod.admitted
        response = pod.responses["c"][GPU]
        paths = {m.container_path for m in response.mounts}
        assert not paths & {CONTAINER_SCRIPT_PATH, CONTAINER_DEVICES_PATH}
        assert len(paths) == (1 if strategy == "volume-mounts" else 0)
        assert not [k for k in pod.env("c") if k.startswith("FAKEGPU_")]


async def test_the_plugin_daemon_writes_and_mounts_it_with_the_flag(tmp_path):
    """``fakegpu plugin --inject-nvidia-smi``: the CLI flags become inputs through ``apply_inject_flags`` (what
    ``cli._run`` calls), the daemon writes the files before registering, the kubelet's Allocate answer
    mounts them, and the script run with the pod's own environment (over a CUDA image's) shows its GPU."""
    root = Path(tempfile.mkdtemp(prefix="fgsmi-", dir="/tmp"))
    smi_dir = tmp_path / "smi"
    args = full_parser().parse_args(
        [
            "plugin",
            "--node-name",
            "n1",
            "--gpus",
            "2xa100-40gb",
            "--device-list-strategy",
            "cdi-cri",
            "--inject-nvidia-smi",
            "--nvidia-smi-dir",
            str(smi_dir),
        ]
    )
    inputs = apply_inject_flags(args, inventory_inputs(args, {}), path_env="")
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    stop = asyncio.Event()
    task = asyncio.create_task(run_plugin_daemon(inputs, KubeletPaths(root / "kubelet"), stop=stop))
    try:
        await kubelet.wait_for(lambda: kubelet.allocatable().get(GPU) == 2 or task.done(), 10.0, "devices")
        assert not task.done()
        pod = await kubelet.run_pod("p", {"c": {GPU: 1}})
        assert pod.admitted
        response = pod.responses["c"][GPU]
        mounts = {m.container_path: m.host_path for m in response.mounts}
        assert mounts[CONTAINER_SCRIPT_PATH] == str(smi_dir / "nvidia-smi")
        assert mounts[CONTAINER_DEVICES_PATH] == str(smi_dir / "devices.json")
        env = {**CUDA_IMAGE_ENV, **pod.env("c")}
        listing, code = smi(mounts[CONTAINER_SCRIPT_PATH], "-L", env=env)
        assert code == 0 and gpu_uuids(listing) == [response.cdi_devices[0].name.rsplit("=", 1)[1]]
    finally:
        try:
            await stop_and_wait(stop, task)
        finally:
            await kubelet.stop()
            shutil.rmtree(root, ignore_errors=True)


DRA_NODE = "smi-node"


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    server = FakeApiServer("1.36").start()
    server.add_node(DRA_NODE)
    try:
        yield server
    finally:
        server.stop()


async def run_dra_and_prepare(
    apiserver: FakeApiServer,
    root: Path,
    argv: list[str],
    device: str,
    mig_mode: Literal["static", "dynamic"] = "static",
) -> dict[str, Any]:
    """``fakegpu dra ARGV --inject-nvidia-smi``'s inputs through ``apply_inject_flags``, ``run_dra_daemon``,
    then one claim of ``device`` prepared over the kubelet's DRA socket; returns the claim's CDI spec."""
    smi_dir = root / "smi"
    args = full_parser().parse_args(
        ["dra", "--node-name", DRA_NODE, *argv, "--inject-nvidia-smi", "--nvidia-smi-dir", str(smi_dir)]
    )
    inputs = apply_inject_flags(args, inventory_inputs(args, {}), path_env="")
    paths = KubeletPaths(root / "kubelet")
    settings = DraSettings(
        cdi_root=root / "cdi", mig_mode=mig_mode, kubeconfig=str(apiserver.kubeconfig(root / "kubeconfig"))
    )
    stop = asyncio.Event()
    task = asyncio.create_task(run_dra_daemon(inputs, paths, settings, stop=stop))
    try:
        socket = paths.dra_socket("gpu.nvidia.com")
        await eventually(lambda: task.done() or socket.exists(), "the DRA socket")
        assert not task.done() and socket.exists()
        assert sorted(p.name for p in smi_dir.iterdir()) == ["devices.json", "nvidia-smi"]
        uid = apiserver.create_direct(allocated_claim("c1", DRA_NODE, [device]))["metadata"]["uid"]
        answer = await prepare(socket, [("default", "c1", uid)])
        assert answer.claims[uid].error == ""
        spec: dict[str, Any] = read_spec_file(claim_spec_path(root / "cdi", uid))
        return spec
    finally:
        stop.set()
        await asyncio.wait_for(task, 5.0)


async def test_the_dra_daemon_writes_the_files_and_its_cdi_specs_mount_them(apiserver, root):
    """``fakegpu dra --inject-nvidia-smi``: files written before serving, the claim's CDI spec mounts them
    and sets FAKEGPU_VISIBLE_DEVICES, and the script with the container's env shows the claim's MIG device."""
    argv = ["--gpus", "2xh100-80gb", "--mig-layout", "all-1g.10gb"]
    spec = await run_dra_and_prepare(apiserver, root, argv, "gpu-1-mig-1g10gb-19-3")
    mounts = cdi_mounts(spec)
    assert mounts == {
        CONTAINER_SCRIPT_PATH: str(root / "smi" / "nvidia-smi"),
        CONTAINER_DEVICES_PATH: str(root / "smi" / "devices.json"),
    }
    env = cdi_env(spec, CUDA_IMAGE_ENV)
    # NVIDIA's common edit voids the image's NVIDIA_VISIBLE_DEVICES=all; the device's own edit names it.
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["FAKEGPU_VISIBLE_DEVICES"].startswith("MIG-")
    listing, status = smi(mounts[CONTAINER_SCRIPT_PATH], "-L", env=env)
    assert status == 0 and listing.count("\n") == 2
    assert listing.endswith(f"Device  0: (UUID: {env['FAKEGPU_VISIBLE_DEVICES']})\n")


async def test_the_dra_daemon_in_dynamic_mig_mode_describes_its_dynamic_devices(apiserver, root):
    """With ``--mig-mode dynamic`` the daemon writes the files with the dynamic MIG devices, so the device a
    claim prepares (in no inventory) is the one its container sees."""
    spec = await run_dra_and_prepare(apiserver, root, ["--gpus", "1xh100-80gb"], "gpu-0-mig-1g10gb-19-3", "dynamic")
    env = cdi_env(spec, CUDA_IMAGE_ENV)
    listing, status = smi(cdi_mounts(spec)[CONTAINER_SCRIPT_PATH], "-L", env=env)
    assert (status, listing.count("\n")) == (0, 2)
    assert listing.endswith(f"  MIG 1g.10gb     Device  0: (UUID: {env['FAKEGPU_VISIBLE_DEVICES']})\n")


async def test_faults_on_a_running_node_reach_the_mounted_script_and_the_host_cli(tmp_path, capsys):
    """A fault struck on a running node (``LiveInventory.strike_gpu``, what ``fakegpu ctl gpu-fault`` calls)
    rewrites the injected files: the pod's script shows it, and so does ``fakegpu nvidia-smi --devices-file``
    on the host, which reads the daemon's devices.json. Thermal recovers when cleared, a reset ends the
    volatile ECC count and the pending remap (NVIDIA's A100 memory error management guide), a GPU off the
    bus prints nvidia-smi's error line (NVIDIA/nvidia-container-toolkit#69, JosephKJ/OWOD#81) and stays."""
    smi_dir = tmp_path / "smi"
    inputs = InventoryInputs(node_name="node-a", gpus=("2xh100-80gb",), nvidia_smi_dir=str(smi_dir))
    async with FakeNode(tmp_path / "kubelet", inputs) as node:
        pod = await node.run_pod("p1", {"c": {GPU: 1}})
        env = pod.env("c")
        held = env["NVIDIA_VISIBLE_DEVICES"]
        script = smi_dir / "nvidia-smi"
        fields = "temperature.gpu,clocks_event_reasons.hw_thermal_slowdown,ecc.errors.uncorrected.volatile.total"
        fields += ",ecc.errors.uncorrected.aggregate.total,remapped_rows.uncorrectable,remapped_rows.pending"

        def read() -> str:
            return smi(script, f"--query-gpu={fields}", "--format=csv,noheader", env=env)[0].strip()

        healthy = read()
        assert healthy.split(", ")[1:] == ["Not Active", "0", "0", "0", "No"]
        node.live.strike_gpu(held, GpuFault(kind="thermal", temperature=96))
        node.live.strike_gpu(held, GpuFault(kind="ecc-uncorrectable", count=2))
        await eventually(lambda: read() == "96, Active, 2, 2, 2, Yes", "the fault in the pod's nvidia-smi")
        node.live.recover_gpu(held, "thermal")
        node.live.recover_gpu(held, "reset")
        await eventually(lambda: read().split(", ")[1:] == ["Not Active", "0", "2", "2", "No"], "the recovery")

        node.live.strike_gpu(held, GpuFault(kind="off-bus"))
        bus = next(g.bus_id for g in from_inventory(node.inventory).gpus if g.uuid == held)
        lost = f"Unable to determine the device handle for GPU{bus[4:]}: GPU is lost."
        await eventually(lambda: smi(script, env=env)[0].startswith(lost), "the GPU off the bus")
        assert smi(script, env=env)[1] == 15
        with pytest.raises(ValueError, match="does not recover"):
            node.live.recover_gpu(held, "off-bus")

        args = full_parser().parse_args(["nvidia-smi", "--devices-file", str(smi_dir / "devices.json")])
        assert run_nvidia_smi_command(args, {"PATH": os.environ["PATH"]}) == 15
        assert capsys.readouterr().out.startswith(lost)
        other = next(g.uuid for g in node.inventory.node.gpus if g.uuid != held)
        assert run_nvidia_smi_command(args, {"NVIDIA_VISIBLE_DEVICES": other}) == 0
        assert "NVIDIA H100 80GB HBM3" in capsys.readouterr().out


def test_a_running_containers_mount_sees_faults_struck_after_it_started(tmp_path):
    """A bind mount follows the inode (a hard link stands for it here): after the first atomic write, the
    daemon rewrites the same inode, so the container's nvidia-smi shows a GPU lost after it started."""
    live = LiveInventory(load_inventory(InventoryInputs(node_name="n1", gpus=("2xh100-80gb",))))
    files = NvidiaSmiFiles(tmp_path / "smi")
    unsubscribe = files.follow(live)
    try:
        mounted = tmp_path / "container-view"
        os.link(tmp_path / "smi" / "nvidia-smi", mounted)
        assert smi(mounted, "-L", env=ALL)[1] == 0
        live.strike_gpu("1", GpuFault(kind="gpu-lost"))
        assert files.writes == 2
        lost = "Unable to determine the device handle for GPU0000:28:00.0: GPU is lost."
        assert smi(mounted, "-L", env=ALL)[0].startswith(lost)
        assert os.stat(mounted).st_ino == os.stat(tmp_path / "smi" / "nvidia-smi").st_ino
    finally:
        unsubscribe()


def _run(script: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], TIME_OVERRIDE_ENV: "Wed Feb  4 10:17:25 2026", **ALL}
    return subprocess.run(["sh", str(script), *argv], env=env, capture_output=True, text=True, timeout=60, check=False)


def test_a_read_that_straddles_a_rewrite_is_read_again(tmp_path):
    """What a reader may see during an in-place rewrite: the new data up to some point and the old after it,
    or the whole new data followed by the old tail. Each is refused (the generation records differ) rather
    than printed; the shell reads the file again, and once the rewrite is done it prints the new output."""
    inputs = InventoryInputs(node_name="n1", gpus=("2xh100-80gb",))
    live = LiveInventory(load_inventory(inputs))
    files = NvidiaSmiFiles(tmp_path / "smi")
    files.update(live.inventory)
    script = tmp_path / "smi" / "nvidia-smi"
    old = script.read_bytes()
    live.strike_gpu("0", GpuFault(kind="thermal"))
    files.update(live.inventory, conditions=live.conditions())
    new = script.read_bytes()
    assert len(new) < len(old)  # "Idle: Not Active" and "Active" are shorter than "Idle: Active", "Not Active"
    expected = _run(script, "-q").stdout
    data = old.index(b"FAKEGPU_NVIDIA_SMI_DATA\n")
    torn = [new[:k] + old[k:] for k in (data + 100, (data + len(old)) // 2, len(old) - 50)]
    torn.append(new + old[len(new) :])  # the new data, then the old tail (the write done, not yet cut)
    for blob in torn:
        script.write_bytes(blob)
        broken = _run(script, "-q")
        assert (broken.stdout, broken.returncode) == ("", 255)
        assert "kept changing while it was read" in broken.stderr

    script.write_bytes(torn[1])
    running = subprocess.Popen(
        ["sh", str(script), "-q"],
        env={"PATH": os.environ["PATH"], TIME_OVERRIDE_ENV: "Wed Feb  4 10:17:25 2026", **ALL},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    rewrite_in_place(script, new)
    stdout, stderr = running.communicate(timeout=60)
    assert (stdout, stderr, running.returncode) == (expected, "", 0)
