"""Load: many concurrent kubelet calls against one plugin, over its real Unix socket.

- 1000 concurrent Allocate calls (``profile.concurrent_allocates``) of distinct time-sliced replicas:
  every call answered with the right device, none lost.
- 100 concurrent ListAndWatch streams (``profile.concurrent_streams``): each gets the full list, then one
  health change reaches every stream; once they are cancelled, no stream is left open on the server.
- 200 concurrent NodePrepareResources for distinct claims (``profile.concurrent_prepares``) on distinct
  MIG devices: every claim prepared with its own device, checkpoint and CDI specs consistent; the same
  prepares again are idempotent; then 200 concurrent unprepares leave nothing behind.

Each burst prints its figures (p50/p99 per call, wall time); the tests assert completeness, and a
generous upper bound on time only with ``--timing``. ``bench/load.py`` prints the same figures outside pytest.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from fakegpu.dra.prepared_claims import PreparedClaims
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2 as dp
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from fakegpu.kubeletapi.dra.v1 import api_pb2 as dra
from fakegpu.kubeletapi.dra.v1 import api_pb2_grpc as dra_grpc
from fakegpu.sharing.health import HEALTHY, UNHEALTHY
from fakegpu.testing.fake_node import FakeNode
from tests.apiserver import serving
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.cdi_runtime import read_spec_file
from tests.claim_builders import allocated_claim
from tests.reliability.profile import Profile
from tests.reliability.raw_calls import (
    DRA_DRIVER,
    Figures,
    Footprint,
    burst,
    no_leaks,
    percentile,
    published_device_names,
    start_dra_driver,
    tracebacks,
    unix_channel,
)
from tests.timing import Timing

GPUS = 8
CHANNELS = 4
"""Calls are spread over a few connections, as several kubelet clients would be."""
CALL_TIMEOUT = 30.0
BURST_LIMIT = 60.0
"""Generous: on a 2-core CI machine each burst takes a few seconds at most (checked with ``--timing``)."""
NODE = "load-node"
DRA_GPUS = "32xh100-80gb"
DRA_LAYOUT = "all-1g.10gb"
"""7 MIG devices per GPU: 224 distinct devices, enough for 200 claims on devices of their own."""


def report(figures: Figures, record_property: Callable[[str, object], None]) -> None:
    print(figures.line())
    record_property(f"{figures.name} p50 ms", round(figures.p50 * 1000, 2))
    record_property(f"{figures.name} p99 ms", round(figures.p99 * 1000, 2))


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    found = tracebacks(caplog.records)
    assert found == [], "a server logged a traceback:\n" + "\n".join(found)


def time_slicing(replicas: int) -> dict[str, object]:
    return {
        "version": "v1",
        "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": replicas}]}},
    }


async def sliced_node(fakegpu_node, devices: int) -> FakeNode:
    """8 H100s time-sliced into at least ``devices`` replicas (at least 2 per GPU)."""
    node: FakeNode = await fakegpu_node(f"{GPUS}xh100-80gb", config=time_slicing(max(2, math.ceil(devices / GPUS))))
    return node


def gpu_socket(node: FakeNode) -> Path:
    return node.kubelet.paths.device_plugins / "nvidia-gpu.sock"


# --- device plugin -----------------------------------------------------------------------------------


async def test_concurrent_allocates_are_all_answered(
    fakegpu_node, profile: Profile, caplog, record_property, timing: Timing
):
    count = profile.concurrent_allocates
    node = await sliced_node(fakegpu_node, count)
    resource = node.inventory.resource("nvidia.com/gpu")
    assert resource is not None and len(resource.devices) >= count
    replicas = resource.devices[:count]
    baseline = Footprint.now()
    channels = [unix_channel(gpu_socket(node)) for _ in range(CHANNELS)]
    stubs = [dp_grpc.DevicePluginStub(c) for c in channels]
    try:

        async def allocate(i: int) -> dp.AllocateResponse:
            request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=[replicas[i].id])])
            return await stubs[i % CHANNELS].Allocate(request, timeout=CALL_TIMEOUT)

        result = await burst("Allocate", count, allocate)
    finally:
        for channel in channels:
            await channel.close()
    report(result.figures, record_property)

    assert result.failures == [], f"{len(result.failures)} of {count} Allocate calls failed: {result.failures[:3]}"
    for device, response in zip(replicas, result.values(), strict=True):
        (container,) = response.container_responses
        assert container.envs["NVIDIA_VISIBLE_DEVICES"] == device.parent, device.id
    assert node.calls.methods("nvidia.com/gpu").count("Allocate") == count, "an Allocate never reached the plugin"
    timing.within(result.figures.wall, BURST_LIMIT, "the Allocate burst")
    await no_leaks(baseline)
    no_tracebacks(caplog)


async def test_concurrent_list_and_watch_streams_all_see_a_health_change(
    fakegpu_node, profile: Profile, caplog, record_property, timing: Timing
):
    count = profile.concurrent_streams
    node = await sliced_node(fakegpu_node, profile.concurrent_allocates)
    server = node.plugins.servers["nvidia.com/gpu"]
    open_before = server.service.streams  # the kubelet's own stream
    resource = node.inventory.resource("nvidia.com/gpu")
    assert resource is not None
    ids = [d.id for d in resource.devices]
    on_gpu0 = {d.id for d in resource.devices if d.parent == node.inventory.node.gpus[0].uuid}
    baseline = Footprint.now()
    channels = [unix_channel(gpu_socket(node)) for _ in range(CHANNELS)]
    stubs = [dp_grpc.DevicePluginStub(c) for c in channels]
    streams = [stubs[i % CHANNELS].ListAndWatch(dp.Empty(), timeout=120.0) for i in range(count)]
    try:

        async def first(i: int) -> dp.ListAndWatchResponse:
            message = await streams[i].read()
            assert isinstance(message, dp.ListAndWatchResponse)
            return message

        opened = await burst("ListAndWatch first list", count, first)
        report(opened.figures, record_property)
        assert opened.failures == [], f"{len(opened.failures)} of {count} streams failed: {opened.failures[:3]}"
        for message in opened.values():
            assert [d.ID for d in message.devices] == ids
            assert {d.health for d in message.devices} == {HEALTHY}
        await node.kubelet.wait_for(lambda: server.service.streams == open_before + count, 5.0, "every stream open")

        changed_at = time.perf_counter()
        node.live.set_health("0", healthy=False)

        async def change(i: int) -> tuple[dp.ListAndWatchResponse, float]:
            message = await asyncio.wait_for(streams[i].read(), CALL_TIMEOUT)
            assert isinstance(message, dp.ListAndWatchResponse)
            return message, time.perf_counter() - changed_at

        pushed = await burst("ListAndWatch health push", count, change)
        assert pushed.failures == [], f"{len(pushed.failures)} of {count} streams missed the change"
        delays = [seconds for _, seconds in pushed.values()]
        push = Figures(
            "ListAndWatch health change to stream",
            count,
            max(delays),
            percentile(delays, 0.5),
            percentile(delays, 0.99),
            max(delays),
        )
        report(push, record_property)
        for message, _ in pushed.values():
            unhealthy = {d.ID for d in message.devices if d.health == UNHEALTHY}
            assert unhealthy == on_gpu0
            assert [d.ID for d in message.devices] == ids
        timing.within(push.wall, BURST_LIMIT, "the health change push")
    finally:
        for stream in streams:
            stream.cancel()
        for channel in channels:
            await channel.close()
    await node.kubelet.wait_for(lambda: server.service.streams == open_before, 10.0, "cancelled streams to end")
    gauge = server.service.metrics.list_and_watch_streams.labels(resource="nvidia.com/gpu")
    assert gauge._value.get() == open_before, "the open-streams gauge leaked"
    await no_leaks(baseline)
    no_tracebacks(caplog)


# --- DRA ----------------------------------------------------------------------------------------------


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE) as server:
        yield server


@pytest.fixture
async def driver_stopper() -> AsyncIterator[list[object]]:
    """Drivers to stop at the end, before the API server fixture stops the server."""
    drivers: list[object] = []
    yield drivers
    for driver in drivers:
        await driver.stop()  # type: ignore[attr-defined]


def checkpoint(root: Path) -> PreparedClaims:
    return PreparedClaims.in_dir(root / "kubelet" / "plugins" / DRA_DRIVER)


async def test_concurrent_prepares_for_distinct_claims(
    apiserver, root, driver_stopper, profile: Profile, caplog, record_property, timing: Timing
):
    count = profile.concurrent_prepares
    driver = await start_dra_driver(apiserver, root, node=NODE, gpus=DRA_GPUS, mig_layout=DRA_LAYOUT)
    driver_stopper.append(driver)
    devices = published_device_names(apiserver, NODE)
    assert len(devices) >= count, f"{len(devices)} devices published, {count} claims need one each"
    claims: list[tuple[str, str, str]] = []  # (name, uid, device)
    for i in range(count):
        name = f"claim-{i:04d}"
        uid = apiserver.create_direct(allocated_claim(name, NODE, [devices[i]]))["metadata"]["uid"]
        claims.append((name, uid, devices[i]))
    mig_uuid = {(d.parent_index, d.start): d.uuid for g in driver.live.inventory.node.gpus for d in g.mig_devices}
    assert len(mig_uuid) >= count

    baseline = Footprint.now()
    channels = [unix_channel(driver.plugin.dra_socket) for _ in range(CHANNELS)]
    stubs = [dra_grpc.DRAPluginStub(c) for c in channels]

    def refs(i: int) -> list[dra.Claim]:
        name, uid, _ = claims[i]
        return [dra.Claim(namespace="default", name=name, uid=uid)]

    async def prepare(i: int) -> dra.NodePrepareResourcesResponse:
        request = dra.NodePrepareResourcesRequest(claims=refs(i))
        return await stubs[i % CHANNELS].NodePrepareResources(request, timeout=CALL_TIMEOUT)

    async def unprepare(i: int) -> dra.NodeUnprepareResourcesResponse:
        request = dra.NodeUnprepareResourcesRequest(claims=refs(i))
        return await stubs[i % CHANNELS].NodeUnprepareResources(request, timeout=CALL_TIMEOUT)

    try:
        prepared = await burst("NodePrepareResources", count, prepare)
        report(prepared.figures, record_property)
        assert prepared.failures == [], f"{len(prepared.failures)} of {count} prepares failed: {prepared.failures[:3]}"
        answers = prepared.values()
        cdi_ids: list[str] = []
        for (_, uid, device), response in zip(claims, answers, strict=True):
            assert list(response.claims) == [uid], "a claim got no answer, or an answer for another claim"
            result = response.claims[uid]
            assert result.error == ""
            (got,) = result.devices
            assert (got.pool_name, got.device_name, list(got.request_names)) == (NODE, device, ["gpu"])
            cdi_ids.extend(got.cdi_device_ids)
        assert len(cdi_ids) == count and len(set(cdi_ids)) == count, "two claims share a CDI device"
        assert driver.preparer.prepares == count

        stored = checkpoint(root).load()
        assert sorted(stored) == sorted(uid for _, uid, _ in claims), "the checkpoint lost or invented a claim"
        assert all(c.completed for c in stored.values())
        assert {uid: [r.device for r in stored[uid].devices] for _, uid, _ in claims} == {
            uid: [device] for _, uid, device in claims
        }
        specs = sorted((root / "cdi").iterdir())
        assert [p.name for p in specs] == sorted(f"k8s.gpu.nvidia.com-claim_{uid}.yaml" for _, uid, _ in claims)
        visible: list[str] = []
        for path in specs:
            (device,) = read_spec_file(path)["devices"]
            env = device["containerEdits"]["env"]
            visible.extend(e.split("=", 1)[1] for e in env if e.startswith("FAKEGPU_VISIBLE_DEVICES="))
        assert len(visible) == count and len(set(visible)) == count, "two claims see the same MIG device"
        assert set(visible) <= set(mig_uuid.values())

        again = await burst("NodePrepareResources (repeated)", count, prepare)
        report(again.figures, record_property)
        assert again.failures == []
        assert again.values() == answers, "a repeated prepare answered differently"
        assert driver.preparer.prepares == count, "a repeated prepare prepared again"

        unprepared = await burst("NodeUnprepareResources", count, unprepare)
        report(unprepared.figures, record_property)
        assert unprepared.failures == [], f"{len(unprepared.failures)} unprepares failed: {unprepared.failures[:3]}"
        for (_, uid, _), done in zip(claims, unprepared.values(), strict=True):
            assert list(done.claims) == [uid]
            assert done.claims[uid].error == ""
    finally:
        for channel in channels:
            await channel.close()

    assert checkpoint(root).load() == {}, "claims left in the checkpoint after unprepare"
    assert sorted(p.name for p in (root / "cdi").iterdir()) == [], "CDI specs (or temp files) left behind"
    assert driver.preparer.unprepares == count
    for figures in (prepared.figures, again.figures, unprepared.figures):
        timing.within(figures.wall, BURST_LIMIT, figures.name)
    await no_leaks(baseline)
    no_tracebacks(caplog)


def test_figures_line_and_percentiles():
    samples = [float(i) for i in range(1, 101)]
    assert (percentile(samples, 0.5), percentile(samples, 0.99), percentile(samples, 1.0)) == (50.0, 99.0, 100.0)
    assert percentile([3.0], 0.99) == 3.0
    assert percentile([], 0.5) == 0.0
    figures = Figures("Allocate", 1000, 1.5, 0.002, 0.0105, 0.02)
    assert figures.line() == "Allocate: 1000 concurrent calls in 1.50 s, p50 2.0 ms, p99 10.5 ms, max 20.0 ms"
