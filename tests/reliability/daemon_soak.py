"""Daemon restarts: ``fakegpu plugin`` and ``fakegpu dra`` killed and started again, over and over.

DaemonSet pods get killed: by upgrades (SIGTERM), by the OOM killer or a node drain gone wrong
(SIGKILL), sometimes in the middle of an RPC. Each soak runs the real command as a subprocess, drives
it the way the kubelet does, kills it with SIGTERM or SIGKILL at a seeded moment, starts it again and
checks that nothing the kubelet was promised is lost or done twice.

``fakegpu plugin`` next to the kubelet emulator (in this process): each run must serve every resource
again (stale sockets of a SIGKILLed predecessor replaced, none left behind by SIGTERM) and re-register;
device IDs never change; pods admitted before stay in the kubelet's checkpoint with their devices; a pod
whose Allocate was cut off by the kill is rejected, recorded nowhere, and admitted on retry; no device
is ever allocated twice. Kills land while idle, right after an admission, or inside Allocate (held open
by an injected delay fault, through the admin socket).

``fakegpu dra`` against the in-process API server, with this process as its kubelet (plugin watcher
plus NodePrepareResources / NodeUnprepareResources): every claim whose prepare returned OK stays
prepared (``PrepareCompleted`` in the checkpoint and its CDI spec on disk) and a repeated prepare
returns the same devices without preparing again; a claim whose prepare was cut off is, after the
restart, either fully prepared or absent, and prepared by the retry; unprepared claims stay gone; the
CDI directory and the checkpoint always agree (at rest, a CDI spec always has a checkpoint entry; once
the driver serves, they match exactly and nothing is left in ``PrepareStarted``). Kills land while idle,
after prepares, inside NodePrepareResources before its first phase (delay fault), and between its two
checkpoint phases: after ``PrepareStarted`` and after the CDI spec (the ``FAKEGPU_TEST_PREPARE_PHASE_PAUSE``
hook of ``dra/gpu_prepare.py`` holds each window open; the soak watches the files and kills inside it).

"Prepared twice" is counted from the daemons' own ``prepared claim`` log lines: a claim prepared once and
then asked again must be answered from the checkpoint, not prepared anew.

Every combination of kill moment and signal comes up once per round (shuffled with ``SEED``), so the
short profile (10 restarts) covers them all. ``soak_plugin_restarts`` and ``soak_dra_restarts`` run the
soaks for the tests (``tests/reliability/test_daemon_restarts.py``) and for ``bench/soak.py``: a module of
their own, so that bench imports no test module.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from fakegpu.control.client import admin_call, admin_request
from fakegpu.dra.claim_cdi_specs import cdi_vendor, claim_spec_file_name
from fakegpu.dra.gpu_prepare import PHASE_PAUSE_ENV
from fakegpu.dra.prepared_claims import CheckpointCorrupted, PreparedClaim, PreparedClaims
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.kubelet.plugin_watcher import PluginHandler, PluginWatcher, RegistrationRejected
from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2 as reg_pb2
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.runtime.unix_socket import listening_pid
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.claim_builders import allocated_claim
from tests.dra_kubelet_client import Claim, prepare, unprepare
from tests.eventually import eventually
from tests.reliability.process_probe import Usage, settle_self, usage_of

SEED = 8
READY_TIMEOUT = 20.0
"""Seconds from spawn until the daemon serves and is registered; startup is ~0.5 s of imports."""
EXIT_TIMEOUT = 15.0
WARMUP = 2
"""Runs before this process's 'before' reading (first connections, lazily created gRPC state)."""
PHASE_PAUSE = 0.3
"""Seconds the DRA driver stalls in each half of a prepare when a kill between the phases is planned:
longer than the 0.2 s a SIGTERMed server gives in-flight calls, so SIGTERM lands in the window too."""
FAULT_DELAY = 5.0
"""Seconds an injected delay holds Allocate / NodePrepareResources open for a mid-RPC kill."""
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}

PLUGIN_NODE = "soak-node"
PLUGIN_ARGS = ("--gpus", "2xh100-80gb", "--mig-layout", "all-balanced", "--mig-strategy", "mixed")
PLUGIN_INPUTS = InventoryInputs(
    node_name=PLUGIN_NODE, gpus=("2xh100-80gb",), mig_layout="all-balanced", cli_flags={"mig_strategy": "mixed"}
)
PLUGIN_ACTIONS = ("idle", "after-allocate", "mid-allocate")

DRA_NODE = "soak-node"
DRIVER = "gpu.nvidia.com"
DRA_GPUS = 10
"""Enough for every claim the soak holds at once (six kept, one cut off, two new) to get a GPU of its own: the
driver refuses a GPU another prepared claim holds, as NVIDIA's does, and the scheduler never hands one out twice."""
DRA_ACTIONS = ("idle", "after-prepare", "mid-prepare-rpc", "after-prepare-started", "after-cdi-written")


@dataclass
class DaemonSoakFigures:
    daemon: str
    seed: int
    restarts: int = 0
    """Kills, each followed by a start that was checked."""
    kills: Counter[str] = field(default_factory=Counter)
    """'SIGKILL mid-allocate' -> how often."""
    ready: list[float] = field(default_factory=list)
    """Seconds from spawn until the daemon served and was registered (Python start-up included)."""
    kubelet_before: Usage | None = None
    kubelet_after: Usage | None = None
    """This process (the kubelet side) after the warm-up and at the end."""
    daemon_first: Usage | None = None
    daemon_last: Usage | None = None
    """The first and the last daemon process, read just before the kill."""
    acknowledged: int = 0
    """Allocations / prepares that returned OK (each one must survive every later restart)."""
    cut_off: int = 0
    """Allocations / prepares a kill interrupted (each one must be absent or complete, then retried)."""
    retried_ok: int = 0
    lost: int = 0
    duplicated: int = 0
    """Plugin: a device allocated to two pods at once; DRA: a claim prepared twice."""
    half_prepared: int = 0
    """DRA: a CDI spec without a checkpoint entry, a completed entry without its spec, or (while serving)
    any PrepareStarted entry or mismatch between the two."""
    stale_sockets_replaced: int = 0
    """Sockets a SIGKILLed daemon left behind that the next start served again."""
    stale_sockets_left: int = 0
    """Socket files nobody serves after a start, or left behind by a SIGTERMed daemon."""
    elapsed: float = 0.0
    problems: list[str] = field(default_factory=list)

    def problem(self, text: str) -> None:
        self.problems.append(f"[run {self.restarts}] {text}")

    def leaks(self) -> list[str]:
        """Growth of this process beyond the limits (the plugin soak only measures it)."""
        if self.kubelet_before is None or self.kubelet_after is None:
            return []
        return [f"kubelet side: {leak}" for leak in self.kubelet_after.growth(self.kubelet_before).leaks()]


def schedule(restarts: int, actions: Sequence[str], rng: random.Random) -> list[tuple[str, str]]:
    """(action, signal) per run: every combination once per round, in a seeded order."""
    combos = [(a, s) for a in actions for s in SIGNALS]
    out: list[tuple[str, str]] = []
    while len(out) < restarts:
        block = list(combos)
        rng.shuffle(block)
        out.extend(block)
    return out[:restarts]


# --- one daemon process ----------------------------------------------------------------------------------


class DaemonExited(Exception):
    """Not an AssertionError on purpose: :func:`tests.eventually.eventually` stops polling on it."""


@dataclass
class Daemon:
    """One run of ``python -m fakegpu.cli.main ...``, logging JSON lines to ``log_path``."""

    proc: asyncio.subprocess.Process
    log_path: Path
    spawned: float

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.returncode is None

    def still_running(self) -> bool:
        """True while the daemon runs; once it has exited, raise (a poll on it fails at once, not at its timeout)."""
        if not self.alive():
            raise DaemonExited(f"the daemon exited ({self.proc.returncode}):\n{self.tail()}")
        return True

    async def kill(self, sig: signal.Signals) -> int:
        """Send ``sig`` and wait for the exit; returns the exit status (negative: killed by that signal)."""
        if self.alive():
            self.proc.send_signal(sig)
        try:
            return await asyncio.wait_for(self.proc.wait(), EXIT_TIMEOUT)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError(f"pid {self.pid} did not exit within {EXIT_TIMEOUT}s of {sig.name}") from None

    def log_lines(self) -> list[dict[str, Any]]:
        """The run's log records; a line that is not JSON (a raw traceback, a gRPC core message) is kept
        as ``{"level": "raw", "message": line}``."""
        out: list[dict[str, Any]] = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            out.append(record if isinstance(record, dict) else {"level": "raw", "message": line})
        return out

    def tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


async def spawn(args: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> Daemon:
    full_env = {k: v for k, v in os.environ.items() if k != PHASE_PAUSE_ENV}
    full_env.update(env or {})
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "fakegpu",
            "--log-format",
            "json",
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=log,
            env=full_env,
        )
    return Daemon(proc, log_path, time.monotonic())


async def wait_fired(admin: Path, method: str, daemon: Daemon) -> None:
    """Until the daemon's admin status shows the injected fault of ``method`` fired: the RPC is in flight."""

    async def fired() -> bool:
        status = await admin_request(admin, {"op": "status"}, timeout=5.0)
        return daemon.still_running() and any(
            f.get("method") == method for f in status.get("faults", {}).get("fired", [])
        )

    await eventually(fired, f"the {method} fault to fire", READY_TIMEOUT, interval=0.005, detail=daemon.tail)


def expected_exit(sig: str, status: int) -> bool:
    return status == 0 if sig == "SIGTERM" else status == -signal.SIGKILL


def unclear_log_lines(daemon: Daemon, allowed: Sequence[str]) -> list[str]:
    """Errors, tracebacks and raw stderr lines of a run, except messages containing an ``allowed`` text."""
    out = []
    for record in daemon.log_lines():
        level = str(record.get("level", ""))
        message = str(record.get("message", ""))
        unclear = level in ("error", "critical", "raw") or "exception" in record
        if unclear and not any(a in message for a in allowed):
            trace = f" ({str(record['exception'])[-300:]})" if "exception" in record else ""
            out.append(f"{level}: {message}{trace}")
    return out


def socket_files(directory: Path) -> set[Path]:
    return {p for p in directory.iterdir() if p.is_socket()} if directory.is_dir() else set()


def check_sockets_after_start(figures: DaemonSoakFigures, daemon: Daemon, paths: set[Path], stale: set[Path]) -> None:
    """The new daemon listens on every one of ``paths`` (stale files of a SIGKILLed predecessor replaced), and
    no socket file in their directories is left that nobody serves."""
    # Asked by connecting, not read from /proc/net/unix: gRPC servers bind a private name and rename the
    # socket into place (fakegpu.runtime.socket_server), and /proc/net/unix shows the name bound.
    served = {p for p in paths if listening_pid(p) == daemon.pid}
    missing = sorted(str(p) for p in paths - served)
    if missing:
        figures.problem(f"the restarted daemon does not serve {missing}")
    unserved = sorted(str(p) for d in {p.parent for p in paths} for p in socket_files(d) if listening_pid(p) is None)
    if unserved:
        figures.stale_sockets_left += len(unserved)
        figures.problem(f"socket files nobody serves after the start: {unserved}")
    figures.stale_sockets_replaced += len(stale & served)


def check_exit(figures: DaemonSoakFigures, daemon: Daemon, sig: str, status: int, sockets: set[Path]) -> None:
    """How a run ended: the exit status the signal should give, no error in its log, and no socket left
    behind by SIGTERM (SIGKILL leaves them, for the next start to replace)."""
    if not expected_exit(sig, status):
        figures.problem(f"{sig}: exit status {status}:\n{daemon.tail()}")
    for line in unclear_log_lines(daemon, allowed=()):
        figures.problem(f"{figures.daemon} logged {line}")
    left = sorted(str(p) for p in sockets if p.is_socket())
    if sig == "SIGTERM" and left:
        figures.stale_sockets_left += len(left)
        figures.problem(f"SIGTERM left sockets behind: {left}")


# --- fakegpu plugin ---------------------------------------------------------------------------------------


def plugin_socket_paths(paths: KubeletPaths, resources: Sequence[str]) -> set[Path]:
    return {paths.device_plugins / f"nvidia-{name.split('/', 1)[1]}.sock" for name in resources}


def kubelet_entries(kubelet: KubeletEmulator) -> dict[tuple[str, str, str], tuple[str, ...]]:
    data = kubelet.checkpoint()
    if data is None:
        return {}
    return {
        (e.pod_uid, e.container_name, e.resource_name): tuple(sorted(i for ids in e.device_ids.values() for i in ids))
        for e in data.pod_device_entries
    }


def plugin_registered(kubelet: KubeletEmulator, ids: dict[str, list[str]], registrations: int) -> bool:
    """Every resource registered anew, connected, and all its devices pushed and healthy."""
    if len(kubelet.registration.requests) < registrations + len(ids):
        return False
    for name, wanted in ids.items():
        state = kubelet.manager.resources.get(name)
        if state is None or state.endpoint is None or len(state.healthy()) != len(wanted):
            return False
    return True


class PluginSoak:
    def __init__(self, base: Path, figures: DaemonSoakFigures, rng: random.Random) -> None:
        self.base = base
        self.figures = figures
        self.rng = rng
        self.paths = KubeletPaths(base / "k")
        self.kubelet = KubeletEmulator(self.paths.root)
        self.admin = base / "admin.sock"
        inventory = load_inventory(PLUGIN_INPUTS)
        self.ids = {r.name: sorted(d.id for d in r.devices) for r in inventory.resources if r.devices}
        self.sockets = plugin_socket_paths(self.paths, list(self.ids)) | {self.admin}
        self.admitted: dict[str, tuple[str, tuple[str, ...]]] = {}
        """pod UID -> (resource, devices) for every pod the kubelet admitted and has not deleted."""
        self.cut_off: list[tuple[str, str]] = []
        """(pod UID, resource) of admissions a kill interrupted, to retry."""
        self.pods = 0

    def args(self) -> list[str]:
        return [
            "plugin",
            "--node-name",
            PLUGIN_NODE,
            *PLUGIN_ARGS,
            "--kubelet-dir",
            str(self.paths.root),
            "--admin-socket",
            str(self.admin),
        ]

    def check_checkpoint(self) -> None:
        entries = kubelet_entries(self.kubelet)
        for uid, (resource, devices) in self.admitted.items():
            if entries.get((uid, "main", resource)) != devices:
                self.figures.lost += 1
                self.figures.problem(f"pod {uid}: allocation {devices} of {resource} lost from the checkpoint")
        for uid, resource in self.cut_off:
            if (uid, "main", resource) in entries:
                self.figures.problem(f"pod {uid}: an Allocate cut off by a kill was recorded in the checkpoint")
        owners: Counter[tuple[str, str]] = Counter()
        for (_, _, resource), devices in entries.items():
            owners.update((resource, d) for d in devices)
        twice = sorted(k for k, n in owners.items() if n > 1)
        if twice:
            self.figures.duplicated += len(twice)
            self.figures.problem(f"devices allocated to two pods at once: {twice}")

    async def admit(self, uid: str, resource: str) -> None:
        pod = await self.kubelet.run_pod(uid, {"main": {resource: 1}})
        if not pod.admitted:
            self.figures.problem(f"pod {uid} for {resource} rejected: {pod.reason}: {pod.message}")
            return
        self.admitted[uid] = (resource, kubelet_entries(self.kubelet)[(uid, "main", resource)])
        self.figures.acknowledged += 1

    def free_resource(self) -> str:
        """A resource with a free device, deleting the oldest pod when the node is full."""
        while True:
            free = [r for r in self.ids if len(self.kubelet.manager.in_use(r)) < len(self.ids[r])]
            if free and len(self.admitted) < 6:
                return self.rng.choice(sorted(free))
            oldest = next(iter(self.admitted))
            self.kubelet.delete_pod(oldest)
            del self.admitted[oldest]

    async def start(self) -> Daemon:
        stale = {p for p in self.sockets if p.is_socket()}
        registrations = len(self.kubelet.registration.requests)
        daemon = await spawn(self.args(), self.base / f"plugin-{self.figures.restarts}.log")
        await eventually(
            lambda: daemon.still_running() and plugin_registered(self.kubelet, self.ids, registrations),
            "registration",
            READY_TIMEOUT,
            interval=0.005,
            detail=daemon.tail,
        )
        self.figures.ready.append(time.monotonic() - daemon.spawned)
        check_sockets_after_start(self.figures, daemon, self.sockets, stale)
        now = {name: sorted(self.kubelet.devices(name)) for name in self.ids}
        if now != self.ids:
            self.figures.problem(f"device IDs changed: {now} (expected {self.ids})")
        self.check_checkpoint()
        for uid, resource in self.cut_off:
            pod = await self.kubelet.run_pod(uid, {"main": {resource: 1}})
            if pod.admitted:
                self.admitted[uid] = (resource, kubelet_entries(self.kubelet)[(uid, "main", resource)])
                self.figures.retried_ok += 1
            else:
                self.figures.problem(f"retried pod {uid} rejected: {pod.reason}: {pod.message}")
        self.cut_off = []
        return daemon

    async def act_and_kill(self, daemon: Daemon, action: str, sig: str) -> None:
        self.pods += 1
        uid = f"pod-{self.pods}"
        if action == "after-allocate":
            await self.admit(uid, self.free_resource())
            await asyncio.sleep(self.rng.uniform(0, 0.05))  # time passing: the kill lands at a seeded moment
        elif action == "mid-allocate":
            resource = self.free_resource()
            await admin_call(self.admin, "fault", method="Allocate", delay=FAULT_DELAY, resource=resource)
            pod_task = asyncio.create_task(self.kubelet.run_pod(uid, {"main": {resource: 1}}))
            await wait_fired(self.admin, "Allocate", daemon)
            await asyncio.sleep(self.rng.uniform(0, 0.05))  # time passing: the kill lands at a seeded moment
        else:
            await asyncio.sleep(self.rng.uniform(0, 0.1))  # time passing: the kill lands at a seeded moment
        usage = usage_of(daemon.pid)
        if self.figures.daemon_first is None:
            self.figures.daemon_first = usage
        self.figures.daemon_last = usage
        status = await daemon.kill(SIGNALS[sig])
        check_exit(self.figures, daemon, sig, status, self.sockets)
        if action == "mid-allocate":
            pod = await pod_task
            if pod.admitted:
                self.figures.problem(f"pod {uid} admitted although its Allocate was killed")
            self.cut_off.append((uid, resource))
            self.figures.cut_off += 1
        self.figures.kills[f"{sig} {action}"] += 1
        # The kubelet notices the streams end: every device unhealthy until the plugin is back.
        await eventually(
            lambda: not any(self.kubelet.allocatable().values()),
            "the kubelet to see the plugin gone",
            READY_TIMEOUT,
            interval=0.005,
        )


async def soak_plugin_restarts(restarts: int, *, seed: int = SEED, root: Path | None = None) -> DaemonSoakFigures:
    """Kill and restart ``fakegpu plugin`` ``restarts`` times next to the kubelet emulator."""
    figures = DaemonSoakFigures("fakegpu plugin", seed)
    rng = random.Random(seed)
    base = Path(tempfile.mkdtemp(prefix="fgps-", dir="/tmp")) if root is None else root
    soak = PluginSoak(base, figures, rng)
    began = time.monotonic()
    daemon: Daemon | None = None
    try:
        await soak.kubelet.start()
        for run, (action, sig) in enumerate(schedule(restarts, PLUGIN_ACTIONS, rng)):
            daemon = await soak.start()
            if run == WARMUP:
                await settle_self()
                figures.kubelet_before = usage_of()
            await soak.act_and_kill(daemon, action, sig)
            figures.restarts += 1
        daemon = await soak.start()
        await settle_self()
        figures.kubelet_after = usage_of()
        check_exit(figures, daemon, "SIGTERM", await daemon.kill(signal.SIGTERM), soak.sockets)
    finally:
        if daemon is not None and daemon.alive():
            await daemon.kill(signal.SIGKILL)
        await soak.kubelet.stop()
        figures.elapsed = time.monotonic() - began
        if root is None:
            shutil.rmtree(base, ignore_errors=True)
    return figures


# --- fakegpu dra ------------------------------------------------------------------------------------------

Answer = tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...]
"""A claim's devices as NodePrepareResources answered: (pool, device, CDI IDs, request names) each."""


def answer_of(result: Any) -> Answer:
    return tuple((d.pool_name, d.device_name, tuple(d.cdi_device_ids), tuple(d.request_names)) for d in result.devices)


class DraSoak:
    def __init__(self, base: Path, figures: DaemonSoakFigures, rng: random.Random, apiserver: FakeApiServer) -> None:
        self.base = base
        self.figures = figures
        self.rng = rng
        self.apiserver = apiserver
        self.paths = KubeletPaths(base / "k")
        self.cdi_root = base / "cdi"
        self.admin = base / "admin.sock"
        self.kubeconfig = apiserver.kubeconfig(base / "kubeconfig")
        self.checkpoint_path = PreparedClaims.in_dir(self.paths.dra_plugin_dir(DRIVER)).path
        self.dra_socket = self.paths.dra_socket(DRIVER)
        self.registration_socket = self.paths.plugins_registry / f"{DRIVER}-reg.sock"
        self.sockets = {self.dra_socket, self.registration_socket, self.admin}
        before, _, after = claim_spec_file_name(cdi_vendor(DRIVER), "UID").partition("UID")
        self.cdi_prefix, self.cdi_suffix = before, after
        self.acked: dict[str, tuple[Claim, Answer]] = {}
        """Claims whose prepare returned OK and that were not unprepared since, in order."""
        self.unknown: dict[str, Claim] = {}
        """Claims whose prepare a kill cut off: the kubelet asks again after the restart."""
        self.unprepared: set[str] = set()
        self.ever_acked: set[str] = set()
        self.prepared_log: Counter[str] = Counter()
        """'prepared claim' log lines per claim UID, over every run."""
        self.claims = 0
        self.device_of: dict[str, str] = {}
        """The GPU each claim was allocated, as the scheduler chose it: one no unprepared claim holds."""
        self.registrations = 0
        self.watcher = PluginWatcher(
            self.paths.plugins_registry,
            {"DRAPlugin": PluginHandler(self._register, self._deregister)},
            poll_interval=0.01,
        )

    async def _register(self, info: reg_pb2.PluginInfo, endpoint: Path) -> None:
        """The kubelet's DRA handler, reduced to what a restart can get wrong: the name and the endpoint."""
        if info.name != DRIVER or endpoint != self.dra_socket:
            raise RegistrationRejected(f"unexpected plugin {info.name} at {endpoint}")
        self.registrations += 1

    async def _deregister(self, info: reg_pb2.PluginInfo) -> None:
        return None

    def args(self) -> list[str]:
        return [
            "dra",
            "--node-name",
            DRA_NODE,
            "--gpus",
            f"{DRA_GPUS}xh100-80gb",
            "--kubeconfig",
            str(self.kubeconfig),
            "--kubelet-dir",
            str(self.paths.root),
            "--cdi-root",
            str(self.cdi_root),
            "--admin-socket",
            str(self.admin),
        ]

    # -- what is on disk ------------------------------------------------------------------------------
    def cdi_uids(self) -> set[str]:
        if not self.cdi_root.is_dir():
            return set()
        return {
            p.name[len(self.cdi_prefix) : -len(self.cdi_suffix)]
            for p in self.cdi_root.iterdir()
            if p.name.startswith(self.cdi_prefix) and p.name.endswith(self.cdi_suffix)
        }

    def stored(self) -> dict[str, PreparedClaim] | None:
        try:
            return PreparedClaims(self.checkpoint_path).load()
        except CheckpointCorrupted as exc:
            self.figures.problem(str(exc))
            return None

    def check_disk(self, serving: bool) -> None:
        """At rest: every CDI spec has a checkpoint entry and every completed entry its spec. Serving (the
        restart's recovery done, nothing in flight): nothing PrepareStarted, specs == completed entries."""
        claims = self.stored()
        if claims is None:
            return
        cdi = self.cdi_uids()
        completed = {uid for uid, c in claims.items() if c.completed}
        half = [f"completed claim {u} has no CDI spec" for u in sorted(completed - cdi)]
        half += [f"CDI spec of claim {u} has no checkpoint entry" for u in sorted(cdi - set(claims))]
        if serving:
            half += [f"claim {u} left PrepareStarted after the restart" for u in sorted(set(claims) - completed)]
        for text in half:
            self.figures.half_prepared += 1
            self.figures.problem(text)
        for uid, (_, answer) in self.acked.items():
            entry = claims.get(uid)
            if entry is None or not entry.completed or uid not in cdi:
                self.figures.lost += 1
                state = entry.state if entry is not None else "no entry"
                self.figures.problem(f"prepared claim {uid} lost (checkpoint: {state}, CDI spec: {uid in cdi})")
            elif sorted(r.device for r in entry.devices) != sorted(d[1] for d in answer):
                self.figures.problem(f"claim {uid}: checkpoint devices {entry.devices} differ from the answer {answer}")
        back = sorted(self.unprepared & (set(claims) | cdi))
        if back:
            self.figures.problem(f"unprepared claims came back: {back}")

    # -- the kubelet's calls --------------------------------------------------------------------------
    def new_claim(self) -> Claim:
        self.claims += 1
        name = f"claim-{self.claims}"
        held = {device for uid, device in self.device_of.items() if uid not in self.unprepared}
        ring = [f"gpu-{(self.claims + k) % DRA_GPUS}" for k in range(DRA_GPUS)]
        device = next((d for d in ring if d not in held), "")
        if not device:
            raise AssertionError(f"all {DRA_GPUS} GPUs are held by claims not unprepared: the soak keeps too many")
        obj = self.apiserver.create_direct(allocated_claim(name, DRA_NODE, [device]))
        uid = str(obj["metadata"]["uid"])
        self.device_of[uid] = device
        return ("default", name, uid)

    async def prepare_new(self) -> None:
        claims = [self.new_claim() for _ in range(self.rng.randint(1, 2))]
        response = await prepare(self.dra_socket, claims)
        for claim in claims:
            result = response.claims[claim[2]]
            if result.error:
                self.figures.problem(f"prepare of {claim} failed: {result.error}")
                continue
            self.acked[claim[2]] = (claim, answer_of(result))
            self.ever_acked.add(claim[2])
            self.figures.acknowledged += 1
        while len(self.acked) > 6:
            uid, (claim, _) = next(iter(self.acked.items()))
            done = await unprepare(self.dra_socket, [claim])
            if done.claims[uid].error:
                self.figures.problem(f"unprepare of {claim} failed: {done.claims[uid].error}")
            del self.acked[uid]
            self.unprepared.add(uid)

    async def kubelet_retry(self) -> None:
        """After a driver restart the kubelet prepares the claims of its pods again, and the cut-off ones."""
        claims = [c for c, _ in self.acked.values()] + list(self.unknown.values())
        if not claims:
            return
        response = await prepare(self.dra_socket, claims)
        for uid, (claim, answer) in list(self.acked.items()):
            result = response.claims[uid]
            if result.error or answer_of(result) != answer:
                self.figures.problem(f"repeated prepare of {claim}: {result.error or answer_of(result)} != {answer}")
        for uid, claim in self.unknown.items():
            result = response.claims[uid]
            if result.error:
                self.figures.problem(f"retried prepare of cut-off claim {claim} failed: {result.error}")
                continue
            self.acked[uid] = (claim, answer_of(result))
            self.ever_acked.add(uid)
            self.figures.retried_ok += 1
        self.unknown = {}

    # -- one run --------------------------------------------------------------------------------------
    async def start(self, pause: bool) -> Daemon:
        stale = {p for p in self.sockets if p.is_socket()}
        self.check_disk(serving=False)
        registrations = self.registrations
        env = {PHASE_PAUSE_ENV: str(PHASE_PAUSE)} if pause else {}
        daemon = await spawn(self.args(), self.base / f"dra-{self.figures.restarts}.log", env)
        await eventually(
            lambda: daemon.still_running() and self.registrations > registrations,
            "registration through plugins_registry",
            READY_TIMEOUT,
            interval=0.005,
            detail=daemon.tail,
        )
        self.figures.ready.append(time.monotonic() - daemon.spawned)
        check_sockets_after_start(self.figures, daemon, self.sockets, stale)
        self.check_disk(serving=True)
        await self.kubelet_retry()
        self.check_disk(serving=True)
        return daemon

    async def in_flight(self, daemon: Daemon, action: str) -> asyncio.Task[Any]:
        """Start a prepare and return once it is where ``action`` wants the kill."""
        claim = self.new_claim()
        uid = claim[2]
        if action == "mid-prepare-rpc":
            await admin_call(self.admin, "fault", method="NodePrepareResources", delay=FAULT_DELAY)
        task = asyncio.create_task(prepare(self.dra_socket, [claim]))
        self.unknown[uid] = claim

        def started() -> bool:
            entry = PreparedClaims(self.checkpoint_path).load().get(uid)
            return entry is not None and not entry.completed

        if action == "mid-prepare-rpc":
            await wait_fired(self.admin, "NodePrepareResources", daemon)
            await asyncio.sleep(self.rng.uniform(0, 0.05))  # time passing: the kill lands at a seeded moment
        elif action == "after-prepare-started":
            await eventually(
                lambda: daemon.still_running() and started(),
                f"PrepareStarted of {uid}",
                5.0,
                interval=0.005,
                detail=daemon.tail,
            )
        else:
            await eventually(
                lambda: daemon.still_running() and uid in self.cdi_uids(),
                f"the CDI spec of {uid}",
                5.0,
                interval=0.005,
                detail=daemon.tail,
            )
            if not started():
                self.figures.problem(f"claim {uid}: CDI spec written but the checkpoint does not say PrepareStarted")
        return task

    async def act_and_kill(self, daemon: Daemon, action: str, sig: str) -> None:
        task: asyncio.Task[Any] | None = None
        if action == "after-prepare":
            await self.prepare_new()
            await asyncio.sleep(self.rng.uniform(0, 0.05))  # time passing: the kill lands at a seeded moment
        elif action == "idle":
            await asyncio.sleep(self.rng.uniform(0, 0.1))  # time passing: the kill lands at a seeded moment
        else:
            task = await self.in_flight(daemon, action)
        usage = usage_of(daemon.pid)
        if self.figures.daemon_first is None:
            self.figures.daemon_first = usage
        self.figures.daemon_last = usage
        await self.stop(daemon, sig)
        if task is not None:
            self.figures.cut_off += 1
            try:
                response = await task
            except grpc.aio.AioRpcError:
                pass  # cut off: the kubelet will ask again (self.unknown)
            else:
                ((uid, result),) = response.claims.items()
                if result.error:
                    self.figures.problem(f"claim {uid}: prepare answered {result.error!r} when killed")
                else:  # the call finished in the SIGTERM grace period: an ordinary OK
                    self.acked[uid] = (self.unknown.pop(uid), answer_of(result))
                    self.ever_acked.add(uid)
                    self.figures.acknowledged += 1
        self.figures.kills[f"{sig} {action}"] += 1

    async def stop(self, daemon: Daemon, sig: str) -> None:
        """Kill the run and read its log: errors, and which claims it prepared (to find any prepared twice)."""
        check_exit(self.figures, daemon, sig, await daemon.kill(SIGNALS[sig]), self.sockets)
        for record in daemon.log_lines():
            message = str(record.get("message", ""))
            if message.startswith("prepared claim "):
                self.prepared_log[message.split("(", 1)[1].split(")", 1)[0]] += 1

    def count_double_prepares(self) -> None:
        twice = sorted(uid for uid, n in self.prepared_log.items() if n > 1)
        self.figures.duplicated = len(twice)
        if twice:
            self.figures.problem(f"claims prepared more than once: {twice}")
        # Every prepare that returned OK logged its line first; if not, the count above would see nothing.
        unlogged = sorted(self.ever_acked - set(self.prepared_log))
        if unlogged:
            self.figures.problem(
                f"no 'prepared claim' log line for acknowledged claims {unlogged}: did its text change?"
            )


async def soak_dra_restarts(restarts: int, *, seed: int = SEED, root: Path | None = None) -> DaemonSoakFigures:
    """Kill and restart ``fakegpu dra`` ``restarts`` times against the in-process API server."""
    figures = DaemonSoakFigures("fakegpu dra", seed)
    rng = random.Random(seed)
    base = Path(tempfile.mkdtemp(prefix="fgds-", dir="/tmp")) if root is None else root
    apiserver = FakeApiServer("1.36").start()
    apiserver.add_node(DRA_NODE)
    soak = DraSoak(base, figures, rng, apiserver)
    began = time.monotonic()
    daemon: Daemon | None = None
    try:
        await soak.watcher.start()
        plan = schedule(restarts, DRA_ACTIONS, rng)
        for action, sig in plan:
            daemon = await soak.start(pause=action in ("after-prepare-started", "after-cdi-written"))
            await soak.act_and_kill(daemon, action, sig)
            figures.restarts += 1
        daemon = await soak.start(pause=False)
        await soak.stop(daemon, "SIGTERM")
        soak.check_disk(serving=False)
        soak.count_double_prepares()
        rejected = [r for r in apiserver.rejections if r.body]
        if rejected or apiserver.errors:
            figures.problem(f"the API server rejected {rejected} / failed {apiserver.errors}")
    finally:
        if daemon is not None and daemon.alive():
            await daemon.kill(signal.SIGKILL)
        await soak.watcher.stop()
        apiserver.stop()
        figures.elapsed = time.monotonic() - began
        if root is None:
            shutil.rmtree(base, ignore_errors=True)
    return figures


# --- the tests ------------------------------------------------------------------------------------------
