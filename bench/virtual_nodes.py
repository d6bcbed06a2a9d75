"""Time and API calls to bring up N virtual nodes, then to re-run (nothing to write) and to delete them.

Each size gets a fresh in-process API server of the tests (which validates every object with the cached
kubernetes-validate schemas), and the same controller ``fakegpu virtual-nodes`` runs, over HTTP through
lightkube. Per-node time is from a node's first request to its last, once it has a concurrency slot.
Run: ``.venv/bin/python bench/virtual_nodes.py [--sizes 100,1000] [--concurrency 16] [--gpus 8xh100-80gb]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lightkube import AsyncClient

from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.virtual_nodes.api import Api
from fakegpu.virtual_nodes.controller import Settings, VirtualNodeController
from fakegpu.virtual_nodes.pools import DEFAULT_POOL, Pool, build_virtual_nodes
from fakegpu.virtual_nodes.report import Outcome
from tests.apiserver.fake_apiserver import FakeApiServer


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def calls_text(counts: collections.Counter[str] | dict[str, int]) -> str:
    return ", ".join(f"{verb} {n}" for verb, n in sorted(counts.items()) if n)


async def bench(count: int, args: argparse.Namespace) -> None:
    started = time.perf_counter()
    pool = Pool(DEFAULT_POOL, InventoryInputs(node_name="", gpus=(args.gpus,)), count, in_names=False)
    nodes, _ = build_virtual_nodes([pool], "fakegpu-virtual-")
    planning = time.perf_counter() - started
    server = FakeApiServer(f"1.{args.server_version}").start()
    client = AsyncClient(config=server.lightkube_config(), trust_env=False)
    try:
        settings = Settings(mig_mode=args.mig_mode, server_minor=args.server_version, concurrency=args.concurrency)
        api = Api(client)
        controller = VirtualNodeController(api, nodes, settings, say=lambda _: None)
        await controller.discover()
        before = collections.Counter(server.counts)
        report = await controller.bring_up()
        calls = collections.Counter(server.counts) - before
        total = sum(calls.values())
        durations = list(report.durations.values())
        slices = server.objects("resourceslices")
        devices = sum(len(s["spec"].get("devices", [])) for s in slices)
        assert report.ok and report.count(Outcome.CREATED) == count, report.lines()
        print(f"\n{count} nodes ({args.gpus}, {args.mig_mode} MIG, Kubernetes 1.{args.server_version} layout):")
        print(f"  planning (inventories, labels):  {planning:.2f} s")
        print(f"  bring-up wall time:              {report.seconds:.2f} s  ({count / report.seconds:.0f} nodes/s)")
        print(f"  objects:                         {count} nodes, {len(slices)} slices, {devices} devices")
        print(f"  API calls (server):              {total} ({calls_text(calls)}), {total / count:.2f} per node")
        print(f"  API calls (client, + discovery): {sum(api.calls.values())} ({calls_text(api.calls)})")
        print(
            f"  per-node bring-up:               p50 {percentile(durations, 0.5) * 1000:.1f} ms, "
            f"p99 {percentile(durations, 0.99) * 1000:.1f} ms, max {max(durations) * 1000:.1f} ms"
        )

        before = collections.Counter(server.counts)
        rerun = VirtualNodeController(Api(client), nodes, settings, say=lambda _: None)
        await rerun.discover()
        again = await rerun.bring_up()
        calls = collections.Counter(server.counts) - before
        assert again.count(Outcome.UNCHANGED) == count, again.lines()
        print(f"  re-run (nothing to write):       {again.seconds:.2f} s, API calls: {calls_text(calls)}")

        before = collections.Counter(server.counts)
        deleted = await VirtualNodeController(Api(client), [], settings, say=lambda _: None).delete_all()
        calls = collections.Counter(server.counts) - before
        print(f"  --delete:                        {deleted.seconds:.2f} s, API calls: {calls_text(calls)}")
        assert server.rejections == [] and server.errors == []
    finally:
        await client.close()
        server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,1000", help="comma-separated node counts (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=16, help="nodes in flight (default %(default)s)")
    parser.add_argument("--gpus", default="8xh100-80gb", help="GPUs per node (default %(default)s)")
    parser.add_argument("--mig-mode", choices=("static", "dynamic"), default="static")
    parser.add_argument("--server-version", type=int, default=36, help="Kubernetes minor, 32-36 (default 36)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    print("fakegpu virtual-nodes benchmark (in-process API server, lightkube over HTTP)")
    print(
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
        f"; concurrency {args.concurrency}"
    )
    for count in sizes:
        await bench(count, args)


if __name__ == "__main__":
    asyncio.run(main())
