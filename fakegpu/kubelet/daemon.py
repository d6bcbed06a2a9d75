"""``fakegpu kubelet``: the kubelet emulator as a standalone process, printing node status changes.

With an admin socket (by default ``<kubelet dir>/fakegpu-kubelet.sock``) ``fakegpu ctl --kubelet-dir DIR``
runs and deletes pods, lists them with their devices, restarts the kubelet and moves its clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path

from fakegpu.control.server import AdminServer
from fakegpu.kubelet.admin_ops import kubelet_ops
from fakegpu.kubelet.admin_socket import default_admin_socket
from fakegpu.kubelet.emulator import KubeletEmulator


def status_line(kubelet: KubeletEmulator) -> str:
    capacity, allocatable = kubelet.capacity(), kubelet.allocatable()
    parts = [f"{name} capacity={capacity[name]} allocatable={allocatable.get(name, 0)}" for name in capacity]
    return "node status: " + ("; ".join(parts) if parts else "no extended resources")


async def run_kubelet(
    root: Path,
    grace_period: float,
    interval: float = 0.5,
    stop: asyncio.Event | None = None,
    admin_socket: Path | None = None,
) -> int:
    """Serve until SIGINT/SIGTERM; with ``admin_socket``, also the admin socket ``fakegpu ctl`` talks to."""
    kubelet = KubeletEmulator(root, grace_period=grace_period)
    admin = AdminServer(admin_socket, kubelet_ops(kubelet)) if admin_socket is not None else None
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    started = False  # a kubelet that never started must not remove another one's kubelet.sock
    try:
        if admin is not None:
            # First: a live admin socket means another emulator serves this dir, and starting would
            # remove its sockets; the server refuses to take the socket over (SocketPathError).
            root.mkdir(parents=True, exist_ok=True)
            await admin.start()
        started = True
        await kubelet.start()
        print(f"kubelet emulator listening on {kubelet.paths.kubelet_socket}", flush=True)
        if admin is not None:
            ctl = f"--kubelet-dir {root}" if admin.path == default_admin_socket(root) else f"--socket {admin.path}"
            print(f"admin socket {admin.path} (fakegpu ctl {ctl} ...)", flush=True)
        last = ""
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
        if admin is not None:
            await admin.stop()
        if started:
            await kubelet.stop()
        sys.stdout.flush()
    return 0
