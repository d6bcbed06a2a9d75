"""``fakegpu plugin``: the device plugin daemon, as a DaemonSet or by hand next to a kubelet.

SIGHUP or a changed config file reloads (a bad config is reported and the running inventory keeps
serving); SIGINT, SIGTERM and SIGQUIT stop the servers and remove their sockets.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import uuid
from pathlib import Path

from fakeplugin.admin_ops import RecentCalls, device_plugin_ops
from fakeplugin.plugin_manager import PluginManager, RegistrationMode
from kubeletapi.admin_socket import AdminServer
from kubeletapi.kubelet_paths import KubeletPaths
from sharing.health import XidPolicy
from sharing.inputs import CurrentInputs, InventoryInputs, load_inventory
from sharing.live_inventory import LiveInventory

log = logging.getLogger(__name__)


def watched_files(inputs: InventoryInputs) -> list[Path]:
    config = inputs.config_file or inputs.env.get("CONFIG_FILE") or None
    return [Path(p) for p in (config, inputs.node_spec, inputs.mig_config) if p]


async def run_plugin_daemon(
    inputs: InventoryInputs,
    paths: KubeletPaths,
    *,
    registration: RegistrationMode = "kubelet",
    pre_start_required: bool = False,
    bug_modes: frozenset[str] = frozenset(),
    stop: asyncio.Event | None = None,
    admin_socket: Path | None = None,
) -> int:
    """Serve until a stop signal; raises SpecError before serving if the first inventory is bad.

    With ``admin_socket``, also serve the owner-only admin socket ``fakegpu ctl`` talks to (none by default).
    """
    inventory = load_inventory(inputs)
    for warning in inventory.warnings:
        log.warning("%s", warning)
    if "random-device-ids" in bug_modes:
        inputs = dataclasses.replace(inputs, id_salt=uuid.uuid4().hex)
        inventory = load_inventory(inputs)
    live = LiveInventory(inventory, XidPolicy.from_env(inputs.env), bug_modes)
    current = CurrentInputs(inputs)
    calls = RecentCalls()
    manager = PluginManager(
        live,
        paths,
        registration=registration,
        pre_start_required=pre_start_required,
        reload_inventory=current.load,
        watch_files=watched_files(inputs),
        on_call=calls.record,
    )
    admin = AdminServer(admin_socket, device_plugin_ops(live, manager, calls, current)) if admin_socket else None
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(manager.reload()))
    try:
        if admin is not None:
            await admin.start()
        await manager.start()
        log.info("serving %s for node %s", ", ".join(manager.wanted()) or "no resources", inventory.node.name)
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        await manager.stop()
        if admin is not None:
            await admin.stop()
    return 0
