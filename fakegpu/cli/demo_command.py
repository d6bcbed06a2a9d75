"""``fakegpu demo``: the kubelet emulator and the device plugins in one process, shown end to end.

Prints what a node with these GPUs reports (capacity and allocatable per resource), its GFD labels,
and one sample allocation per resource, so a newcomer sees every moving part in one command.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import TextIO

from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2
from fakegpu.sharing.inputs import InventoryInputs, load_config, load_node
from fakegpu.sharing.labels import gfd_labels
from fakegpu.testing.fake_node import FakeNode


def _describe_response(response: api_pb2.ContainerAllocateResponse) -> list[str]:
    lines = [f"      env    {k}={v}" for k, v in sorted(response.envs.items())]
    lines += [
        f"      mount  {m.host_path} -> {m.container_path}{' (ro)' if m.read_only else ''}" for m in response.mounts
    ]
    lines += [f"      device {d.host_path} -> {d.container_path} ({d.permissions})" for d in response.devices]
    lines += [f"      annot  {k}={v}" for k, v in sorted(response.annotations.items())]
    lines += [f"      cdi    {c.name}" for c in response.cdi_devices]
    return lines or ["      (empty response)"]


async def run_demo(inputs: InventoryInputs, out: TextIO) -> int:
    root = Path(tempfile.mkdtemp(prefix="fgdemo-", dir="/tmp"))
    try:
        node = FakeNode(root / "kubelet", inputs)
        started = time.monotonic()
        async with node:
            took = time.monotonic() - started
            inv = node.inventory
            models: dict[str, int] = {}
            for g in inv.node.gpus:
                models[g.model.product_name] = models.get(g.model.product_name, 0) + 1
            summary = ", ".join(f"{n}x {name}" for name, n in models.items())
            out.write(f"fakegpu demo: node {inv.node.name!r} with {summary}\n")
            out.write(f"kubelet emulator and device plugins over Unix sockets in {node.kubelet.paths.root}\n")
            out.write(f"all plugins registered and devices pushed in {took * 1000:.0f} ms\n\n")
            for w in inv.warnings:
                out.write(f"warning: {w}\n")
            capacity, allocatable = node.capacity(), node.allocatable()
            out.write(f"{'RESOURCE':<34} {'CAPACITY':>8} {'ALLOCATABLE':>11}  SOCKET\n")
            for r in inv.resources:
                if r.devices:
                    out.write(
                        f"{r.name:<34} {capacity.get(r.name, 0):>8} {allocatable.get(r.name, 0):>11}  {r.socket_name}\n"
                    )
            out.write("\nnode labels (GPU Feature Discovery):\n")
            for k, v in gfd_labels(load_node(inputs), load_config(inputs)).items():
                out.write(f"  {k}={v}\n")
            out.write("\nsample allocation, one pod per resource asking for 1 device:\n")
            for n, r in enumerate(x for x in inv.resources if x.devices):
                pod = await node.run_pod(f"demo-pod-{n}", {"main": {r.name: 1}})
                out.write(f"  {r.name}: pod {pod.uid} {pod.phase}\n")
                if not pod.admitted:
                    out.write(f"      {pod.reason}: {pod.message}\n")
                    continue
                out.write("\n".join(_describe_response(pod.responses["main"][r.name])) + "\n")
                node.delete_pod(pod.uid)
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)
