"""Kubelet restarts, over and over: the plugins must come back every time and leave nothing behind.

A real node's kubelet restarts on every upgrade, config change and crash; each time it wipes
``device-plugins/`` and re-creates ``kubelet.sock``, and the plugins must notice, serve again and
re-register. One restart is covered by the integration tests; this soak repeats it
(``profile.kubelet_restarts`` times, 100 in both profiles) through the kubelet emulator, three ways:

- plugins in this process (a FakeNode), registering on ``kubelet.sock`` and through ``plugins_registry/``:
  whatever the plugin manager or the emulator keeps per restart shows up as growth of this process's
  file descriptors, threads, asyncio tasks or memory;
- a real ``fakegpu plugin`` subprocess, as on a node: its fds, threads and RSS are read from /proc, and
  its log must hold no error.

Between restarts the node admits and deletes pods (seeded, so a failure replays), so the checkpoint
keeps changing and every restart has to restore whatever it held at that moment.

Per restart it checks: re-registered and synced (within ``REREGISTER_LIMIT``, 1 s, when a limit is given:
``bench/soak.py`` always, the test only with ``--timing``); the device IDs of
every resource unchanged; the checkpoint's allocations (pod, container, resource, devices and the
stored Allocate response) exactly as before, on disk and in the restored device manager; every device
healthy again; every plugin socket re-created (the kubelet removed the old ones). After the loop, with
``WARMUP`` restarts excluded: no new fds, threads (gRPC's elastic pool aside) or tasks, RSS growth
under ``process_probe.RSS_LIMIT``.

``soak_kubelet_restarts`` runs it for the tests (``tests/reliability/test_kubelet_restarts.py``) and for
``bench/soak.py``, which prints its figures: a module of its own, so that bench imports no test module.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from fakegpu.fakeplugin.plugin_manager import RegistrationMode
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.kubelet_paths import KUBELET_SOCKET
from fakegpu.runtime.unix_socket import identity
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.testing.fake_node import FakeNode
from tests.eventually import eventually
from tests.reliability.process_probe import Usage, settle_self, usage_of

REREGISTER_LIMIT = 1.0
"""Seconds from the new kubelet's start until every resource is registered and its devices pushed."""
WARMUP = 5
"""Restarts before the 'before' reading: gRPC and the allocator reach their steady state first."""
SEED = 8

NODE_INPUTS = InventoryInputs(
    node_name="soak-node",
    gpus=("2xh100-80gb",),
    mig_layout="all-balanced",
    cli_flags={"mig_strategy": "mixed"},
)
"""Three resources (mig-1g.10gb x4, mig-2g.20gb x2, mig-3g.40gb x2): three plugins re-register each time."""
DAEMON_ARGS = (
    "--node-name",
    "soak-node",
    "--gpus",
    "2xh100-80gb",
    "--mig-layout",
    "all-balanced",
    "--mig-strategy",
    "mixed",
)
PluginPlacement = Literal["in-process", "daemon"]

Entry = tuple[str, str, str, tuple[str, ...], bytes]
"""A checkpoint allocation: pod UID, container, resource, device IDs (sorted), Allocate response."""


@dataclass
class KubeletSoakFigures:
    plugins: PluginPlacement
    registration: RegistrationMode
    restarts: int = 0
    reregistration: list[float] = field(default_factory=list)
    """Seconds per restart until every resource was registered again and synced."""
    before: Usage | None = None
    after: Usage | None = None
    pods_admitted: int = 0
    pods_deleted: int = 0
    max_allocations: int = 0
    elapsed: float = 0.0
    problems: list[str] = field(default_factory=list)
    """Every broken promise, with the restart it happened at; empty when the soak passed."""

    def leaks(self) -> list[str]:
        """Growth beyond the limits between the reading after the warm-up and the one at the end."""
        if self.before is None or self.after is None:
            return ["no before/after readings (the soak did not get past its warm-up)"]
        grown = self.after.growth(self.before)
        return grown.leaks(over=f" over {self.restarts - WARMUP} restarts")


class PluginSide(Protocol):
    """fakegpu's device plugins next to the kubelet emulator: in this process, or a ``fakegpu plugin``."""

    kubelet: KubeletEmulator
    resources: list[str]
    socket_dir: Path

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def restart_kubelet(self) -> float: ...
    def usage(self) -> Usage: ...


class InProcessPlugins:
    """A FakeNode: the plugin manager shares this process (and its fds, threads and tasks) with the kubelet."""

    def __init__(self, root: Path, registration: RegistrationMode) -> None:
        self.node = FakeNode(root, NODE_INPUTS, registration=registration)
        self.kubelet = self.node.kubelet
        self.resources = self.node.plugins.wanted()
        self.socket_dir = self.kubelet.paths.device_plugins

    async def start(self) -> None:
        await self.node.start()

    async def stop(self) -> None:
        await self.node.stop()

    async def restart_kubelet(self) -> float:
        return await self.node.restart_kubelet(timeout=5.0)

    def usage(self) -> Usage:
        return usage_of()


class DaemonPlugins:
    """``fakegpu plugin`` as a subprocess: what runs on a node; its fds, threads and RSS are read from /proc."""

    def __init__(self, root: Path, registration: RegistrationMode) -> None:
        self.kubelet = KubeletEmulator(root)
        self.registration = registration
        self.resources = [r.name for r in load_inventory(NODE_INPUTS).resources if r.devices]
        self.socket_dir = self.kubelet.paths.device_plugins
        self.proc: asyncio.subprocess.Process | None = None
        self.log = root.parent / "plugin.log"

    async def start(self) -> None:
        await self.kubelet.start()
        with self.log.open("wb") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "fakegpu",
                "--log-format",
                "json",
                "plugin",
                *DAEMON_ARGS,
                "--registration",
                self.registration,
                "--kubelet-dir",
                str(self.kubelet.paths.root),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=log,
            )
        await self._wait_synced(20.0)

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(self.proc.wait(), 15.0)
        await self.kubelet.stop()

    def _synced(self) -> bool:
        capacity, allocatable = self.kubelet.capacity(), self.kubelet.allocatable()
        return all(capacity.get(r, 0) > 0 and allocatable.get(r) == capacity[r] for r in self.resources)

    def _exited(self) -> bool:
        return self.proc is not None and self.proc.returncode is not None

    async def _wait_synced(self, timeout: float) -> None:
        await eventually(
            lambda: self._exited() or self._synced(), "fakegpu plugin to re-register", timeout, interval=0.005
        )
        if self.proc is not None and self._exited():
            raise AssertionError(f"fakegpu plugin exited ({self.proc.returncode}): {self.log.read_text()[-2000:]}")

    def _registrations(self) -> int:
        return len(self.kubelet.registration.requests) + sum(
            1 for kind, _, _ in self.kubelet.watcher.events if kind == "register"
        )

    async def restart_kubelet(self) -> float:
        """Like FakeNode.restart_kubelet: from the new kubelet's start until every resource registered again."""
        await self.kubelet.stop()
        wanted = self._registrations() + len(self.resources)
        await self.kubelet.start()
        began = time.monotonic()
        await eventually(lambda: self._registrations() >= wanted, "fakegpu plugin to re-register", 5.0, interval=0.005)
        await self._wait_synced(5.0)
        return time.monotonic() - began

    def usage(self) -> Usage:
        assert self.proc is not None
        return usage_of(self.proc.pid)

    def log_problems(self) -> list[str]:
        """Error lines, tracebacks and anything not JSON the daemon wrote, and an unclean exit."""
        out = []
        if self.proc is not None and self.proc.returncode not in (None, 0):
            out.append(f"fakegpu plugin exited with {self.proc.returncode} on SIGTERM")
        for line in self.log.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                record = {"level": "raw", "message": line}
            if record.get("level") in ("error", "critical", "raw") or "exception" in record:
                out.append(f"fakegpu plugin logged {record.get('level')}: {record.get('message')}")
        return out


def checkpoint_entries(kubelet: KubeletEmulator) -> set[Entry]:
    """The allocations in the checkpoint file, as the kubelet would restore them."""
    data = kubelet.checkpoint()
    if data is None:
        return set()
    return {
        (
            e.pod_uid,
            e.container_name,
            e.resource_name,
            tuple(sorted(i for ids in e.device_ids.values() for i in ids)),
            e.alloc_resp,
        )
        for e in data.pod_device_entries
    }


def manager_entries(kubelet: KubeletEmulator) -> set[Entry]:
    """The allocations the running device manager holds (restored from the checkpoint after a restart)."""
    return {
        (a.pod_uid, a.container, a.resource, tuple(sorted(a.device_ids)), a.response.SerializeToString())
        for a in kubelet.manager.allocations
    }


def device_ids(side: PluginSide) -> dict[str, list[str]]:
    return {resource: sorted(side.kubelet.devices(resource)) for resource in side.resources}


def plugin_sockets(side: PluginSide) -> dict[Path, tuple[int, int] | None]:
    """The plugins' sockets (everything in device-plugins/ but kubelet.sock and the checkpoint)."""
    return {
        p: identity(p)
        for p in side.socket_dir.iterdir()
        if p.is_socket() and p.name != KUBELET_SOCKET and p.name.startswith("nvidia-")
    }


async def churn_pods(kubelet: KubeletEmulator, rng: random.Random, figures: KubeletSoakFigures, step: int) -> None:
    """Admit or delete a pod, so each restart restores a different checkpoint."""
    running = sorted(uid for uid, pod in kubelet.pods.items() if pod.admitted)
    if running and (rng.random() < 0.4 or len(running) >= 6):
        kubelet.delete_pod(rng.choice(running))
        figures.pods_deleted += 1
        return
    resource = rng.choice(sorted(kubelet.capacity()))
    if kubelet.allocatable()[resource] - len(kubelet.manager.in_use(resource)) < 1:
        return
    pod = await kubelet.run_pod(f"soak-{step}", {"main": {resource: 1}})
    if not pod.admitted:
        figures.problems.append(f"step {step}: pod for {resource} rejected: {pod.reason} {pod.message}")
        return
    figures.pods_admitted += 1


async def soak_kubelet_restarts(
    restarts: int,
    *,
    plugins: PluginPlacement = "in-process",
    registration: RegistrationMode = "kubelet",
    seed: int = SEED,
    root: Path | None = None,
    reregister_limit: float | None = REREGISTER_LIMIT,
) -> KubeletSoakFigures:
    """Restart the kubelet emulator ``restarts`` times next to fakegpu's plugins; see the module docstring."""
    figures = KubeletSoakFigures(plugins, registration)
    rng = random.Random(seed)
    base = Path(tempfile.mkdtemp(prefix="fgks-", dir="/tmp")) if root is None else root
    side: PluginSide = (InProcessPlugins if plugins == "in-process" else DaemonPlugins)(base / "kubelet", registration)
    kubelet = side.kubelet
    began = time.monotonic()
    try:
        await side.start()
        ids = device_ids(side)
        for step in range(restarts):
            await churn_pods(kubelet, rng, figures, step)
            entries = checkpoint_entries(kubelet)
            figures.max_allocations = max(figures.max_allocations, len(entries))
            if manager_entries(kubelet) != entries:
                figures.problems.append(f"restart {step}: the checkpoint file and the device manager disagree")
            sockets = plugin_sockets(side)
            took = await side.restart_kubelet()
            figures.restarts += 1
            figures.reregistration.append(took)
            if reregister_limit is not None and took >= reregister_limit:
                figures.problems.append(f"restart {step}: re-registered after {took:.3f}s (limit {reregister_limit}s)")
            if device_ids(side) != ids:
                figures.problems.append(f"restart {step}: device IDs changed: {ids} -> {device_ids(side)}")
            if (after := checkpoint_entries(kubelet)) != entries:
                figures.problems.append(
                    f"restart {step}: checkpoint allocations changed: lost {sorted(e[:4] for e in entries - after)},"
                    f" gained {sorted(e[:4] for e in after - entries)}"
                )
            if manager_entries(kubelet) != entries:
                figures.problems.append(f"restart {step}: the restarted device manager did not restore the checkpoint")
            if kubelet.allocatable() != kubelet.capacity():
                figures.problems.append(f"restart {step}: not every device healthy again: {kubelet.allocatable()}")
            now = plugin_sockets(side)
            reused = sorted(str(p) for p, ident in now.items() if ident == sockets.get(p))
            if reused or len(now) != len(side.resources):
                figures.problems.append(f"restart {step}: plugin sockets not re-created after the wipe: {reused}")
            if step + 1 == WARMUP:
                await settle_self()
                figures.before = side.usage()
        await settle_self()
        figures.after = side.usage()
    finally:
        await side.stop()
        figures.elapsed = time.monotonic() - began
        if isinstance(side, DaemonPlugins):
            figures.problems += side.log_problems()
        if root is None:
            shutil.rmtree(base, ignore_errors=True)
    return figures
