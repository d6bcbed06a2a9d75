"""The device plugin as one node runs it, built in one place for the daemon and for the test fixture.

``fakegpu plugin`` (``fakegpu.fakeplugin.daemon``) and the pytest fixture's ``FakeNode`` both build their
plugin here, so a user's test runs the plugin a DaemonSet runs: the same inputs (``CONFIG_FILE`` from the
environment included) give the same inventory, the same device IDs, the same watched files and the same
reload, and the same CDI specs and fake nvidia-smi files next to it.

Building reads the inputs and raises ``SpecError`` for a bad one, but touches nothing on the node; the files
are written by :meth:`PluginStack.write_files` and the sockets served by :meth:`PluginStack.start`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from fakegpu.fakeplugin.call_log import DAEMON_CALL_LIMIT, CallLog
from fakegpu.fakeplugin.imex_channels import check_imex_channels
from fakegpu.fakeplugin.metrics import DevicePluginMetrics
from fakegpu.fakeplugin.plugin_cdi_specs import PluginCdiSpecs
from fakegpu.fakeplugin.plugin_manager import PluginManager, RegistrationMode
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.bug_modes import BugMode
from fakegpu.sharing.health import XidPolicy
from fakegpu.sharing.inputs import CurrentInputs, InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.nvidia_smi_files import NvidiaSmiFiles

log = logging.getLogger(__name__)


def watched_files(inputs: InventoryInputs) -> list[Path]:
    """The input files a change of which reloads the plugin: the config (``--config-file`` or, as NVIDIA's
    plugin reads it, ``CONFIG_FILE`` from the environment), the node spec and the MIG config."""
    config = inputs.config_file or inputs.env.get("CONFIG_FILE") or None
    return [Path(p) for p in (config, inputs.node_spec, inputs.mig_config) if p]


class PluginStack:
    """One node's device plugin: its inputs, live inventory, plugin manager and the files it keeps current.

    With the ``random-device-ids`` bug mode the device IDs are fresh when the stack is built (a process
    start) and again at every later start of the plugin servers (``PluginManager.start``, whoever calls it:
    the fixture's ``start_plugins``, the daemon's ``fakegpu ctl plugins start``), as the buggy plugin's. A
    restart that the kubelet causes (``restart_all``, a new ``kubelet.sock``) keeps them.
    """

    def __init__(
        self,
        inputs: InventoryInputs,
        paths: KubeletPaths,
        *,
        bug_modes: frozenset[BugMode] = frozenset(),
        registration: RegistrationMode = "kubelet",
        pre_start_required: bool = False,
        cdi_root: Path | None = None,
        calls: CallLog | None = None,
    ) -> None:
        """Raises ``SpecError`` if the inputs describe no valid inventory. With ``cdi_root``, the plugin's
        CDI specs go there whenever a CDI deviceListStrategy is configured; ``calls`` records every RPC
        (by default the last ones, as a daemon keeps them)."""
        self.bug_modes = bug_modes
        self.cdi_root = cdi_root
        self.current = CurrentInputs(inputs)
        if BugMode.RANDOM_DEVICE_IDS in bug_modes:
            self.current.inputs = self.current.candidate(new_ids=True)
        inventory = self.current.load()
        for warning in inventory.warnings:
            log.warning("%s", warning)
        self.live = LiveInventory(inventory, XidPolicy.from_env(inputs.env), bug_modes)
        self.calls = calls if calls is not None else CallLog(DAEMON_CALL_LIMIT)
        self.metrics = DevicePluginMetrics(self.live)
        self.manager = PluginManager(
            self.live,
            paths,
            registration=registration,
            pre_start_required=pre_start_required,
            reload_inventory=self.current.load,
            watch_files=watched_files(self.current.inputs),
            on_call=self.calls.record,
            metrics=self.metrics,
            before_start=self._before_start,
        )
        self._following = False
        self._unfollow: list[Callable[[], None]] = []
        self._starts = 0

    @property
    def inputs(self) -> InventoryInputs:
        """The inputs served now (a reload reads them again; a reconfiguration replaces them)."""
        return self.current.inputs

    def write_files(self) -> None:
        """Before the plugins first serve: refuse a required IMEX channel the node lacks (as NVIDIA's
        ``GetPlugins`` fails before ``CreateCDISpecFile``), then write the CDI specs and the fake nvidia-smi
        files and rewrite them after every inventory change, until :meth:`close`. Once only."""
        if self._following:
            return
        check_imex_channels(self.live.inventory)
        try:
            if self.cdi_root is not None:
                # Before any Allocate names a CDI device, as NVIDIA's plugin manager.
                self._unfollow.append(PluginCdiSpecs(self.cdi_root).follow(self.live))
            if self.inputs.nvidia_smi_dir:
                # Before any Allocate can mount them.
                self._unfollow.append(NvidiaSmiFiles(Path(self.inputs.nvidia_smi_dir)).follow(self.live))
        except BaseException:
            self.close()  # a file that cannot be written leaves no half-subscribed writer behind
            raise
        self._following = True

    def _before_start(self) -> None:
        """Every start of the plugin servers after the first (``FakeNode.start_plugins``, ``fakegpu ctl plugins
        start``) serves fresh device IDs under ``random-device-ids``; the inputs change only once the new
        inventory has been built."""
        if self._starts and BugMode.RANDOM_DEVICE_IDS in self.bug_modes:
            candidate = self.current.candidate(new_ids=True)
            inventory = load_inventory(candidate)
            self.current.inputs = candidate
            self.live.replace(inventory)
        self._starts += 1

    async def start(self) -> None:
        """Serve and register every resource (``PluginManager.start``)."""
        await self.manager.start()

    async def stop(self) -> None:
        await self.manager.stop()

    def close(self) -> None:
        """Stop keeping the files current (they stay: NVIDIA's plugin never removes its CDI specs)."""
        while self._unfollow:
            self._unfollow.pop()()
        self._following = False
