"""The DRA publisher's digest path against the in-process API server: what a publish writes, and how it lists.

Every slice carries the ``fakegpu.io/slice-plan`` digest of the pool's wish; a publish compares the listed
slices' keys with it and writes only when they differ. These tests count the server's requests per verb, and
read the list requests' ``limit``/``continue`` from its request log.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from lightkube import AsyncClient

from fakegpu.dra import slice_publisher
from fakegpu.dra.feature_gates import parse_feature_gates
from fakegpu.dra.health_taints import published_taints
from fakegpu.dra.resource_slices import SliceOptions
from fakegpu.dra.slice_digest import PLAN_ANNOTATION
from fakegpu.dra.slice_publisher import SlicePublisher
from fakegpu.kube.node_watch import NodeWatch
from fakegpu.kube.page_sizes import NODE_PAGE, SLICE_KEY_PAGE
from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from tests.apiserver import FakeApiServer, serving
from tests.eventually import eventually

HEALTH_CHECK = parse_feature_gates("NVMLDeviceHealthCheck=true")
"""NVIDIA's health gate: the slices carry the devices' health taints."""

NODE = "node-a"
DRIVER = "gpu.nvidia.com"
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
POOL = 9
"""Slices of 8 H100 with dynamic MIG in the 1.36 layout: one counters slice and one per GPU."""


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE) as server:
        yield server


@pytest.fixture
async def client(apiserver: FakeApiServer) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(config=apiserver.lightkube_config(), trust_env=False)
    yield client
    await client.close()


async def started(client: AsyncClient, gpus: str = "8xh100-80gb") -> SlicePublisher:
    live = LiveInventory(load_inventory(InventoryInputs(node_name=NODE, gpus=(gpus,))))
    options = SliceOptions(mig_mode="dynamic", server_minor=36, feature_gates=HEALTH_CHECK)
    publisher = SlicePublisher(
        client, live, options, auto_api_version=False, auto_server_version=False, health=lambda: published_taints(live)
    )
    await publisher.discover()
    assert await publisher.publish() is True
    return publisher


def slices(server: FakeApiServer) -> list[dict[str, Any]]:
    return sorted(
        (s for s in server.objects("resourceslices") if s["spec"]["driver"] == DRIVER),
        key=lambda s: s["metadata"]["name"],
    )


def writes(server: FakeApiServer) -> dict[str, int]:
    return {verb: server.count(verb, "resourceslices") for verb in ("create", "update", "patch", "delete")}


def generations(server: FakeApiServer) -> set[int]:
    return {s["spec"]["pool"]["generation"] for s in slices(server)}


def digests(server: FakeApiServer) -> set[str | None]:
    return {(s["metadata"].get("annotations") or {}).get(PLAN_ANNOTATION) for s in slices(server)}


def slice_lists(server: FakeApiServer) -> list[dict[str, str]]:
    return [r.query for r in server.requests if r.method == "GET" and r.path == SLICES_PATH and "watch" not in r.query]


async def test_every_slice_carries_the_digest_of_the_pool(apiserver, client):
    await started(client)
    assert len(slices(apiserver)) == POOL
    (digest,) = digests(apiserver)
    assert digest is not None and len(digest) == 32
    assert writes(apiserver) == {"create": POOL, "update": 0, "patch": 0, "delete": 0}


async def test_unchanged_pool_is_one_list_and_no_write(apiserver, client):
    publisher = await started(client)
    before, lists = writes(apiserver), len(slice_lists(apiserver))
    assert await publisher.publish() is False
    assert writes(apiserver) == before
    assert len(slice_lists(apiserver)) == lists + 1
    assert publisher.stats.unchanged == 1
    assert generations(apiserver) == {1}


async def test_changed_health_bumps_the_generation_once_and_rewrites_in_place(apiserver, client):
    publisher = await started(client)
    names = [s["metadata"]["name"] for s in slices(apiserver)]
    (old_digest,) = digests(apiserver)
    publisher.live.inject_xid(publisher.live.inventory.node.gpus[3].uuid, 79)
    assert await publisher.publish() is True
    assert writes(apiserver) == {"create": POOL, "update": POOL, "patch": 0, "delete": 0}
    assert [s["metadata"]["name"] for s in slices(apiserver)] == names
    assert generations(apiserver) == {2}
    (new_digest,) = digests(apiserver)
    assert new_digest not in (None, old_digest)
    tainted = {
        d["name"].split("-")[1] for s in slices(apiserver) for d in s["spec"].get("devices", []) if d.get("taints")
    }
    assert tainted == {"3"}
    assert await publisher.publish() is False
    assert writes(apiserver)["update"] == POOL


async def test_slices_without_the_annotation_are_rewritten_once(apiserver, client):
    """Slices of an older fakegpu (same specs, no digest) are not trusted: rewritten once, then left alone."""
    publisher = await started(client)
    for s in slices(apiserver):
        s["metadata"].pop("annotations")
        apiserver.update_direct(s)
    assert digests(apiserver) == {None}
    assert await publisher.publish() is True
    assert writes(apiserver) == {"create": POOL, "update": POOL, "patch": 0, "delete": 0}
    assert generations(apiserver) == {2}
    assert None not in digests(apiserver)
    assert await publisher.publish() is False
    assert writes(apiserver)["update"] == POOL


async def test_a_slice_deleted_by_someone_is_recreated(apiserver, client):
    publisher = await started(client)
    victim = slices(apiserver)[4]["metadata"]["name"]
    apiserver.delete_direct("resourceslices", name=victim)
    assert len(slices(apiserver)) == POOL - 1
    assert await publisher.publish() is True
    assert writes(apiserver) == {"create": POOL + 1, "update": POOL - 1, "patch": 0, "delete": 0}
    assert len(slices(apiserver)) == POOL
    assert generations(apiserver) == {2}
    assert len(digests(apiserver)) == 1
    assert await publisher.publish() is False


async def test_the_publisher_lists_its_slices_in_pages(apiserver, client, monkeypatch):
    publisher = await started(client)
    (first,) = slice_lists(apiserver)
    assert first["limit"] == str(SLICE_KEY_PAGE)
    assert f"spec.nodeName={NODE}" in first["fieldSelector"]
    monkeypatch.setattr(slice_publisher, "SLICE_KEY_PAGE", 4)
    assert await publisher.publish() is False
    pages = slice_lists(apiserver)[1:]
    assert len(pages) == math.ceil(POOL / 4)
    assert {p["limit"] for p in pages} == {"4"}
    assert ["continue" in p for p in pages] == [False, True, True]
    assert publisher.stats.unchanged == 1


async def test_the_node_watch_lists_in_pages(apiserver, client):
    seen: list[Any] = []
    task = asyncio.create_task(NodeWatch(client, NODE, seen.append).run())
    try:
        await eventually(lambda: len(seen) == 1, "the node listed", 3.0)
    finally:
        await cancel_and_wait([task])
    assert seen[0].metadata.name == NODE
    (listed,) = [r.query for r in apiserver.requests if r.path == "/api/v1/nodes" and "watch" not in r.query]
    assert listed["limit"] == str(NODE_PAGE)
