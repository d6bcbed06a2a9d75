"""Load figures: many concurrent kubelet calls against one device plugin and one DRA driver.

Run: ``.venv/bin/python bench/load.py [--allocates N] [--streams N] [--prepares N]``. The same bursts as
``tests/reliability/test_load.py`` (which asserts completeness; this only measures), over real Unix
sockets in one asyncio process, clients and servers sharing one event loop:

- Allocate: N calls at once (default 1000), each for one distinct replica of 8 H100s time-sliced into
  at least N replicas, over 4 channels; and, for comparison, 200 calls one at a time.
- ListAndWatch: N streams at once (default 100): time to each stream's first list (1000 devices), then
  from one health change (GPU 0 unhealthy) until each stream has the new list.
- NodePrepareResources / NodeUnprepareResources (v1): N claims at once (default 200), one claim per call,
  each on its own MIG device (32 H100s, 7 x 1g.10gb each), against the in-process API server of the
  tests; then the same prepares again (idempotent: answered from the checkpoint); and 50 prepares one
  at a time.

Latency is per call, from its start to its answer, so under a burst it includes the wait behind the
calls started before it; "wall" is the whole burst. Calls that fail are counted, never timed away.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc
import yaml

from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2 as dp
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2_grpc as dp_grpc
from fakegpu.kubeletapi.dra.v1 import api_pb2 as dra
from fakegpu.kubeletapi.dra.v1 import api_pb2_grpc as dra_grpc
from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.testing.fake_node import FakeNode
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.claim_builders import allocated_claim
from tests.reliability.raw_calls import (
    Burst,
    Figures,
    burst,
    percentile,
    published_device_names,
    start_dra_driver,
    unix_channel,
)

T = TypeVar("T")

GPUS = 8
CHANNELS = 4
TIMEOUT = 60.0
NODE = "load-node"
SEQUENTIAL_ALLOCATES = 200
SEQUENTIAL_PREPARES = 50


async def one_at_a_time(name: str, count: int, call: Callable[[int], Awaitable[T]]) -> Burst[T]:
    """``count`` calls, each started when the previous one answered."""
    results: list[T | BaseException] = []
    latencies = []
    began = time.perf_counter()
    for i in range(count):
        started = time.perf_counter()
        try:
            results.append(await call(i))
        except Exception as exc:
            results.append(exc)
        latencies.append(time.perf_counter() - started)
    wall = time.perf_counter() - began
    return Burst(
        results, Figures(name, count, wall, percentile(latencies, 0.5), percentile(latencies, 0.99), max(latencies))
    )


def row(figures: Figures, failures: int, note: str = "") -> str:
    return (
        f"  {figures.name:<42} {figures.count:>6} {figures.wall:>8.2f} {figures.p50 * 1000:>9.1f} "
        f"{figures.p99 * 1000:>9.1f} {figures.max * 1000:>9.1f} {failures:>6}  {note}"
    ).rstrip()


def header() -> None:
    line = f"  {'calls':<42} {'n':>6} {'wall s':>8} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'failed':>6}"
    print(line)
    print("  " + "-" * (len(line) - 2))


async def device_plugin(root: Path, allocates: int, streams: int) -> None:
    replicas = max(2, math.ceil(allocates / GPUS))
    config = root / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": "v1",
                "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": replicas}]}},
            }
        )
    )
    inputs = InventoryInputs(node_name=NODE, gpus=(f"{GPUS}xh100-80gb",), config_file=str(config))
    node = FakeNode(root / "kubelet", inputs)
    await node.start()
    socket = node.kubelet.paths.device_plugins / "nvidia-gpu.sock"
    channels = [unix_channel(socket) for _ in range(CHANNELS)]
    stubs = [dp_grpc.DevicePluginStub(c) for c in channels]
    try:
        resource = node.inventory.resource("nvidia.com/gpu")
        assert resource is not None
        ids = [d.id for d in resource.devices]
        print(f"\nDevice plugin: {GPUS}x H100 time-sliced x{replicas} = {len(ids)} devices of nvidia.com/gpu")
        header()

        async def allocate(i: int) -> dp.AllocateResponse:
            request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=[ids[i]])])
            return await stubs[i % CHANNELS].Allocate(request, timeout=TIMEOUT)

        done = await burst("Allocate, all at once", allocates, allocate)
        print(row(done.figures, len(done.failures), "one replica each, 4 channels"))
        done = await one_at_a_time("Allocate, one at a time", SEQUENTIAL_ALLOCATES, allocate)
        print(row(done.figures, len(done.failures)))

        calls = [stubs[i % CHANNELS].ListAndWatch(dp.Empty(), timeout=TIMEOUT * 2) for i in range(streams)]
        try:

            async def first(i: int) -> object:
                return await calls[i].read()

            opened = await burst("ListAndWatch first list", streams, first)
            print(row(opened.figures, len(opened.failures), f"{len(ids)} devices per list"))
            changed_at = time.perf_counter()
            node.live.set_health("0", healthy=False)
            delays: list[float] = []

            async def pushed(i: int) -> object:
                message = await asyncio.wait_for(calls[i].read(), TIMEOUT)
                delays.append(time.perf_counter() - changed_at)
                return message

            change = await burst("ListAndWatch health change", streams, pushed)
            push = Figures(
                "ListAndWatch health change to each stream",
                streams,
                change.figures.wall,
                percentile(delays, 0.5),
                percentile(delays, 0.99),
                max(delays, default=0.0),
            )
            print(row(push, len(change.failures), "from set_health to the stream's new list"))
        finally:
            for call in calls:
                call.cancel()
    finally:
        for channel in channels:
            await channel.close()
        await node.stop()


async def dra_driver(root: Path, prepares: int) -> None:
    server = FakeApiServer("1.36").start()
    try:
        server.add_node(NODE)
        driver = await start_dra_driver(server, root, node=NODE, gpus="32xh100-80gb", mig_layout="all-1g.10gb")
        channels = [unix_channel(driver.plugin.dra_socket) for _ in range(CHANNELS)]
        stubs = [dra_grpc.DRAPluginStub(c) for c in channels]
        try:
            devices = published_device_names(server, NODE)
            count = min(prepares, len(devices))
            extra = min(SEQUENTIAL_PREPARES, len(devices) - count)
            claims = []
            for i in range(count + extra):
                uid = server.create_direct(allocated_claim(f"claim-{i:04d}", NODE, [devices[i]]))["metadata"]["uid"]
                claims.append(dra.Claim(namespace="default", name=f"claim-{i:04d}", uid=uid))
            print(f"\nDRA driver: {len(devices)} MIG devices (32x H100, all-1g.10gb), one claim per device")
            header()

            async def prepare(i: int) -> dra.NodePrepareResourcesResponse:
                request = dra.NodePrepareResourcesRequest(claims=[claims[i]])
                return await stubs[i % CHANNELS].NodePrepareResources(request, timeout=TIMEOUT)

            async def unprepare(i: int) -> dra.NodeUnprepareResourcesResponse:
                request = dra.NodeUnprepareResourcesRequest(claims=[claims[i]])
                return await stubs[i % CHANNELS].NodeUnprepareResources(request, timeout=TIMEOUT)

            def failed(b: Burst[dra.NodePrepareResourcesResponse] | Burst[dra.NodeUnprepareResourcesResponse]) -> int:
                errors = [c.error for r in b.values() for c in r.claims.values() if c.error]
                return len(b.failures) + len(errors)

            done = await burst("NodePrepareResources, all at once", count, prepare)
            print(row(done.figures, failed(done), "one claim per call: API read, checkpoint, CDI spec"))
            again = await burst("NodePrepareResources again, all at once", count, prepare)
            print(row(again.figures, failed(again), "already prepared: from the checkpoint"))
            gone = await burst("NodeUnprepareResources, all at once", count, unprepare)
            print(row(gone.figures, failed(gone)))
            if extra:
                single = await one_at_a_time("NodePrepareResources, one at a time", extra, lambda i: prepare(count + i))
                print(row(single.figures, failed(single)))
        finally:
            for channel in channels:
                await channel.close()
            await driver.stop()
    finally:
        server.stop()


async def main(allocates: int, streams: int, prepares: int) -> None:
    print("fakegpu load benchmark")
    print(
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, grpcio {grpc.__version__}"
    )
    began = time.perf_counter()
    runs: list[Callable[[Path], Awaitable[None]]] = [
        lambda root: device_plugin(root, allocates, streams),
        lambda root: dra_driver(root, prepares),
    ]
    for run in runs:
        root = Path(tempfile.mkdtemp(prefix="fgload-", dir="/tmp"))
        try:
            await run(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\ntotal wall time {time.perf_counter() - began:.1f} s")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--allocates", type=int, default=1000, help="concurrent Allocate calls (default 1000)")
    parser.add_argument("--streams", type=int, default=100, help="concurrent ListAndWatch streams (default 100)")
    parser.add_argument("--prepares", type=int, default=200, help="concurrent NodePrepareResources (default 200)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(args.allocates, args.streams, args.prepares))


if __name__ == "__main__":
    cli()
