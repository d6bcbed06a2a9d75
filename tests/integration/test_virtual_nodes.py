"""``fakegpu virtual-nodes`` against the in-process API server the DRA publisher tests use."""

from __future__ import annotations

import collections
import dataclasses
import io
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import yaml
from lightkube import AsyncClient

from fakegpu.cli import virtual_nodes_command
from fakegpu.cli.main import main as cli_main
from fakegpu.cli.virtual_nodes_command import run_virtual_nodes
from fakegpu.kube.client import IN_CLUSTER
from fakegpu.sharing.labels import TIMESTAMP_LABEL
from fakegpu.virtual_nodes import api as virtual_nodes_api
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.integration.virtual_nodes_harness import Run, command_runner, parse, strict_apiserver

WRITES = ("create", "update", "patch", "delete", "deletecollection")
KWOK = {"kwok.x-k8s.io/node": "fake"}


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


def writes(server: FakeApiServer) -> int:
    return sum(server.count(verb) for verb in WRITES)


def slices_of(server: FakeApiServer, node: str) -> list[dict[str, Any]]:
    return [s for s in server.objects("resourceslices") if s["spec"]["nodeName"] == node]


def kwok_node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"type": "kwok", **(labels or {})}, "annotations": dict(KWOK)},
        "spec": {},
        "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "20"}},
    }


async def test_five_nodes_come_up_with_capacity_labels_and_taint_and_no_slices_by_default(server, run):
    """The default GPU mode is the device plugin's: GPUs as capacity, no DRA devices of the same GPUs."""
    result = await run("--count", "5", "--gpus", "4xa100-40gb")
    assert result.code == 0, result.err
    assert "5 created" in result.out and "ResourceSlices: 0 created" in result.out
    assert "API calls: " in result.out
    nodes = server.objects("nodes")
    assert [n["metadata"]["name"] for n in nodes] == [f"fakegpu-virtual-000{i}" for i in range(5)]
    for node in nodes:
        meta = node["metadata"]
        assert meta["annotations"]["kwok.x-k8s.io/node"] == "fake"
        assert meta["labels"]["fakegpu.io/virtual-node"] == "true"
        assert meta["labels"]["fakegpu.io/virtual-node-gpu-mode"] == "device-plugin"
        assert meta["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
        assert meta["labels"]["kubernetes.io/hostname"] == meta["name"]
        assert node["spec"]["taints"] == [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
        assert node["status"]["capacity"]["pods"] == "110"
    assert server.objects("resourceslices") == []


async def test_dra_nodes_get_owned_slices_and_no_gpu_capacity(server, run):
    result = await run("--gpu-mode", "dra", "--count", "5", "--gpus", "4xa100-40gb")
    assert result.code == 0, result.err
    assert "5 created" in result.out and "ResourceSlices: 5 created" in result.out
    for node in server.objects("nodes"):
        meta = node["metadata"]
        assert meta["labels"]["fakegpu.io/virtual-node-gpu-mode"] == "dra"
        assert meta["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"  # GFD runs beside DRA drivers
        assert "nvidia.com/gpu" not in node["status"]["capacity"]
        assert "nvidia.com/gpu" not in node["status"]["allocatable"]
        assert node["status"]["capacity"]["pods"] == "110"
        (owned,) = slices_of(server, meta["name"])
        assert owned["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"], "controller": True}
        ]
        assert owned["spec"]["driver"] == "gpu.nvidia.com"
        assert len(owned["spec"]["devices"]) == 4
    # Device UUIDs are per node, as on real nodes (derived from the pool template by substitution).
    uuids = {d["attributes"]["uuid"]["string"] for s in server.objects("resourceslices") for d in s["spec"]["devices"]}
    assert len(uuids) == 20


async def test_dra_nodes_publish_what_the_driver_would_with_the_same_gates(server, run, monkeypatch):
    """The virtual nodes' slices are the driver's with the gates given (`--feature-gates`, else `$FEATURE_GATES`):
    with FabricManagerPartitioning an HGX node's full GPUs carry `gpuModuleID` and `partition1/2/4/8`
    (kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/deviceinfo.go, addFabricManagerAttributes, at
    main after PR #1273); without a gate none of it."""
    monkeypatch.setenv("FEATURE_GATES", "FabricManagerPartitioning=true")
    result = await run("--gpu-mode", "dra", "--count", "2", "--gpus", "8xh100-80gb")
    assert result.code == 0, result.err
    for node in ("fakegpu-virtual-0000", "fakegpu-virtual-0001"):
        devices = {d["name"]: d["attributes"] for s in slices_of(server, node) for d in s["spec"]["devices"]}
        assert devices["gpu-7"]["gpuModuleID"] == {"int": 8} and devices["gpu-7"]["partition8"] == {"int": 1}
    monkeypatch.delenv("FEATURE_GATES")
    result = await run("--gpu-mode", "dra", "--count", "2", "--gpus", "8xh100-80gb")
    assert result.code == 0, result.err
    assert not any(
        "gpuModuleID" in d["attributes"] for s in server.objects("resourceslices") for d in s["spec"]["devices"]
    )


async def test_switching_a_pool_between_modes_converges_in_place(server, run):
    """device-plugin -> dra -> device-plugin: the GPUs move between capacity and slices; never both."""
    assert (await run("--count", "2", "--gpus", "2xh100-80gb")).code == 0
    to_dra = await run("--gpu-mode", "dra", "--count", "2", "--gpus", "2xh100-80gb")
    assert to_dra.code == 0, to_dra.err
    assert "0 created, 0 adopted, 2 updated" in to_dra.out and "ResourceSlices: 2 created" in to_dra.out
    for node in server.objects("nodes"):
        assert "nvidia.com/gpu" not in node["status"]["capacity"]
        assert len(slices_of(server, node["metadata"]["name"])) == 1
    back = await run("--count", "2", "--gpus", "2xh100-80gb")
    assert back.code == 0, back.err
    assert "2 updated" in back.out and "ResourceSlices: 0 created, 0 updated, 2 deleted" in back.out
    assert server.objects("resourceslices") == []
    assert {n["status"]["capacity"]["nvidia.com/gpu"] for n in server.objects("nodes")} == {"2"}
    before = writes(server)
    assert (await run("--count", "2", "--gpus", "2xh100-80gb")).code == 0
    assert writes(server) == before


async def test_a_switch_of_the_slices_alone_counts_no_node_as_updated(server, run):
    """Static -> dynamic MIG changes only the ResourceSlices: the nodes are unchanged, the slices say what moved."""
    common = ("--gpu-mode", "dra", "--count", "2", "--gpus", "2xh100-80gb")
    assert (await run(*common)).code == 0
    result = await run(*common, "--mig-mode", "dynamic")
    assert result.code == 0, result.err
    assert "0 updated, 2 unchanged" in result.out and "on 2 node(s)" in result.out


async def test_dra_extended_ensures_the_device_classes_with_the_extended_resource(server, run):
    result = await run("--gpu-mode", "dra-extended", "--count", "1", "--gpus", "1xh100-80gb")
    assert result.code == 0, result.err
    assert "DeviceClasses: 2 created" in result.out
    gpu = server.get_object("deviceclasses", "gpu.nvidia.com")
    assert gpu is not None and gpu["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    (node,) = server.objects("nodes")
    assert "nvidia.com/gpu" not in node["status"]["capacity"] and len(slices_of(server, node["metadata"]["name"])) == 1
    again = await run("--gpu-mode", "dra-extended", "--count", "1", "--gpus", "1xh100-80gb")
    assert "DeviceClasses" not in again.out  # nothing to write


async def test_running_again_writes_nothing(server, run):
    assert (await run("--count", "5")).code == 0
    before = writes(server)
    result = await run("--count", "5")
    assert result.code == 0
    assert writes(server) == before
    assert "0 created, 0 adopted, 0 updated, 5 unchanged" in result.out


def at(monkeypatch: pytest.MonkeyPatch, seconds: int) -> None:
    """The clock ``fakegpu virtual-nodes`` stamps ``nvidia.com/gfd.timestamp`` with."""
    monkeypatch.setattr(virtual_nodes_command, "time", SimpleNamespace(time=lambda: float(seconds)))


def stamps(server: FakeApiServer) -> set[str | None]:
    return {n["metadata"]["labels"].get(TIMESTAMP_LABEL) for n in server.objects("nodes")}


async def test_nodes_get_the_gfd_timestamp_and_a_later_run_keeps_it(server, run, monkeypatch):
    """GFD writes ``nvidia.com/gfd.timestamp`` by default (NVIDIA/k8s-device-plugin ``internal/lm/timestamp.go``);
    a one-off run is no long-running labeller, so a later run keeps the stored stamp and writes nothing."""
    at(monkeypatch, 1_700_000_000)
    assert (await run("--count", "3")).code == 0
    assert stamps(server) == {"1700000000"}
    before = writes(server)
    at(monkeypatch, 1_700_000_600)
    result = await run("--count", "3")
    assert "0 updated, 3 unchanged" in result.out
    assert writes(server) == before
    assert stamps(server) == {"1700000000"}


async def test_a_changed_plan_keeps_the_stored_timestamp(server, run, monkeypatch):
    at(monkeypatch, 1_700_000_000)
    assert (await run("--count", "1", "--gpus", "2xa100-40gb")).code == 0
    at(monkeypatch, 1_700_000_600)
    assert "1 updated" in (await run("--count", "1", "--gpus", "4xa100-40gb")).out
    assert stamps(server) == {"1700000000"}


async def test_no_timestamp_leaves_the_label_out_and_removes_ours(server, run, monkeypatch):
    """GFD's ``--no-timestamp`` (``cmd/gpu-feature-discovery/main.go``); a stamp this tool wrote before goes."""
    at(monkeypatch, 1_700_000_000)
    assert (await run("--count", "2")).code == 0
    result = await run("--count", "2", "--no-timestamp")
    assert "2 updated" in result.out
    assert stamps(server) == {None}
    before = writes(server)
    assert (await run("--count", "2", "--no-timestamp")).code == 0
    assert writes(server) == before


async def test_a_changed_plan_updates_labels_capacity_and_slices_in_place(server, run):
    """A node's one slice changed is updated in place at the same pool generation, as kubernetes/kubernetes
    staging/src/k8s.io/dynamic-resource-allocation/resourceslice/resourceslicecontroller.go @ 6d8b41f keeps it
    when no slice is added and at most one changes."""
    assert (
        await run(
            "--gpu-mode",
            "dra",
            "--count",
            "2",
            "--gpus",
            "2xa100-40gb",
            "--mig-layout",
            "all-1g.5gb",
            "--mig-strategy",
            "mixed",
        )
    ).code == 0
    node = server.get_object("nodes", "fakegpu-virtual-0000")
    assert node is not None and node["metadata"]["labels"]["nvidia.com/mig-1g.5gb.count"] == "14"
    names = sorted(s["metadata"]["name"] for s in server.objects("resourceslices"))
    result = await run("--gpu-mode", "dra", "--count", "2", "--gpus", "2xa100-40gb")
    assert "2 updated" in result.out and "ResourceSlices: 0 created, 2 updated" in result.out
    node = server.get_object("nodes", "fakegpu-virtual-0000")
    assert node is not None
    assert not any(k.startswith("nvidia.com/") for k in node["status"]["capacity"])
    assert not any(k.startswith("nvidia.com/mig-1g") for k in node["metadata"]["labels"])
    assert sorted(s["metadata"]["name"] for s in server.objects("resourceslices")) == names
    assert {s["spec"]["pool"]["generation"] for s in server.objects("resourceslices")} == {1}


async def test_an_existing_kwok_node_is_adopted_and_handed_back_on_delete_as_it_was(server, run):
    server.create_direct(kwok_node("fakegpu-virtual-0001", {"team": "ml", "nvidia.com/gpu.product": "Custom-GPU"}))
    before = server.get_object("nodes", "fakegpu-virtual-0001")
    assert before is not None
    result = await run("--gpu-mode", "dra", "--count", "2")
    assert result.code == 0
    assert "1 created, 1 adopted" in result.out
    adopted = server.get_object("nodes", "fakegpu-virtual-0001")
    assert adopted is not None
    assert adopted["metadata"]["labels"]["team"] == "ml"
    assert adopted["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    assert adopted["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert adopted["metadata"]["annotations"]["fakegpu.io/virtual-node-origin"] == "adopted"
    assert "nvidia.com/gpu" not in adopted["status"]["capacity"]  # a DRA node
    assert adopted["status"]["capacity"]["cpu"] == "32"
    assert adopted["spec"]["taints"] == [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
    assert len(slices_of(server, "fakegpu-virtual-0001")) == 1
    again = await run("--gpu-mode", "dra", "--count", "2")
    assert "0 created, 0 adopted, 0 updated, 2 unchanged" in again.out

    result = await run("--delete")
    assert result.code == 0
    assert "deleted 1 node(s) with their ResourceSlices, handed back 1 adopted node(s) and deleted 1 of" in result.out
    assert server.get_object("nodes", "fakegpu-virtual-0000") is None
    kept = server.get_object("nodes", "fakegpu-virtual-0001")
    assert kept is not None
    # As it was: its own labels (the GPU product it said included), cpu 4, no allocatable, no taint.
    assert kept["metadata"]["labels"] == before["metadata"]["labels"]
    assert kept["metadata"]["annotations"] == before["metadata"]["annotations"]
    assert kept["status"]["capacity"] == {"cpu": "4", "memory": "8Gi", "pods": "20"}
    assert not kept["status"].get("allocatable")
    assert not kept["spec"].get("taints")
    assert server.objects("resourceslices") == []


async def test_a_real_node_with_a_planned_name_is_refused_and_left_alone(server, run):
    server.add_node("fakegpu-virtual-0001", labels={"node-role.kubernetes.io/worker": ""})
    before = server.get_object("nodes", "fakegpu-virtual-0001")
    result = await run("--count", "3")
    assert result.code == 1
    assert "2 created, 0 adopted, 0 updated, 0 unchanged, 1 refused" in result.out
    assert "fakegpu: error: fakegpu-virtual-0001: a Node named fakegpu-virtual-0001 exists and is not a KWOK node" in (
        result.err
    )
    assert server.get_object("nodes", "fakegpu-virtual-0001") == before
    assert slices_of(server, "fakegpu-virtual-0001") == []
    assert [n["metadata"]["name"] for n in server.objects("nodes")] == [f"fakegpu-virtual-000{i}" for i in range(3)]


async def test_two_pools_are_heterogeneous(server, run, tmp_path):
    h100 = tmp_path / "h100.yaml"
    h100.write_text(yaml.safe_dump({"gpus": [{"model": "h100-80gb", "count": 8}]}))
    t4 = tmp_path / "t4.yaml"
    t4.write_text(yaml.safe_dump({"driverVersion": "550.90.07", "gpus": [{"model": "t4", "count": 2}]}))
    result = await run("--pool", f"{h100}=2:dra", "--pool", f"{t4}=3")
    assert result.code == 0, result.err
    assert "pool h100: 2 node(s)" in result.out and "pool t4: 3 node(s)" in result.out
    nodes = {n["metadata"]["name"]: n for n in server.objects("nodes")}
    assert sorted(nodes) == [
        "fakegpu-virtual-h100-0000",
        "fakegpu-virtual-h100-0001",
        "fakegpu-virtual-t4-0000",
        "fakegpu-virtual-t4-0001",
        "fakegpu-virtual-t4-0002",
    ]
    big, small = nodes["fakegpu-virtual-h100-0001"], nodes["fakegpu-virtual-t4-0002"]
    # One GPU mode per pool: the h100 pool is DRA (slices, no capacity), the t4 pool the device plugin's.
    assert "nvidia.com/gpu" not in big["status"]["capacity"] and small["status"]["capacity"]["nvidia.com/gpu"] == "2"
    assert big["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert small["metadata"]["labels"]["nvidia.com/gpu.product"] == "Tesla-T4"
    assert small["metadata"]["labels"]["fakegpu.io/virtual-node-pool"] == "t4"
    (big_slice,) = slices_of(server, "fakegpu-virtual-h100-0001")
    assert len(big_slice["spec"]["devices"]) == 8 and slices_of(server, "fakegpu-virtual-t4-0002") == []
    assert big_slice["spec"]["devices"][0]["attributes"]["driverVersion"] == {"version": "570.172.8"}


async def test_delete_removes_what_it_created_and_nothing_else(server, run):
    server.add_node("real-worker")
    server.create_direct(kwok_node("someone-elses-kwok-node"))
    server.create_direct(kwok_node("fakegpu-virtual-9999"))  # has the prefix but not our label
    assert (await run("--gpu-mode", "dra", "--count", "4")).code == 0
    assert (await run("--gpu-mode", "dra", "--count", "2", "--name-prefix", "other-")).code == 0
    assert len(server.objects("resourceslices")) == 6
    result = await run("--delete")
    assert result.code == 0
    assert "deleted 4 node(s) with their ResourceSlices, handed back 0 adopted node(s)" in result.out
    remaining = [n["metadata"]["name"] for n in server.objects("nodes")]
    assert remaining == ["fakegpu-virtual-9999", "other-0000", "other-0001", "real-worker", "someone-elses-kwok-node"]
    assert {s["spec"]["nodeName"] for s in server.objects("resourceslices")} == {"other-0000", "other-0001"}
    again = await run("--delete")
    assert "deleted 0 node(s) with their ResourceSlices, handed back 0" in again.out


async def test_split_dynamic_mig_pools_are_idempotent_on_a_1_35_server(run):
    """1.35: several slices per node with random names, compared in any order."""
    server = FakeApiServer("1.35").start()
    try:
        client = server.client()
        args = ("--count", "2", "--gpus", "2xh100-80gb", "--mig-mode", "dynamic", "--gpu-mode", "dra")
        out = io.StringIO()
        assert await run_virtual_nodes(parse(*args), client=client, out=out, err=out) == 0
        assert "Kubernetes 1.35: ResourceSlices as resource.k8s.io/v1 with the 1.35 layout" in out.getvalue()
        assert len(server.objects("resourceslices")) == 6  # 1 counter slice + 2 device slices per node
        # 1.35 has DRAPartitionableDevices off by default: the server drops the counters, and we say so.
        assert "warning: the API server dropped fields of the ResourceSlices" in out.getvalue()
        before = writes(server)
        assert await run_virtual_nodes(parse(*args), client=client, out=out, err=out) == 0
        assert writes(server) == before
        await client.close()
    finally:
        server.stop()
    assert server.rejections == []


async def test_an_older_server_gets_v1beta1_slices(run):
    server = FakeApiServer("1.32").start()
    try:
        client = server.client()
        out = io.StringIO()
        assert await run_virtual_nodes(parse("--gpu-mode", "dra", "--count", "1"), client=client, out=out, err=out) == 0
        assert "ResourceSlices as resource.k8s.io/v1beta1" in out.getvalue()
        (obj,) = server.objects("resourceslices")
        assert obj["apiVersion"] == "resource.k8s.io/v1beta1" and "basic" in obj["spec"]["devices"][0]
        await client.close()
    finally:
        server.stop()
    assert server.rejections == []


async def test_a_server_without_dra_gets_nodes_only(run):
    server = FakeApiServer("1.36", resource_api_versions=[]).start()
    try:
        client = server.client()
        out = io.StringIO()
        assert await run_virtual_nodes(parse("--count", "2"), client=client, out=out, err=out) == 0
        assert "serves no resource.k8s.io ResourceSlices; publishing capacity and labels only" in out.getvalue()
        assert len(server.objects("nodes")) == 2
        await client.close()
    finally:
        server.stop()


async def test_a_transient_api_failure_is_retried(server, run):
    server.fail_next("create", "nodes", 503)
    result = await run("--count", "3")
    assert result.code == 0, result.err
    assert server.count("create", "nodes") == 4
    assert len(server.objects("nodes")) == 3


async def test_a_lasting_api_failure_is_one_clear_line_per_node(server, run):
    server.fail_next("create", "nodes", 500, times=100, message="etcdserver: request timed out")
    result = await run("--count", "2")
    assert result.code == 1
    assert "0 created" in result.out and "2 failed" in result.out
    assert (
        "fakegpu: error: fakegpu-virtual-0000: creating node fakegpu-virtual-0000: 500 InternalError: "
        "etcdserver: request timed out" in result.err
    )
    assert f"fakegpu: error: the failed requests went to the API server {server.url}" in result.err
    assert "Traceback" not in result.err + result.out


async def test_a_failing_list_stops_the_run_with_one_line(server, run):
    server.fail_next("list", "nodes", 403, message='nodes is forbidden: User "x" cannot list resource "nodes"')
    result = await run("--count", "2")
    assert result.code == 1
    assert result.err.strip().splitlines()[-1] == (
        'fakegpu: error: listing nodes: 403 Forbidden: nodes is forbidden: User "x" cannot list resource "nodes"'
        f" (API server {server.url}, kubeconfig {IN_CLUSTER})"  # the test's client has no kubeconfig file
    )
    assert server.objects("nodes") == []


async def test_an_unreachable_server_is_one_clear_line():
    server = FakeApiServer("1.36").start()
    config = server.lightkube_config()
    url = server.url
    server.stop()
    client = AsyncClient(config=config, trust_env=False)
    out, err = io.StringIO(), io.StringIO()
    code = await run_virtual_nodes(
        parse("--count", "1", "--server-version", "1.36"), client=client, out=out, err=err, retry_pause=0.01
    )
    await client.close()
    assert code == 1
    (line,) = err.getvalue().splitlines()
    assert line.startswith(
        f"fakegpu: error: listing resource.k8s.io/v1 ResourceSlices: cannot reach the API server at {url}"
    )
    assert line.endswith(f"(API server {url}, kubeconfig {IN_CLUSTER})")


def lose_the_answer_of_the_next_slice_create(server: FakeApiServer, code: int = 504) -> None:
    """The next slice create is carried out, but the client hears ``code`` (an apiserver timeout after etcd
    wrote it, or a proxy that gave up): a blind retry would publish the slice twice."""
    handle = server.handle_request
    left = [1]

    def lossy(method: str, raw_path: str, headers: Any, body: bytes) -> Any:
        result = handle(method, raw_path, headers, body)
        creates = method == "POST" and raw_path.split("?", maxsplit=1)[0].endswith("/resourceslices")
        if left[0] and creates and getattr(result, "code", None) == 201:
            left[0] -= 1
            status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": code}
            status |= {"reason": "Timeout", "message": "the server was unable to return a response in time"}
            return dataclasses.replace(cast(Any, result), code=code, body=status)
        return result

    server.handle_request = lossy  # type: ignore[method-assign]


@pytest.mark.parametrize("code", [500, 504])
async def test_a_slice_create_whose_answer_was_lost_is_not_published_twice(server, run, code):
    lose_the_answer_of_the_next_slice_create(server, code)
    result = await run("--gpu-mode", "dra", "--count", "1", "--gpus", "2xh100-80gb")
    assert result.code == 0, result.err
    assert len(slices_of(server, "fakegpu-virtual-0000")) == 1
    assert server.count("create", "resourceslices") == 1


async def test_a_slice_create_that_failed_is_tried_again_after_looking(server, run):
    server.fail_next("create", "resourceslices", 500)
    lists = server.count("list", "resourceslices")
    result = await run("--gpu-mode", "dra", "--count", "1")
    assert result.code == 0, result.err
    assert len(slices_of(server, "fakegpu-virtual-0000")) == 1
    assert server.count("create", "resourceslices") == 2
    # the discovery probe, bring-up's list, and the look before the second create
    assert server.count("list", "resourceslices") - lists == 3


async def test_a_new_driver_name_replaces_the_old_drivers_slices(server, run):
    assert (await run("--gpu-mode", "dra", "--count", "2", "--driver-name", "gpu.example.com")).code == 0
    assert {s["spec"]["driver"] for s in server.objects("resourceslices")} == {"gpu.example.com"}
    result = await run("--gpu-mode", "dra", "--count", "2")
    assert result.code == 0, result.err
    assert "ResourceSlices: 2 created, 0 updated, 2 deleted" in result.out
    assert {s["spec"]["driver"] for s in server.objects("resourceslices")} == {"gpu.nvidia.com"}
    assert len(server.objects("resourceslices")) == 2
    before = writes(server)
    assert "2 unchanged" in (await run("--gpu-mode", "dra", "--count", "2")).out
    assert writes(server) == before


async def test_another_drivers_slices_not_published_by_us_are_left_alone(server, run):
    assert (await run("--gpu-mode", "dra", "--count", "1")).code == 0
    node = server.get_object("nodes", "fakegpu-virtual-0000")
    assert node is not None
    theirs = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": "theirs-"},
        "spec": {
            "driver": "net.example.com",
            "nodeName": "fakegpu-virtual-0000",
            "pool": {"name": "fakegpu-virtual-0000", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "nic-0"}],
        },
    }
    server.create_direct(theirs)
    before = writes(server)
    assert "1 unchanged" in (await run("--gpu-mode", "dra", "--count", "1")).out
    assert writes(server) == before
    assert len(slices_of(server, "fakegpu-virtual-0000")) == 2


async def test_a_slice_with_another_pool_name_is_replaced_not_updated(server, run):
    """spec.pool.name is immutable: updating such a slice would fail (422) on every run."""
    assert (await run("--gpu-mode", "dra", "--count", "1")).code == 0
    (old,) = slices_of(server, "fakegpu-virtual-0000")
    server.delete_direct("resourceslices", old["metadata"]["name"])
    legacy = {k: v for k, v in old.items() if k in ("apiVersion", "kind", "spec")}
    legacy["metadata"] = {
        "generateName": "legacy-",
        "labels": old["metadata"]["labels"],
        "ownerReferences": old["metadata"]["ownerReferences"],
    }
    legacy["spec"]["pool"]["name"] = "legacy-pool"
    server.create_direct(legacy)
    result = await run("--gpu-mode", "dra", "--count", "1")
    assert result.code == 0, result.err
    (new,) = slices_of(server, "fakegpu-virtual-0000")
    assert new["spec"]["pool"]["name"] == "fakegpu-virtual-0000"
    assert not new["metadata"]["name"].startswith("legacy-")


async def test_delete_takes_exactly_its_own_prefix(server, run):
    assert (await run("--gpu-mode", "dra", "--count", "2")).code == 0
    assert (await run("--gpu-mode", "dra", "--count", "2", "--name-prefix", "fakegpu-virtual-team2-")).code == 0
    result = await run("--delete")
    assert result.code == 0
    assert "deleted 2 node(s) with their ResourceSlices" in result.out
    remaining = sorted(n["metadata"]["name"] for n in server.objects("nodes"))
    assert remaining == ["fakegpu-virtual-team2-0000", "fakegpu-virtual-team2-0001"]
    assert {s["spec"]["nodeName"] for s in server.objects("resourceslices")} == set(remaining)
    result = await run("--delete", "--name-prefix", "fakegpu-virtual-team2-")
    assert "deleted 2 node(s) with their ResourceSlices" in result.out
    assert server.objects("nodes") == [] and server.objects("resourceslices") == []


def exec_kubeconfig(path: Path, server: str, command: str, *args: str) -> Path:
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": command, "args": list(args)}}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


@pytest.mark.parametrize(
    "plugin",
    [
        ("/nonexistent/kubelogin",),
        ("sh", "-c", "echo 'credentials expired;' >&2; echo 'run: login' >&2; exit 1"),
        ("sh", "-c", "echo this is not json"),
    ],
    ids=["missing", "failing", "not-json"],
)
@pytest.mark.parametrize("mode", [(), ("--server-version", "1.36"), ("--delete",)], ids=["version", "list", "delete"])
def test_credentials_the_kubeconfig_cannot_produce_exit_2_with_one_line(server, tmp_path, capsys, plugin, mode):
    """The exec plugin runs at the first request (/version, a list, or --delete's list of nodes)."""
    config = exec_kubeconfig(tmp_path / "exec.yaml", server.url, *plugin)
    code = cli_main(["virtual-nodes", "--kubeconfig", str(config), *mode])
    err = capsys.readouterr().err
    assert code == 2, err
    (line,) = err.splitlines()
    assert line.startswith(f"fakegpu: error: {config}: "), line
    assert server.counts == {}, "no API request went through"


def test_a_kubeconfig_that_is_not_yaml_exits_2_with_one_line(tmp_path, capsys):
    config = tmp_path / "kubeconfig"
    config.write_text("clusters: [\n  - {name: a\n")
    assert cli_main(["virtual-nodes", "--kubeconfig", str(config)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("fakegpu: error: ") and str(config) in line


async def test_a_fleet_costs_one_create_per_object_lists_in_pages_and_deletes_by_collection(server, run, monkeypatch):
    """Counts, not times: creates per node, pages per list, collection deletes per fleet."""
    monkeypatch.setattr(virtual_nodes_api, "NODE_PAGE", 5)
    monkeypatch.setattr(virtual_nodes_api, "SLICE_KEY_PAGE", 10)
    fleet = ("--gpu-mode", "dra", "--count", "12", "--gpus", "2xh100-80gb", "--mig-mode", "dynamic")
    assert (await run(*fleet)).code == 0
    slices = len(server.objects("resourceslices"))
    per_node = slices // 12
    assert per_node >= 2 and slices == 12 * per_node
    # One create per Node and per slice, nothing patched or replaced; each list is one page on an empty cluster.
    assert server.count("create", "nodes") == 12 and server.count("create", "resourceslices") == slices
    assert sum(server.count(verb) for verb in ("patch", "update", "delete", "deletecollection")) == 0
    assert server.count("list", "nodes") == 1

    before = collections.Counter(server.counts)
    again = await run(*fleet)
    assert again.code == 0 and "12 unchanged" in again.out
    calls = collections.Counter(server.counts) - before
    # Nothing written; the nodes in pages of 5, the slices in pages of 10, plus the served-version probe.
    assert set(calls) == {"list"}
    assert calls["list"] == math.ceil(12 / 5) + math.ceil(slices / 10) + 1
    assert all(
        r.query.get("limit")
        for r in server.requests
        if r.method == "GET" and r.path.endswith(("/nodes", "/resourceslices"))
    )

    before = collections.Counter(server.counts)
    deleted = await run("--delete")
    assert deleted.code == 0, deleted.err
    assert "deleted 12 node(s) with their ResourceSlices" in deleted.out and "by collection" not in deleted.out
    calls = collections.Counter(server.counts) - before
    # One collection delete takes the nodes and, through their owner references, the slices.
    assert calls["deletecollection"] == 1 and calls["delete"] == 0
    assert sum(calls.values()) <= 20
    assert server.objects("nodes") == [] and server.objects("resourceslices") == []


async def test_after_the_first_answers_writes_ask_for_the_identity_alone(server, run):
    """The first Node and slice answers are read whole (did the server keep the status, the counters?); every
    later write asks for ``PartialObjectMetadata``, so 30 KB answers are not sent back to be thrown away."""
    fleet = ("--gpu-mode", "dra", "--count", "5", "--gpus", "2xh100-80gb", "--mig-mode", "dynamic")
    assert (await run(*fleet, "--concurrency", "1")).code == 0
    posts = [r for r in server.requests if r.method == "POST" and r.path.endswith(("/nodes", "/resourceslices"))]
    whole = [r.path.rsplit("/", 1)[1] for r in posts if "PartialObjectMetadata" not in r.accept]
    assert whole == ["nodes", "resourceslices"]
    assert len(posts) == 5 + len(server.objects("resourceslices"))
    assert all(n["status"]["capacity"] for n in server.objects("nodes"))  # kept: no node needed a patch
    assert server.count("patch", "nodes/status") == 0


async def test_a_server_that_drops_node_status_gets_it_patched_on_every_node(server, run, monkeypatch):
    """Once the first answer shows the status dropped, every later node is patched too, although its own
    answer (metadata alone) could not show it."""
    original = server._create_locked

    def drop_node_status(route, obj, dry_run):
        if route.rtype.plural == "nodes":
            obj.pop("status", None)
        return original(route, obj, dry_run)

    monkeypatch.setattr(server, "_create_locked", drop_node_status)
    assert (await run("--count", "4", "--concurrency", "1")).code == 0
    assert server.count("patch", "nodes/status") == 4
    assert all(n["status"]["capacity"]["nvidia.com/gpu"] for n in server.objects("nodes"))


async def test_throttling_halves_the_nodes_in_flight_and_is_reported(server, run):
    server.fail_next("create", "resourceslices", 429, times=3, message="too many requests")
    result = await run("--gpu-mode", "dra", "--count", "6", "--gpus", "1xh100-80gb", "--concurrency", "8")
    assert result.code == 0, result.err
    assert "6 created" in result.out
    assert "the API server throttled 3 request(s) (429" in result.out
    assert "nodes in flight went down to 1" in result.out
    assert len(server.objects("resourceslices")) == 6


def test_an_api_error_names_the_server_and_the_kubeconfig(server, tmp_path, capsys):
    """Issue 15 §3: which cluster refused, and which kubeconfig pointed there, in the one error line."""
    config = server.kubeconfig(tmp_path / "kubeconfig")
    server.fail_next("list", "nodes", 403, message='nodes is forbidden: User "x" cannot list resource "nodes"')
    code = cli_main(["virtual-nodes", "--kubeconfig", str(config), "--count", "1", "--server-version", "1.36"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.splitlines()[-1] == (
        'fakegpu: error: listing nodes: 403 Forbidden: nodes is forbidden: User "x" cannot list resource "nodes"'
        f" (API server {server.url}, kubeconfig {config})"
    )


# -- rack scale: a virtual GB200 NVL72 fleet ---------------------------------------------------------------

NVL72 = ("--gpus", "4xgb200", "--racks", "4", "--nodes-per-rack", "18")
README = Path(__file__).resolve().parents[2] / "README.md"


def without_rates(text: str) -> str:
    """A run's output without its timing (``in 1.29 s (56/s)``), which differs from run to run."""
    return re.sub(r" in [0-9.]+ s \([0-9]+/s\)", " in N s (N/s)", text)


def readme_fleet_transcript() -> str:
    """The output the README's "Rack scale" section shows for its fleet command, without the command line."""
    text = README.read_text()
    start = text.index("$ fakegpu virtual-nodes " + " ".join((*NVL72, "--gpu-mode", "dra")))
    return text[text.index("\n", start) + 1 : text.index("\n```", start) + 1]


def readme_rerun_and_delete() -> tuple[int, tuple[int, int]]:
    """What the README says after the fleet transcript: the re-run's reads, and the nodes and slices
    ``--delete`` removes."""
    text = re.sub(r"\s+", " ", README.read_text())
    found = re.search(
        r"A re-run writes nothing \((\d+) reads\) and `--delete` removes the (\d+) nodes and their "
        r"(\d+) slices",
        text,
    )
    assert found is not None, "README's sentence after the fleet transcript changed: update this test"
    return int(found[1]), (int(found[2]), int(found[3]))


async def test_a_72_node_nvl72_fleet_comes_up_in_one_run_and_goes_with_delete(server, run):
    """4 NVL72 racks x 18 trays of 4 GB200: every node of a rack shares GFD's ``nvidia.com/gpu.clique``
    (``<clusterUUID>.<cliqueID>``, k8s-device-plugin ``internal/lm/imex.go``) and no two racks do; the
    topology labels name block and rack; in the dra mode each node has its GPU slice and the compute-domain
    kubelet plugin's slice (NVIDIA dra-driver ``cmd/compute-domain-kubelet-plugin/deviceinfo.go``: devices
    ``channel-0`` and ``daemon`` in a pool named after the node), both owned by the Node and validated by
    the server against the ResourceSlice schema."""
    result = await run(*NVL72, "--gpu-mode", "dra")
    assert result.code == 0, result.err
    assert without_rates(result.out) == without_rates(readme_fleet_transcript()), "README's transcript drifted"
    assert (
        "72 created" in result.out and "ResourceSlices: 144 created, 0 updated, 0 deleted on 72 node(s)" in result.out
    )
    assert "4 NVLink clique(s) with a compute-domain.nvidia.com ResourceSlice per node" in result.out
    nodes = server.objects("nodes")
    assert len(nodes) == 72
    by_rack: dict[str, set[str]] = collections.defaultdict(set)
    for node in nodes:
        labels = node["metadata"]["labels"]
        by_rack[labels["fakegpu.io/topology-rack"]].add(labels["nvidia.com/gpu.clique"])
        assert labels["fakegpu.io/topology-block"] == "block-0"
        assert labels["kubernetes.io/hostname"] == node["metadata"]["name"]
        assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.count"]) == ("NVIDIA-GB200", "4")
        assert "nvidia.com/gpu.imex-domain" not in labels
        assert "nvidia.com/gpu" not in node["status"]["capacity"]
        slices = slices_of(server, node["metadata"]["name"])
        drivers = sorted(s["spec"]["driver"] for s in slices)
        assert drivers == ["compute-domain.nvidia.com", "gpu.nvidia.com"]
        (cd,) = (s for s in slices if s["spec"]["driver"] == "compute-domain.nvidia.com")
        assert cd["spec"]["pool"]["name"] == node["metadata"]["name"]
        assert [d["name"] for d in cd["spec"]["devices"]] == ["channel-0", "daemon"]
        owner = cd["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"]) == ("Node", node["metadata"]["uid"])
        assert cd["metadata"]["labels"]["fakegpu.io/virtual-node"] == "true"
    assert sorted(by_rack) == [f"rack-{r}" for r in range(4)]
    assert all(len(cliques) == 1 for cliques in by_rack.values()), by_rack
    assert len(set.union(*by_rack.values())) == 4
    assert server.rejections == []

    before = writes(server)
    again = await run(*NVL72, "--gpu-mode", "dra")
    assert again.code == 0, again.err
    assert "72 unchanged" in again.out and "ResourceSlices: 0 created, 0 updated, 0 deleted" in again.out
    assert writes(server) == before, "a re-run writes nothing"
    calls = re.search(r"^API calls: (\d+) \(([^)]*)\)$", again.out, flags=re.M)
    assert calls is not None, again.out
    assert {verb.split()[0] for verb in calls[2].split(", ")} <= {"get", "list"}, calls[0]
    rerun, deleted = readme_rerun_and_delete()
    assert rerun == int(calls[1]), f"README says a re-run makes {rerun} reads; it made {calls[0]}"
    assert deleted == (len(nodes), len(server.objects("resourceslices")))

    collections_before = server.count("deletecollection", "nodes")
    gone = await run("--delete")
    assert gone.code == 0, gone.err
    assert "deleted 72 node(s)" in gone.out
    assert server.objects("nodes") == [] and server.objects("resourceslices") == []
    assert server.count("deletecollection", "nodes") == collections_before + 1, "README: in one collection delete"


async def test_an_nvl72_fleet_in_device_plugin_mode_has_gpu_capacity_and_no_slices(server, run):
    result = await run(*NVL72)
    assert result.code == 0, result.err
    nodes = server.objects("nodes")
    assert len(nodes) == 72
    assert {n["status"]["capacity"]["nvidia.com/gpu"] for n in nodes} == {"4"}
    assert len({n["metadata"]["labels"]["nvidia.com/gpu.clique"] for n in nodes}) == 4
    assert server.objects("resourceslices") == []


async def test_switching_a_rack_fleet_to_device_plugin_mode_removes_the_compute_domain_slices(server, run):
    argv = ("--gpus", "4xgb300", "--racks", "2", "--nodes-per-rack", "2")
    assert (await run(*argv, "--gpu-mode", "dra-extended")).code == 0
    assert len(server.objects("resourceslices")) == 8
    back = await run(*argv)
    assert back.code == 0, back.err
    assert "ResourceSlices: 0 created, 0 updated, 8 deleted on 4 node(s)" in back.out
    assert server.objects("resourceslices") == []


async def test_leaving_the_rack_layout_removes_only_the_compute_domain_slice(server, run):
    assert (await run("--gpus", "4xgb200", "--racks", "1", "--nodes-per-rack", "2", "--gpu-mode", "dra")).code == 0
    plain = await run("--gpus", "4xgb200", "--count", "2", "--gpu-mode", "dra")
    assert plain.code == 0, plain.err
    assert "ResourceSlices: 0 created, 2 updated, 2 deleted on 2 node(s)" in plain.out
    assert {s["spec"]["driver"] for s in server.objects("resourceslices")} == {"gpu.nvidia.com"}
    node = server.get_object("nodes", "fakegpu-virtual-0000")
    assert node is not None
    labels = node["metadata"]["labels"]
    assert "nvidia.com/gpu.clique" not in labels and "fakegpu.io/topology-rack" not in labels


async def test_rack_fleet_on_a_v1beta1_server():
    """Kubernetes 1.32 serves ResourceSlices as v1beta1 only: the compute-domain devices are ``basic``."""
    server = FakeApiServer("1.32").start()
    try:
        client = server.client()
        out, err = io.StringIO(), io.StringIO()
        args = parse("--gpus", "4xgb200", "--racks", "2", "--nodes-per-rack", "2", "--gpu-mode", "dra")
        code = await run_virtual_nodes(args, client=client, out=out, err=err, retry_pause=0.01)
        await client.close()
        assert code == 0, err.getvalue()
        cds = [s for s in server.objects("resourceslices") if s["spec"]["driver"] == "compute-domain.nvidia.com"]
        assert len(cds) == 4 and all(s["apiVersion"] == "resource.k8s.io/v1beta1" for s in cds)
        assert [d["name"] for d in cds[0]["spec"]["devices"]] == ["channel-0", "daemon"]
        assert "basic" in cds[0]["spec"]["devices"][0]
        assert server.rejections == []
    finally:
        server.stop()
