"""``fakegpu kubelet``: the kubelet emulator as a standalone process, printing node status changes."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from fakegpu.kubelet.emulator import KubeletEmulator


def status_line(kubelet: KubeletEmulator) -> str:
    capacity, allocatable = kubelet.capacity(), kubelet.allocatable()
    parts = [f"{name} capacity={capacity[name]} allocatable={allocatable.get(name, 0)}" for name in capacity]
    return "node status: " + ("; ".join(parts) if parts else "no extended resources")


async def run_kubelet(root: Path, grace_period: float, interval: float = 0.5, stop: asyncio.Event | None = None) -> int:
    kubelet = KubeletEmulator(root, grace_period=grace_period)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await kubelet.start()
    print(f"kubelet emulator listening on {kubelet.paths.kubelet_socket}", flush=True)
    last = ""
    try:
        while not stop.is_set():
            line = status_line(kubelet)
            if line != last:
                print(line, flush=True)
                last = line
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await kubelet.stop()
        sys.stdout.flush()
    return 0
