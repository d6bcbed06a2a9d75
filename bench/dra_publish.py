"""Time and API calls to publish ResourceSlices for 1 node and for N virtual nodes, and for one large node.

Each fleet node has 8 GPUs with dynamic MIG (every profile at every placement, with counters). Publishing
goes through lightkube to the in-process API server of the tests, which validates every object, so
the fleet figures' wall time includes server-side validation. The large-node figures (``fakegpu dra`` on
8x B200 or 64x H100 with dynamic MIG) give the client's own CPU instead: ``time.thread_time()`` of the
asyncio thread, where lightkube and the publisher run, while the API server answers from other threads;
for the first publish and for a re-publish with nothing changed, with the API calls each made.
Run: ``.venv/bin/python bench/dra_publish.py [--quick] [--only fleet|large]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lightkube import AsyncClient

from fakegpu.dra.resource_slices import SliceOptions
from fakegpu.dra.slice_publisher import SlicePublisher
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from tests.apiserver.fake_apiserver import FakeApiServer

GPUS = "8xh100-80gb"
LARGE_NODES = ("8xb200", "64xh100-80gb")


async def publish_nodes(count: int, minor: int) -> tuple[float, dict[str, int], int, int]:
    server = FakeApiServer(f"1.{minor}").start()
    try:
        names = [f"virtual-gpu-node-{i:04d}" for i in range(count)]
        for name in names:
            server.add_node(name)
        client = AsyncClient(config=server.lightkube_config(), trust_env=False)
        options = SliceOptions(mig_mode="dynamic", server_minor=minor)
        before = dict(server.counts)
        started = time.perf_counter()
        for name in names:
            live = LiveInventory(load_inventory(InventoryInputs(node_name=name, gpus=(GPUS,))))
            publisher = SlicePublisher(client, live, options, auto_api_version=False, auto_server_version=False)
            await publisher.discover()
            await publisher.publish()
        took = time.perf_counter() - started
        calls = {k: v - before.get(k, 0) for k, v in server.counts.items() if v - before.get(k, 0)}
        slices = server.objects("resourceslices")
        devices = sum(len(s["spec"].get("devices", [])) for s in slices)
        await client.close()
        return took, calls, len(slices), devices
    finally:
        server.stop()


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


async def large_node(gpus: str, minor: int) -> list[str]:
    """One ``fakegpu dra`` node with many devices: client CPU and API calls of a first publish and of a
    re-publish with nothing changed, and what the pool costs the API server (slices, devices, bytes)."""
    server = FakeApiServer(f"1.{minor}").start()
    try:
        name = "large-gpu-node"
        server.add_node(name)
        client = AsyncClient(config=server.lightkube_config(), trust_env=False)
        options = SliceOptions(mig_mode="dynamic", server_minor=minor)
        live = LiveInventory(load_inventory(InventoryInputs(node_name=name, gpus=(gpus,))))
        publisher = SlicePublisher(client, live, options, auto_api_version=False, auto_server_version=False)
        await publisher.discover()
        rows = []
        for label in ("first publish", "re-publish"):
            before = dict(server.counts)
            cpu = time.thread_time()
            await publisher.publish()
            cpu = time.thread_time() - cpu
            calls = ", ".join(f"{k} {v}" for k, v in sorted(_delta(dict(server.counts), before).items()))
            rows.append(f"{gpus:>13} {label:<14} {cpu * 1000:>9.1f}  {calls}")
        slices = server.objects("resourceslices")
        devices = sum(len(s["spec"].get("devices", [])) for s in slices)
        size = sum(len(json.dumps(s, separators=(",", ":"))) for s in slices)
        rows.append(f"{gpus:>13} {len(slices)} slices, {devices} devices, {size / 1024:.0f} KiB stored")
        await client.close()
        return rows
    finally:
        server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1, 10 and 100 nodes instead of 1, 100 and 1000")
    parser.add_argument("--server-version", type=int, default=36, help="Kubernetes minor (34, 35, 36)")
    parser.add_argument("--only", choices=("fleet", "large"), help="only the fleet or only the large-node figures")
    args = parser.parse_args()
    counts = [1, 10, 100] if args.quick else [1, 100, 1000]
    print(f"fakegpu DRA publishing benchmark ({'quick' if args.quick else 'full'})")
    print(
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    if args.only != "large":
        print(f"per node: {GPUS}, dynamic MIG, Kubernetes 1.{args.server_version} slice layout, in-process API server")
        print(f"{'nodes':>6} {'slices':>7} {'devices':>8} {'seconds':>9} {'ms/node':>8}  API calls")
        for count in counts:
            took, calls, slices, devices = await publish_nodes(count, args.server_version)
            summary = ", ".join(f"{k} {v}" for k, v in sorted(calls.items()))
            print(f"{count:>6} {slices:>7} {devices:>8} {took:>9.2f} {took / count * 1000:>8.1f}  {summary}")
    if args.only != "fleet":
        print(f"one large node, dynamic MIG, Kubernetes 1.{args.server_version}: client CPU of the asyncio thread")
        print(f"{'GPUs':>13} {'publish':<14} {'CPU ms':>9}  API calls")
        for gpus in LARGE_NODES:
            for row in await large_node(gpus, args.server_version):
                print(row)


if __name__ == "__main__":
    asyncio.run(main())
