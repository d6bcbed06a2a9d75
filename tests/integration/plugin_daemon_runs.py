"""One run of the device-plugin daemon (with GFD's node sync) under the kubelet emulator, for the tests that
check what the daemon leaves on the API server when it exits.

The run waits for the daemon's first effect before yielding (so an exit test never stops a daemon that has
not synced yet) and, on leaving, stops it as SIGTERM does and checks it exited cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from fakegpu.fakeplugin.daemon import NodeSettings, run_plugin_daemon
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.inputs import InventoryInputs
from tests.daemon_tasks import stop_and_wait
from tests.eventually import eventually


@contextlib.asynccontextmanager
async def plugin_daemon_running(
    root: Path, node_name: str, node: NodeSettings, started: Callable[[], bool], what: str
) -> AsyncIterator[None]:
    """Run the plugin daemon for ``node_name`` (2 x A100-40GB) until ``started()`` holds (``what`` names it
    for the timeout message), yield, then stop it and the kubelet emulator."""
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    stop = asyncio.Event()
    inputs = InventoryInputs(node_name=node_name, gpus=("2xa100-40gb",))
    task = asyncio.create_task(run_plugin_daemon(inputs, KubeletPaths(root / "kubelet"), stop=stop, node=node))
    try:
        await eventually(lambda: started() or task.done(), what)
        assert not task.done(), task
        yield
    finally:
        try:
            assert await stop_and_wait(stop, task) == [0]
        finally:
            await kubelet.stop()
