"""Time and API calls to publish ResourceSlices for 1 node and for N virtual nodes.

Each node has 8 GPUs with dynamic MIG (every profile at every placement, with counters). Publishing
goes through lightkube to the in-process API server of the tests, which validates every object, so
the figures include server-side validation. Run: ``.venv/bin/python bench/dra_publish.py [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
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


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="1, 10 and 100 nodes instead of 1, 100 and 1000")
    parser.add_argument("--server-version", type=int, default=36, help="Kubernetes minor (34, 35, 36)")
    args = parser.parse_args()
    counts = [1, 10, 100] if args.quick else [1, 100, 1000]
    print(f"fakegpu DRA publishing benchmark ({'quick' if args.quick else 'full'})")
    print(
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    print(f"per node: {GPUS}, dynamic MIG, Kubernetes 1.{args.server_version} slice layout, in-process API server")
    print(f"{'nodes':>6} {'slices':>7} {'devices':>8} {'seconds':>9} {'ms/node':>8}  API calls")
    for count in counts:
        took, calls, slices, devices = await publish_nodes(count, args.server_version)
        summary = ", ".join(f"{k} {v}" for k, v in sorted(calls.items()))
        print(f"{count:>6} {slices:>7} {devices:>8} {took:>9.2f} {took / count * 1000:>8.1f}  {summary}")


if __name__ == "__main__":
    asyncio.run(main())
