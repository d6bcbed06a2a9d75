"""Device plugin latency figures on a FakeNode (kubelet emulator + fakegpu's real plugin servers).

Run: ``.venv/bin/python bench/device_plugin.py [--quick]``. Prints a table per node shape; this is a
measurement, not a test, so nothing passes or fails.

Per shape it measures, over real Unix sockets in one asyncio process:

- Allocate and GetPreferredAllocation latency, called through the kubelet's own PluginEndpoint
  client of the resource (no device manager bookkeeping in the timed path);
- ListAndWatch propagation after a health change: from ``live.set_health(gpu, ...)`` until the
  kubelet emulator's device table shows the new health of every device on that GPU (checked on
  every event-loop turn);
- re-registration after a kubelet restart, as returned by ``FakeNode.restart_kubelet()`` (from the
  new kubelet's start until every resource is registered and synced; polled every 5 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml
from percentiles import percentile  # bench/ is on sys.path when a script runs

from fakegpu.kubelet.plugin_endpoint import PluginEndpoint
from fakegpu.runtime.eventually import eventually
from fakegpu.sharing.health import HEALTHY, UNHEALTHY
from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.testing.fake_node import FakeNode

WARMUP = 20
WAIT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Shape:
    label: str
    description: str
    gpus: str
    mig_layout: str | None = None
    cli_flags: dict[str, str | bool | None] = field(default_factory=dict)
    config: dict[str, Any] | None = None


SHAPES = (
    Shape("A", "8xh100-80gb, no sharing", "8xh100-80gb"),
    Shape(
        "B",
        "8xh100-80gb, MIG all-1g.10gb (mixed), time-slicing 16 replicas",
        "8xh100-80gb",
        mig_layout="all-1g.10gb",
        cli_flags={"mig_strategy": "mixed"},
        config={
            "version": "v1",
            "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 16}]}},
        },
    ),
)


@dataclass(frozen=True)
class Counts:
    rpc: int
    health: int
    restarts: int


@dataclass
class Row:
    name: str
    samples: list[float]  # seconds
    note: str = ""


async def timed(n: int, call: Callable[[int], Awaitable[object]]) -> list[float]:
    for i in range(min(WARMUP, n)):
        await call(i)
    out: list[float] = []
    for i in range(n):
        start = time.perf_counter()
        await call(i)
        out.append(time.perf_counter() - start)
    return out


def endpoint_of(node: FakeNode, resource: str) -> PluginEndpoint:
    state = node.kubelet.manager.resources.get(resource)
    if state is None or state.endpoint is None:
        raise RuntimeError(f"{resource} is not registered with the kubelet emulator")
    return state.endpoint


async def bench_rpcs(node: FakeNode, resource: str, n: int) -> list[Row]:
    endpoint = endpoint_of(node, resource)
    ids = sorted(node.kubelet.devices(resource))
    rows: list[Row] = []
    for size in (1, 8):
        chunks = [ids[i : i + size] for i in range(0, len(ids) - size + 1, size)]

        async def allocate(i: int, chunks: list[list[str]] = chunks) -> object:
            return await endpoint.allocate(chunks[i % len(chunks)])

        rows.append(Row(f"Allocate, {size} device{'s' if size > 1 else ''}", await timed(n, allocate)))
    if not endpoint.options.get_preferred_allocation_available:
        return [*rows, Row("GetPreferredAllocation", [], "not offered by the plugin")]
    for size in (1, 8):

        async def preferred(i: int, size: int = size) -> object:
            got = await endpoint.get_preferred_allocation(ids, [], size)
            if len(got) != size:
                raise RuntimeError(f"GetPreferredAllocation returned {len(got)} IDs, wanted {size}")
            return got

        rows.append(
            Row(
                f"GetPreferredAllocation, size {size}",
                await timed(n, preferred),
                f"from {len(ids)} available",
            )
        )
    return rows


async def wait_until(predicate: Callable[[], bool], what: str) -> None:
    """The one polling helper, looking at every turn of the event loop (``interval=0``): a latency figure
    must not carry a polling interval."""
    await eventually(predicate, what, WAIT_TIMEOUT, interval=0)


def kubelet_shows(node: FakeNode, resource: str, ids: Sequence[str], health: str) -> bool:
    """Whether the kubelet emulator's device table has every one of ``ids`` with ``health``."""
    state = node.kubelet.manager.resources.get(resource)
    if state is None:
        return False
    return all((d := state.devices.get(i)) is not None and d.health == health for i in ids)


async def bench_health(node: FakeNode, resource: str, n: int) -> list[Row]:
    gpus = len(node.inventory.node.gpus)
    down: list[float] = []
    up: list[float] = []
    changed = 0
    for i in range(n):
        target = str(i % gpus)
        for healthy, out in ((False, down), (True, up)):
            want = HEALTHY if healthy else UNHEALTHY
            start = time.perf_counter()
            ids = node.live.set_health(target, healthy)
            await wait_until(
                functools.partial(kubelet_shows, node, resource, ids, want),
                f"GPU {target} healthy={healthy} in the kubelet",
            )
            out.append(time.perf_counter() - start)
            changed = len(ids)
            if not node.synced():
                raise RuntimeError("kubelet allocatable does not match the inventory after a health change")
    note = f"{changed} device{'s' if changed != 1 else ''} per GPU"
    return [Row("ListAndWatch: GPU -> unhealthy", down, note), Row("ListAndWatch: GPU -> healthy", up, note)]


async def bench_restart(node: FakeNode, n: int) -> list[Row]:
    samples = [await node.restart_kubelet(timeout=WAIT_TIMEOUT) for _ in range(n)]
    return [Row("kubelet restart -> re-registered", samples, f"{len(node.plugins.wanted())} resource(s)")]


async def run_shape(shape: Shape, counts: Counts) -> None:
    root = Path(tempfile.mkdtemp(prefix="fgb-", dir="/tmp"))
    try:
        config_file = None
        if shape.config is not None:
            config_path = root / "config.yaml"
            config_path.write_text(yaml.safe_dump(shape.config))
            config_file = str(config_path)
        inputs = InventoryInputs(
            node_name="bench-node",
            gpus=(shape.gpus,),
            mig_layout=shape.mig_layout,
            config_file=config_file,
            cli_flags=shape.cli_flags,
        )
        node = FakeNode(root / "kubelet", inputs, grace_period=300.0)
        started = time.perf_counter()
        await node.start(timeout=WAIT_TIMEOUT)
        startup = time.perf_counter() - started
        try:
            resource = max(node.plugins.wanted(), key=lambda r: node.capacity().get(r, 0))
            devices = node.capacity()[resource]
            rows = await bench_rpcs(node, resource, counts.rpc)
            rows += await bench_health(node, resource, counts.health)
            rows += await bench_restart(node, counts.restarts)
        finally:
            await node.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\nShape {shape.label}: {shape.description}")
    print(f"  resource {resource}: {devices} devices; node start to synced {startup * 1000:.2f} ms")
    print_table(rows)


def print_table(rows: Sequence[Row]) -> None:
    header = f"  {'measurement':<36} {'n':>5} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}  note"
    print(header)
    print("  " + "-" * (len(header) - 2))
    for row in rows:
        if not row.samples:
            print(f"  {row.name:<36} {0:>5} {'-':>9} {'-':>9} {'-':>9}  {row.note}".rstrip())
            continue
        p50, p99 = percentile(row.samples, 50) * 1000, percentile(row.samples, 99) * 1000
        top = max(row.samples) * 1000
        print(f"  {row.name:<36} {len(row.samples):>5} {p50:>9.2f} {p99:>9.2f} {top:>9.2f}  {row.note}".rstrip())


async def main(quick: bool) -> None:
    counts = Counts(rpc=100, health=20, restarts=5) if quick else Counts(rpc=500, health=50, restarts=20)
    print(f"fakegpu device plugin benchmark ({'quick' if quick else 'full'})")
    print(
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, grpcio {grpc.__version__}"
    )
    print(
        f"iterations: {counts.rpc} per RPC size (+{WARMUP} warm-up), {counts.health} health flips each way, "
        f"{counts.restarts} kubelet restarts"
    )
    began = time.perf_counter()
    for shape in SHAPES:
        await run_shape(shape, counts)
    print(f"\ntotal wall time {time.perf_counter() - began:.1f} s")


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (under 30 s)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main(bool(args.quick)))


if __name__ == "__main__":
    cli()
