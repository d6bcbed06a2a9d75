"""``fakegpu virtual-nodes --fault`` / ``--recover`` against the tests' API server: the targeted nodes' slices get
NVIDIA's taints or their allocatable drops, nothing else is touched, recovery puts them back, re-runs and the
watcher keep the faults, schedules run on their clock, and a fleet fault costs at most ten calls per faulted
node (ten writes with dynamic MIG)."""

from __future__ import annotations

import asyncio
import collections
import io
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from lightkube import AsyncClient

from fakegpu.cli.virtual_nodes_command import pools_from_args, run_virtual_nodes, settings_from_args
from fakegpu.dra.health_taints import TAINT_KEY_GPU_LOST, TAINT_KEY_XID
from fakegpu.sharing.fault_record import FAULTS_ANNOTATION, decode_faults
from fakegpu.sharing.gpu_faults import parse_fault_text
from fakegpu.sharing.labels import CLIQUE_LABEL, TIMESTAMP_LABEL
from fakegpu.virtual_nodes.controller import VirtualNodeController
from fakegpu.virtual_nodes.fleet_faults import (
    FaultReport,
    FaultTargets,
    apply_plan,
    fleet_controller,
    plan_fleet_faults,
)
from fakegpu.virtual_nodes.pools import build_virtual_nodes
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.eventually import eventually
from tests.integration.test_virtual_nodes import slices_of
from tests.integration.virtual_nodes_harness import Run, command_runner, parse, strict_apiserver

GATE = ("--feature-gates", "NVMLDeviceHealthCheck=true")
DRA = ("--count", "3", "--gpus", "8xh100-80gb", "--gpu-mode", "dra", "--no-timestamp", *GATE)
DEVICE_PLUGIN = ("--count", "3", "--gpus", "8xh100-80gb", "--no-timestamp")
NVL72 = ("--gpus", "4xgb200", "--racks", "2", "--nodes-per-rack", "2", "--gpu-mode", "dra", "--no-timestamp", *GATE)
NODES = [f"fakegpu-virtual-000{i}" for i in range(3)]
TARGET = NODES[1]

# Per kind, on GPU 1 of the middle node: the DRA taint NVIDIA's driver sets on that GPU's device (None: none),
# the allocatable nvidia.com/gpu the device plugin leaves (capacity stays 8), and the recovery that ends it.
KINDS: dict[str, tuple[dict[str, str] | None, int, str]] = {
    "xid,xid=79": ({"key": TAINT_KEY_XID, "value": "79", "effect": "NoSchedule"}, 7, "reset"),
    "xid,xid=13": ({"key": TAINT_KEY_XID, "value": "13", "effect": "None"}, 8, "reset"),
    "off-bus": ({"key": TAINT_KEY_XID, "value": "79", "effect": "NoSchedule"}, 7, "all"),
    "gpu-lost": ({"key": TAINT_KEY_GPU_LOST, "effect": "NoSchedule"}, 0, "all"),
    "ecc-uncorrectable,count=2": ({"key": TAINT_KEY_XID, "value": "94", "effect": "NoSchedule"}, 7, "reset"),
    "ecc-correctable": ({"key": TAINT_KEY_XID, "value": "92", "effect": "NoSchedule"}, 7, "reset"),
    "thermal,temperature=97": (None, 8, "thermal"),
    "power": (None, 8, "power"),
    "nvlink,link=3": ({"key": TAINT_KEY_XID, "value": "74", "effect": "NoSchedule"}, 7, "reset"),
    "fabric": (None, 8, "fabric"),
}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    yield from strict_apiserver()


@pytest.fixture
async def client(server: FakeApiServer) -> AsyncIterator[AsyncClient]:
    c = server.client()
    yield c
    await c.close()


@pytest.fixture
def run(client: AsyncClient) -> Callable[..., Awaitable[Run]]:
    return command_runner(client)


def versions(server: FakeApiServer) -> dict[str, str]:
    """Every stored node's and slice's resourceVersion, by kind and name."""
    out = {}
    for plural in ("nodes", "resourceslices"):
        for obj in server.objects(plural):
            out[f"{plural}/{obj['metadata']['name']}"] = obj["metadata"]["resourceVersion"]
    return out


def written(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {k for k in after if before.get(k) != after[k]} | (before.keys() - after.keys())


def owners(server: FakeApiServer) -> dict[str, str]:
    """The node each stored node and slice belongs to, by the keys of ``versions``."""
    out = {f"nodes/{n['metadata']['name']}": n["metadata"]["name"] for n in server.objects("nodes")}
    out.update(
        {f"resourceslices/{s['metadata']['name']}": s["spec"]["nodeName"] for s in server.objects("resourceslices")}
    )
    return out


def of_node(key: str, server: FakeApiServer, node: str) -> bool:
    return owners(server).get(key) == node


def device_taints(server: FakeApiServer, node: str) -> dict[str, list[dict[str, str]]]:
    """The taints of the node's GPU devices that have any, without the server's timeAdded (checked apart)."""
    out = {}
    for s in slices_of(server, node):
        for device in s["spec"].get("devices") or []:
            taints = device.get("taints")
            if taints:
                assert all(t.get("timeAdded") for t in taints), "the API server stamps timeAdded"
                out[device["name"]] = [{k: v for k, v in t.items() if k != "timeAdded"} for t in taints]
    return out


def gpu_status(server: FakeApiServer, node: str) -> tuple[str, str]:
    status = (server.get_object("nodes", node) or {})["status"]
    return status["capacity"]["nvidia.com/gpu"], status["allocatable"]["nvidia.com/gpu"]


@pytest.mark.parametrize("text", list(KINDS))
async def test_a_fault_taints_the_dra_devices_of_the_targeted_node_only_and_recovery_removes_them(server, run, text):
    """Follows kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/device_health.go @ v0.4.1 (the taint
    per event; gpu-lost on every device) and kubernetes/kubernetes pkg/apis/resource/v1/defaults.go @ 61c7fad
    (the server stamps timeAdded)."""
    assert (await run(*DRA)).code == 0
    before = versions(server)
    result = await run(*DRA, "--fault", text, "--fault-nodes", TARGET, "--fault-gpus", "1")
    assert result.code == 0, result.err
    taint, _, recovery = KINDS[text]
    changed = written(before, versions(server))
    assert changed and all(of_node(k, server, TARGET) for k in changed), changed
    if taint is None:
        assert device_taints(server, TARGET) == {}
        assert changed == {f"nodes/{TARGET}"}, "the record alone: NVIDIA taints nothing for this kind"
    elif taint["key"] == TAINT_KEY_GPU_LOST:
        assert device_taints(server, TARGET) == {f"gpu-{i}": [taint] for i in range(8)}
    else:
        assert device_taints(server, TARGET) == {"gpu-1": [taint]}
    node = server.get_object("nodes", TARGET) or {}
    assert text.split(",")[0] in node["metadata"]["annotations"][FAULTS_ANNOTATION]
    assert all(device_taints(server, n) == {} for n in NODES if n != TARGET)

    again = await run(*DRA)
    assert again.code == 0 and "3 unchanged" in again.out and "ResourceSlices: 0 created, 0 updated" in again.out

    result = await run(*DRA, "--recover", recovery, "--fault-nodes", TARGET)
    assert result.code == 0, result.err
    assert device_taints(server, TARGET) == {}
    assert FAULTS_ANNOTATION not in ((server.get_object("nodes", TARGET) or {})["metadata"].get("annotations") or {})


@pytest.mark.parametrize("text", list(KINDS))
async def test_a_fault_drops_allocatable_of_the_targeted_device_plugin_node_and_recovery_restores_it(server, run, text):
    """Follows kubernetes/kubernetes pkg/kubelet/cm/devicemanager/manager.go GetCapacity @ 7510f32: capacity
    counts every device, allocatable the healthy ones."""
    assert (await run(*DEVICE_PLUGIN)).code == 0
    before = versions(server)
    result = await run(*DEVICE_PLUGIN, "--fault", text, "--fault-nodes", TARGET, "--fault-gpus", "1")
    assert result.code == 0, result.err
    _, allocatable, recovery = KINDS[text]
    assert gpu_status(server, TARGET) == ("8", str(allocatable))
    assert written(before, versions(server)) == {f"nodes/{TARGET}"}
    assert all(gpu_status(server, n) == ("8", "8") for n in NODES if n != TARGET)
    result = await run(*DEVICE_PLUGIN, "--recover", recovery, "--fault-nodes", TARGET)
    assert result.code == 0, result.err
    assert gpu_status(server, TARGET) == ("8", "8")


async def test_a_reset_leaves_a_gpu_off_the_bus_as_it_is(server, run):
    """Follows fakegpu.sharing.gpu_faults.FAULT_KINDS (after NVIDIA's XID 79 text): only a reboot brings a GPU
    back on the bus; ``--recover all`` stands for it. The GFD timestamp of the bring-up stays throughout."""
    stamped = DEVICE_PLUGIN[:-1]
    await run(*stamped)
    stamp = (server.get_object("nodes", TARGET) or {})["metadata"]["labels"][TIMESTAMP_LABEL]
    await run(*stamped, "--fault", "off-bus", "--fault-nodes", TARGET, "--fault-gpus", "2")
    result = await run(*stamped, "--recover", "reset", "--fault-nodes", TARGET)
    assert result.code == 0 and "1 unchanged" in result.out, result.out
    assert gpu_status(server, TARGET) == ("8", "7")
    await run(*stamped, "--recover", "all", "--fault-nodes", TARGET)
    assert gpu_status(server, TARGET) == ("8", "8")
    assert (server.get_object("nodes", TARGET) or {})["metadata"]["labels"][TIMESTAMP_LABEL] == stamp


async def test_a_fabric_fault_on_a_rack_takes_the_clique_label_off_its_nodes_until_it_recovers(server, run):
    """Follows NVIDIA/k8s-device-plugin internal/lm/imex.go @ v0.20.0 and NVIDIA/go-nvlib
    pkg/nvlib/device/device.go IsFabricAttached @ 2442aa7."""
    assert (await run(*NVL72)).code == 0
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in server.objects("nodes")}
    result = await run(*NVL72, "--fault", "fabric", "--fault-racks", "1")
    assert result.code == 0, result.err
    now = {n["metadata"]["name"]: n["metadata"]["labels"] for n in server.objects("nodes")}
    assert [n for n in now if CLIQUE_LABEL not in now[n]] == ["fakegpu-virtual-0002", "fakegpu-virtual-0003"]
    assert now["fakegpu-virtual-0000"] == labels["fakegpu-virtual-0000"]
    clique = labels["fakegpu-virtual-0002"][CLIQUE_LABEL]
    result = await run(*NVL72, "--recover", "fabric", "--fault-cliques", clique)
    assert result.code == 0, result.err
    assert {n["metadata"]["name"]: n["metadata"]["labels"] for n in server.objects("nodes")} == labels


async def test_without_the_health_gate_dra_devices_stay_untainted_and_the_run_says_why(server, run):
    """Follows kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/driver.go @ v0.4.1: no taints
    without NVMLDeviceHealthCheck."""
    plain = ("--count", "2", "--gpus", "8xh100-80gb", "--gpu-mode", "dra", "--no-timestamp")
    await run(*plain)
    result = await run(*plain, "--fault", "xid,xid=79", "--fault-nodes", "fakegpu-virtual-0001")
    assert result.code == 0
    assert [line for line in result.err.splitlines() if "NVMLDeviceHealthCheck" in line] != []
    assert device_taints(server, "fakegpu-virtual-0001") == {}
    assert FAULTS_ANNOTATION in (server.get_object("nodes", "fakegpu-virtual-0001") or {})["metadata"]["annotations"]


async def test_a_target_the_cluster_does_not_have_is_one_error_line(server, run):
    await run("--count", "1", "--gpus", "2xh100-80gb", "--no-timestamp")
    result = await run("--count", "2", "--gpus", "2xh100-80gb", "--fault", "power", "--fault-nodes", NODES[1])
    assert result.code == 1
    assert "error: node fakegpu-virtual-0001: no such virtual node in the cluster" in result.err


async def test_the_watcher_keeps_the_faults_and_rewrites_a_deleted_slice_with_its_taints(server, client, run):
    """A fault written by another run while --watch runs is adopted (not undone), and a slice someone deletes
    comes back with its devices' taints."""
    stop = asyncio.Event()
    out, err = io.StringIO(), io.StringIO()
    watching = asyncio.create_task(
        run_virtual_nodes(parse(*DRA, "--watch"), client=client, out=out, err=err, retry_pause=0.01, stop=stop)
    )
    try:
        await eventually(lambda: "watching the virtual nodes" in out.getvalue(), what="the watch")
        other = server.client()
        try:
            code = await run_virtual_nodes(
                parse(*DRA, "--fault", "xid,xid=48", "--fault-nodes", TARGET, "--fault-gpus", "0"),
                client=other,
                out=io.StringIO(),
                err=io.StringIO(),
            )
        finally:
            await other.close()
        assert code == 0
        tainted = {"gpu-0": [{"key": TAINT_KEY_XID, "value": "48", "effect": "NoSchedule"}]}
        assert device_taints(server, TARGET) == tainted
        (stored,) = slices_of(server, TARGET)
        server.delete_direct("resourceslices", stored["metadata"]["name"])
        await eventually(
            lambda: (
                [s["metadata"]["name"] for s in slices_of(server, TARGET)] not in ([], [stored["metadata"]["name"]])
            ),
            what="the slice re-created",
        )
        assert device_taints(server, TARGET) == tainted
        assert FAULTS_ANNOTATION in (server.get_object("nodes", TARGET) or {})["metadata"]["annotations"]
    finally:
        stop.set()
        assert await watching == 0


class StepClock:
    """A clock whose time moves only when the schedule sleeps: the pacing without waiting."""

    def __init__(self, stop_after: int | None = None, stop: asyncio.Event | None = None) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.stop_after = stop_after
        self.stop = stop

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.stop is not None and len(self.sleeps) == self.stop_after:
            self.stop.set()
            await asyncio.sleep(3600)  # cancelled: the stop wins


async def controller_for(client: AsyncClient, *argv: str) -> tuple[VirtualNodeController, list[Any]]:
    """The library's way in, as the cluster scenarios take it: the fleet from the flags, then its controller."""
    args = parse(*argv)
    settings = settings_from_args(args, env={})
    nodes, _ = build_virtual_nodes(pools_from_args(args, env={}), settings.name_prefix, None)
    return await fleet_controller(client, nodes, settings, retry_pause=0.01), nodes


async def test_a_schedule_over_time_writes_one_gpu_per_step_on_its_clock(server, client, run):
    fleet = ("--count", "10", "--gpus", "2xh100-80gb", "--no-timestamp")
    await run(*fleet)
    controller, nodes = await controller_for(client, *fleet)
    plan = plan_fleet_faults(
        nodes, FaultTargets(fraction=0.5, seed=4), fault=parse_fault_text("xid,xid=79", "x"), over=600
    )
    clock = StepClock()
    report = await apply_plan(controller, plan, clock)
    assert report.done == len(plan.hits) == 10 and report.ok
    assert clock.sleeps == pytest.approx([60.0] * 9)
    lost = sum(2 - int(gpu_status(server, v.name)[1]) for v in nodes)
    assert lost == 10, "ten GPUs gone from allocatable, one per step"


async def test_a_stopped_schedule_ends_between_two_hits(server, client, run):
    fleet = ("--count", "10", "--gpus", "2xh100-80gb", "--no-timestamp")
    await run(*fleet)
    controller, nodes = await controller_for(client, *fleet)
    plan = plan_fleet_faults(nodes, FaultTargets(fraction=1.0, seed=1), fault=parse_fault_text("power", "x"), over=60)
    stop = asyncio.Event()
    report = await apply_plan(controller, plan, StepClock(stop_after=3, stop=stop), stop, FaultReport(len(plan.hits)))
    assert report.stopped and report.done == 3
    faulted = [n for n in server.objects("nodes") if FAULTS_ANNOTATION in n["metadata"]["annotations"]]
    assert 1 <= len(faulted) <= 3


async def test_the_command_rehearses_a_schedule_faster_with_a_time_scale(server, run):
    fleet = ("--count", "4", "--gpus", "2xh100-80gb", "--no-timestamp")
    await run(*fleet)
    result = await run(
        *fleet, "--fault", "thermal", "--fault-fraction", "0.5", "--fault-over", "10m", "--time-scale", "20000"
    )
    assert result.code == 0, result.err
    assert "4 GPU(s)" in result.out and "4/4 hit(s) done" in result.out


async def test_a_fleet_fault_on_1000_nodes_costs_at_most_ten_calls_per_faulted_node_and_spares_the_healthy():
    """The issue's budget: 5 % of the GPUs of 1000 DRA nodes (8 GPUs each), at once."""
    server = FakeApiServer("1.36", validate_schema=False).start()
    client = server.client()
    fleet = ("--count", "1000", "--gpus", "8xh100-80gb", "--gpu-mode", "dra", "--max-server-memory", "0", *GATE)
    try:
        out, err = io.StringIO(), io.StringIO()
        assert await run_virtual_nodes(parse(*fleet), client=client, out=out, err=err) == 0, err.getvalue()
        before, first = versions(server), len(server.requests)
        argv = (*fleet, "--fault", "ecc-uncorrectable", "--fault-fraction", "0.05", "--fault-seed", "11")
        code = await run_virtual_nodes(parse(*argv), client=client, out=out, err=err)
        assert code == 0, err.getvalue()
        requests = server.requests[first:]
        faulted = {
            n["metadata"]["name"] for n in server.objects("nodes") if FAULTS_ANNOTATION in n["metadata"]["annotations"]
        }
        records = [
            decode_faults(n["metadata"]["annotations"].get(FAULTS_ANNOTATION), "node") for n in server.objects("nodes")
        ]
        assert sum(len(r) for r in records) == 400, "5 % of 8000 GPUs"
        assert len(requests) <= 10 * len(faulted), f"{len(requests)} calls for {len(faulted)} faulted nodes"
        per_node = {n: sum(n in r.path or n in str(r.query) for r in requests) for n in faulted}
        assert max(per_node.values()) <= 10, per_node
        changed = written(before, versions(server))
        owner = owners(server)
        healthy = [k for k in changed if owner.get(k) not in faulted]
        assert healthy == [], "no write to a healthy node or its slices"
        assert not any(
            r.method != "GET" and not any(n in r.path for n in faulted) for r in requests if "/nodes/" in r.path
        )
        first = len(server.requests)
        one = (*fleet, "--fault", "thermal", "--fault-nodes", "fakegpu-virtual-0500")
        assert await run_virtual_nodes(parse(*one), client=client, out=out, err=err) == 0
        paths = [r.path for r in server.requests[first:]]
        assert len(paths) <= 5, f"one node: discovery, its get and patch (no slice to change), {paths}"
    finally:
        await client.close()
        server.stop()


async def test_a_gpu_fault_writes_the_gpu_pool_only_and_leaves_the_compute_domain_slice_alone(server, run):
    """Each kubelet plugin publishes its own pool (kubernetes-sigs/dra-driver-nvidia-gpu
    cmd/compute-domain-kubelet-plugin/driver.go @ 82a11c2 beside cmd/gpu-kubelet-plugin), and a pool's generation
    is its own (kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/resourceslice/
    resourceslicecontroller.go @ 6d8b41f): a GPU taint change leaves the compute-domain.nvidia.com slice as it is."""
    assert (await run(*NVL72)).code == 0
    node = "fakegpu-virtual-0001"
    before = versions(server)
    result = await run(*NVL72, "--fault", "xid,xid=79", "--fault-nodes", node, "--fault-gpus", "0")
    assert result.code == 0, result.err
    changed = written(before, versions(server))
    drivers = {s["metadata"]["name"]: s["spec"]["driver"] for s in server.objects("resourceslices")}
    assert {drivers[k.split("/", 1)[1]] for k in changed if k.startswith("resourceslices/")} == {"gpu.nvidia.com"}
    assert f"nodes/{node}" in changed
    again = await run(*NVL72)
    assert again.code == 0 and "ResourceSlices: 0 created, 0 updated" in again.out, again.out


async def test_the_same_fault_run_again_changes_nothing_and_writes_nothing(server, run):
    """A GPU's record holds a fault once, as NVIDIA's driver holds one taint per key and value on a device
    (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/device_health.go @ v0.4.1): re-running a
    --fault writes nothing, as every virtual-nodes re-run with the same arguments."""
    assert (await run(*DRA)).code == 0
    fault = (*DRA, "--fault", "xid,xid=79", "--fault-nodes", TARGET, "--fault-gpus", "2")
    assert (await run(*fault)).code == 0
    before, first = versions(server), len(server.requests)
    again = await run(*fault)
    assert again.code == 0 and "1 unchanged" in again.out, again.out
    assert written(before, versions(server)) == set()
    assert [r.method for r in server.requests[first:] if r.method != "GET"] == []
    record = (server.get_object("nodes", TARGET) or {})["metadata"]["annotations"][FAULTS_ANNOTATION]
    assert decode_faults(record, TARGET) == {2: (parse_fault_text("xid,xid=79", "t"),)}


async def test_a_fault_run_whose_pool_flags_differ_from_the_bring_up_is_refused_and_writes_nothing(server, run):
    """A DRA node tainted with the NVMLDeviceHealthCheck gate keeps its taint when a thermal fault is run without
    the gate (NVIDIA's driver publishes taints only with it: kubernetes-sigs/dra-driver-nvidia-gpu
    cmd/gpu-kubelet-plugin/driver.go @ v0.4.1): the run is refused, naming the node, with exit 2."""
    assert (await run(*DRA)).code == 0
    assert (await run(*DRA, "--fault", "xid,xid=79", "--fault-nodes", TARGET, "--fault-gpus", "1")).code == 0
    taints = device_taints(server, TARGET)
    before, first = versions(server), len(server.requests)
    plain = tuple(a for a in DRA if a not in GATE)
    result = await run(*plain, "--fault", "thermal", "--fault-nodes", TARGET)
    assert result.code == 2, result.out
    errors = [line for line in (result.out + result.err).splitlines() if "error:" in line]
    assert len(errors) == 1 and TARGET in errors[0] and "pool flags differ from its bring-up" in errors[0], errors
    assert written(before, versions(server)) == set()
    assert [r.method for r in server.requests[first:] if r.method != "GET"] == []
    assert device_taints(server, TARGET) == taints != {}


async def test_a_time_sliced_node_keeps_its_capacity_when_the_config_file_is_left_off(server, run, tmp_path):
    """Follows NVIDIA/k8s-device-plugin api/config/v1/replicas.go @ v0.20.0 (time-slicing replicas multiply the
    capacity): a fault run without the bring-up's --config-file would halve it; it is refused and writes nothing."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"
    )
    assert (await run(*DEVICE_PLUGIN, "--config-file", str(config))).code == 0
    assert gpu_status(server, TARGET) == ("16", "16")
    before = versions(server)
    result = await run(*DEVICE_PLUGIN, "--fault", "xid,xid=79", "--fault-nodes", TARGET)
    assert result.code == 2 and "pool flags differ from its bring-up" in result.out + result.err, result.out
    assert written(before, versions(server)) == set()
    assert gpu_status(server, TARGET) == ("16", "16")
    fault = ("--fault", "xid,xid=79", "--fault-nodes", TARGET, "--fault-gpus", "1")
    result = await run(*DEVICE_PLUGIN, "--config-file", str(config), *fault)
    assert result.code == 0, result.out + result.err
    assert gpu_status(server, TARGET) == ("16", "14")


async def test_a_device_plugin_fault_run_says_nothing_of_resource_slices_and_reads_none(server, run):
    """A device-plugin node advertises its GPUs as capacity (NVIDIA/k8s-device-plugin @ v0.20.0), so its fault run
    neither announces nor reads the DRA slice layout: a get and a patch or two of the node."""
    assert (await run(*DEVICE_PLUGIN)).code == 0
    first = len(server.requests)
    result = await run(*DEVICE_PLUGIN, "--fault", "xid,xid=79", "--fault-nodes", TARGET, "--fault-gpus", "1")
    assert result.code == 0, result.err
    assert "ResourceSlices" not in result.out + result.err, result.out
    assert not any("resource.k8s.io" in r.path for r in server.requests[first:])


async def test_a_dynamic_mig_fleet_fault_costs_at_most_ten_calls_per_faulted_node_and_spares_the_healthy():
    """--mig-mode dynamic on 200 nodes (1000 take half a minute here): a node with one faulted GPU gets one Node
    patch and one update of the slice holding that GPU's devices, at the same pool generation; a node with more
    has its pool (9 slices of 8 GPUs) rewritten at the next generation. Follows kubernetes/kubernetes
    staging/src/k8s.io/dynamic-resource-allocation/resourceslice/resourceslicecontroller.go @ 6d8b41f (no slice
    added and at most one changed: the generation is kept and that slice updated in place). Calls, shared reads
    included, stay within 10 per faulted node (docs/measurements.md: 3.34 on 1000), none writes a healthy node,
    and a second run writes nothing."""
    server = FakeApiServer("1.36", validate_schema=False).start()
    client = server.client()
    fleet = ("--count", "200", "--gpus", "8xh100-80gb", "--gpu-mode", "dra", "--mig-mode", "dynamic", *GATE)
    try:
        out, err = io.StringIO(), io.StringIO()
        assert await run_virtual_nodes(parse(*fleet, "--max-server-memory", "0"), client=client, out=out, err=err) == 0
        generations = {s["metadata"]["name"]: s["spec"]["pool"]["generation"] for s in server.objects("resourceslices")}
        before, first = versions(server), len(server.requests)
        argv = (*fleet, "--fault", "ecc-uncorrectable", "--fault-fraction", "0.05", "--fault-seed", "11")
        assert await run_virtual_nodes(parse(*argv), client=client, out=out, err=err) == 0, err.getvalue()
        requests = server.requests[first:]
        faults = {
            n["metadata"]["name"]: decode_faults(n["metadata"]["annotations"][FAULTS_ANNOTATION], "test")
            for n in server.objects("nodes")
            if FAULTS_ANNOTATION in n["metadata"]["annotations"]
        }
        assert len(requests) <= 10 * len(faults), f"{len(requests)} calls for {len(faults)} faulted nodes"
        changed = written(before, versions(server))
        owner = owners(server)
        assert [k for k in changed if owner.get(k) not in faults] == []
        single = [name for name, record in faults.items() if len(record) == 1]
        assert single, "seed 11 faults one GPU on most nodes"
        pools = collections.defaultdict(set)
        for s in server.objects("resourceslices"):
            pools[s["spec"]["nodeName"]].add((s["metadata"]["name"], s["spec"]["pool"]["generation"]))
        for name in single:
            mine = [k for k in changed if owner[k] == name and k.startswith("resourceslices/")]
            assert len(mine) == 1, f"{name}: {mine}"
            assert {generation for _, generation in pools[name]} == {generations[n] for n, _ in pools[name]}
        again = len(server.requests)
        assert await run_virtual_nodes(parse(*argv), client=client, out=out, err=err) == 0, err.getvalue()
        assert [r.method for r in server.requests[again:] if r.method != "GET"] == []
    finally:
        await client.close()
        server.stop()
