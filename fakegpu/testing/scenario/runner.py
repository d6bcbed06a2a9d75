"""Runs a scenario: a FakeNode (kubelet emulator + fakegpu's real plugins over Unix sockets) and its steps.

No step can pass on stale state: an inject step (``xid``, ``health``, ``gpu_fault``, ``recover``,
``end_streams``, ``restart: plugins``, ``reconfigure``) returns only once the kubelet emulator has seen its
effect (the FakeNode's actions wait for the device update to reach it), and ``expect`` is an eventually check
that fails with what it waited for and the last values seen; ``expect_now`` checks at once.

Each step prints one line: its number, kind, what it did, the milliseconds it took and PASS or FAIL.
The first failing step stops the scenario and prints what was expected and what the node showed.
Exit status: 0 every step passed, 1 an expectation failed, 2 a bad file (or a step naming a GPU, device,
resource or pod that does not exist).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from fakegpu.control.client import EXIT_NO_DAEMON
from fakegpu.control.gpu_fault_ops import GpuFaultFace, gpu_fault, recover
from fakegpu.control.protocol import AdminError
from fakegpu.fakeplugin.admin_ops import DEVICE_PLUGIN_FAULTS
from fakegpu.runtime.eventually import WaitTimeout, eventually
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.sharing.live_inventory import UnknownDeviceError
from fakegpu.testing.fake_node import FakeNode
from fakegpu.testing.scenario.expectations import check, describe
from fakegpu.testing.scenario.live import DaemonNotFound, run_live_scenario
from fakegpu.testing.scenario.model import (
    AdvanceClockStep,
    AllocateArgs,
    AllocateStep,
    Checks,
    DeleteCheckpointStep,
    DeletePodStep,
    EndStreamsStep,
    ExpectArgs,
    ExpectNowStep,
    ExpectStep,
    FaultStep,
    GpuFaultArgs,
    GpuFaultStep,
    HealthStep,
    NodeModel,
    PluginsLookedStep,
    ReconfigureArgs,
    ReconfigureStep,
    RecoverArgs,
    RecoverStep,
    RestartStep,
    Scenario,
    Step,
    WaitStep,
    XidStep,
    load_scenario,
    step_kind,
)
from fakegpu.testing.scenario.output import (
    EXIT_BAD_FILE,
    EXIT_FAIL,
    EXIT_PASS,
    POLL_INTERVAL,
    STEP_TIMEOUT,
    describe_step,
    detail_lines,
    gpu_fault_note,
    recover_note,
    step_line,
)
from fakegpu.testing.scenario.run_count import RunCount


class StepFailed(Exception):
    """An expectation did not hold; ``details`` are the expected-versus-got lines."""

    def __init__(self, details: Sequence[str]) -> None:
        super().__init__("; ".join(details))
        self.details = list(details)


class BadReference(Exception):
    """A step names something the node does not have: a mistake in the file, found while running."""


def _write(root: Path, name: str, content: dict[str, Any] | None) -> str | None:
    if content is None:
        return None
    path = root / name
    path.write_text(yaml.safe_dump(content))
    return str(path)


def _gpus(value: str | list[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def node_inputs(root: Path, spec: NodeModel) -> InventoryInputs:
    """The node's inputs, built as the ``fakegpu_node`` pytest fixture builds them (which needs pytest
    installed, so it is not imported here)."""
    cli: dict[str, str | bool | None] = dict(spec.flags)
    if spec.mig_strategy is not None:
        cli["mig_strategy"] = spec.mig_strategy
    spec_file = _write(root, "node.yaml", spec.node_spec)
    return InventoryInputs(
        node_name=spec.node_name,
        node_spec=spec_file,
        gpus=() if spec_file else _gpus(spec.gpus),
        mig_layout=spec.mig_layout,
        config_file=_write(root, "config.yaml", spec.config),
        cli_flags=cli,
        env=dict(spec.env),
    )


class ScenarioRun:
    def __init__(self, scenario: Scenario, out: TextIO, count: RunCount | None = None) -> None:
        self.scenario = scenario
        self.out = out
        self.count = count or RunCount()
        self.node: FakeNode | None = None
        self.root = Path(tempfile.mkdtemp(prefix="fgs-", dir="/tmp"))
        self.pod_devices: dict[str, set[str]] = {}
        self._configs = 0

    # -- output ------------------------------------------------------------------------------
    def _readable(self, text: str) -> str:
        """Errors name the temporary files the node was built from; name the scenario's fields instead."""
        text = text.replace(f"{self.root}/config.yaml", "node.config").replace(
            f"{self.root}/node.yaml", "node.node_spec"
        )
        return re.sub(re.escape(str(self.root)) + r"/config-\d+\.yaml", "reconfigure.config", text)

    def _line(self, number: str, kind: str, text: str, seconds: float, status: str) -> None:
        step_line(self.out, number, kind, text, seconds, status)

    def _details(self, details: Sequence[str]) -> None:
        detail_lines(self.out, details)

    # -- the run -----------------------------------------------------------------------------
    async def run(self) -> int:
        s = self.scenario
        self.out.write(f"scenario {s.name} ({s.issue}): {s.path}\n")
        began = time.monotonic()
        try:
            status = await self._run_steps()
        finally:
            if self.node is not None:
                await self.node.stop()
            shutil.rmtree(self.root, ignore_errors=True)
        took = time.monotonic() - began
        if status == EXIT_PASS and s.expect_start_error is not None:
            self.out.write(f"PASS {s.name}: failed to start as expected in {took:.2f} s\n")
        elif status == EXIT_PASS:
            self.out.write(f"PASS {s.name}: start and {len(s.steps)} step(s) in {took:.2f} s\n")
        elif status == EXIT_FAIL:
            self.out.write(f"FAIL {s.name} after {took:.2f} s\n")
        return status

    async def _run_steps(self) -> int:
        if not await self._start():
            return EXIT_FAIL
        if self.node is None:  # the node was expected to fail and did
            return EXIT_PASS
        for index, step in enumerate(self.scenario.steps):
            kind = step_kind(step)
            text = describe_step(step)
            started = time.monotonic()
            try:
                note = await asyncio.wait_for(self._execute(step), STEP_TIMEOUT)
            except StepFailed as exc:
                self._line(str(index), kind, text, self._since(started), "FAIL")
                self._details(exc.details)
                return EXIT_FAIL
            except TimeoutError as exc:
                self._line(str(index), kind, text, self._since(started), "FAIL")
                self._details([str(exc) or f"the step did not finish within {STEP_TIMEOUT:.0f} s"])
                return EXIT_FAIL
            except BadReference as exc:
                self._line(str(index), kind, text, self._since(started), "ERROR")
                raise SpecError(self.scenario.path, str(exc), f"steps[{index}].{kind}") from None
            self._line(str(index), kind, f"{text}: {note}" if note else text, self._since(started), "PASS")
            self.count.steps_done += 1
        return EXIT_PASS

    @staticmethod
    def _since(started: float) -> float:
        return time.monotonic() - started

    async def _start(self) -> bool:
        """Start the node (the ``start`` line); False when that failed unexpectedly or succeeded unexpectedly."""
        spec = self.scenario.node
        want_error = self.scenario.expect_start_error
        gpus = "node_spec" if spec.node_spec is not None else ", ".join(_gpus(spec.gpus))
        text = f"{gpus}" + (f", MIG {spec.mig_layout}" if spec.mig_layout else "")
        started = time.monotonic()
        try:
            node = FakeNode(
                self.root / "kubelet",
                node_inputs(self.root, spec),
                registration=spec.registration,
                pre_start_required=spec.pre_start_required,
                grace_period=spec.grace_period,
                bugs=spec.bugs,
            )
        except SpecError as exc:
            if want_error is None:
                self._line("", "start", text, self._since(started), "ERROR")
                raise SpecError(self.scenario.path, self._readable(str(exc)), "node") from None
            got = self._readable(str(exc))
            if want_error not in got:
                self._line("", "start", text, self._since(started), "FAIL")
                self._details([f"expected: start error containing {want_error!r}", f"got: {got}"])
                return False
            self._line("", "start", f"{text}: failed as expected: {got}", self._since(started), "PASS")
            return True
        if want_error is not None:
            self._line("", "start", text, self._since(started), "FAIL")
            self._details(
                [
                    f"expected: start error containing {want_error!r}",
                    f"got: a node serving {', '.join(node.plugins.wanted())}",
                ]
            )
            return False
        self.node = node
        try:
            await node.start()
        except TimeoutError as exc:
            self._line("", "start", text, self._since(started), "FAIL")
            self._details([str(exc), f"capacity {node.capacity()}, allocatable {node.allocatable()}"])
            return False
        served = ", ".join(f"{k}: {v}" for k, v in node.capacity().items())
        self._line("", "start", f"{text}: {served}", self._since(started), "PASS")
        return True

    # -- steps -------------------------------------------------------------------------------
    async def _execute(self, step: Step) -> str:  # noqa: PLR0912 - one flat case per step kind
        node = self.node
        assert node is not None
        match step:
            case ExpectStep(expect=e):
                return await self._expect(node, e)
            case ExpectNowStep(expect_now=e):
                return self._expect_now(node, e)
            case XidStep(xid=x):
                try:
                    changed = await node.inject_xid(x.target, x.xid)
                except UnknownDeviceError as exc:
                    raise BadReference(str(exc)) from None
                if changed:
                    return f"{len(changed)} device(s) unhealthy"
                critical = node.live.xid_policy.is_critical(x.xid)
                return "no device changed (already unhealthy)" if critical else "ignored by the XID policy"
            case HealthStep(health=h):
                try:
                    changed = await node.set_health(h.target, h.healthy)
                except UnknownDeviceError as exc:
                    raise BadReference(str(exc)) from None
                return f"{len(changed)} device(s)"
            case FaultStep(fault=f):
                node.fault(f.rpc, f)
                return ""
            case GpuFaultStep(gpu_fault=g):
                return await _gpu_fault(node, g)
            case RecoverStep(recover=r):
                return await _recover(node, r)
            case AllocateStep(allocate=a):
                return await self._allocate(node, a)
            case DeletePodStep(delete_pod=pod):
                if pod not in node.kubelet.pods:
                    raise BadReference(f"no pod {pod!r} was allocated")
                node.delete_pod(pod)
                self.pod_devices.pop(pod, None)
                return "deleted"
            case RestartStep(restart="kubelet"):
                await node.kubelet.stop()
                await node.kubelet.start()
                return "restarted"
            case RestartStep():
                await node.stop_plugins()
                await node.start_plugins()
                return f"serving {', '.join(node.plugins.servers)}"
            case EndStreamsStep(end_streams=name):
                if name not in node.plugins.servers:
                    raise BadReference(f"no plugin serves {name!r}; serving: {', '.join(node.plugins.servers)}")
                return f"{await node.end_streams(name)} stream(s) ended"
            case AdvanceClockStep(advance_clock=seconds):
                node.kubelet.clock.advance(seconds)
                return ""
            case ReconfigureStep(reconfigure=r):
                return await self._reconfigure(node, r)
            case DeleteCheckpointStep():
                path = node.kubelet.manager.checkpoint_path
                existed = path.exists()
                path.unlink(missing_ok=True)
                return "deleted" if existed else "there was none"
            case WaitStep(wait=seconds):
                await asyncio.sleep(seconds)
                return ""
            case PluginsLookedStep():
                return await _plugins_looked(node)
        raise AssertionError(f"unhandled step {step!r}")  # pragma: no cover

    async def _expect(self, node: FakeNode, expect: ExpectArgs) -> str:
        """Poll until every check holds; on timeout fail with what was awaited and the last values seen."""
        started = time.monotonic()
        problems: list[str] = []

        def holds() -> bool:
            nonlocal problems
            problems = check(node, expect, self.pod_devices)
            return not problems

        try:
            await eventually(
                holds, describe(expect), expect.within, interval=POLL_INTERVAL, assertions_mean_not_yet=False
            )
        except WaitTimeout:
            raise StepFailed([f"waited {expect.within:g} s for: {describe(expect)}", "last seen:", *problems]) from None
        waited = time.monotonic() - started
        return "held at once" if waited < POLL_INTERVAL else f"held after {waited * 1000:.0f} ms"

    def _expect_now(self, node: FakeNode, checks: Checks) -> str:
        problems = check(node, checks, self.pod_devices)
        if problems:
            raise StepFailed([f"expected now: {describe(checks)}", *problems])
        return ""

    async def _allocate(self, node: FakeNode, a: AllocateArgs) -> str:
        pod = a.pod
        existing = node.kubelet.pods.get(pod)
        if existing is not None and existing.admitted:
            raise BadReference(f"pod {pod!r} is already running; delete_pod it first")
        result = await node.run_pod(pod, {a.container: dict(a.resources)})
        got = f"{result.phase}" + (f" ({result.reason}): {result.message}" if not result.admitted else "")
        if result.admitted:
            ids = {i for x in node.kubelet.manager.allocations if x.pod_uid == pod for i in x.device_ids}
            self.pod_devices[pod] = ids
            if a.wants_admission:
                return f"admitted with {len(ids)} device(s)"
            wanted = f"an error containing {a.expect_error!r}" if a.expect_error else "a rejection"
            raise StepFailed([f"expected: {wanted}", f"got: admitted with {sorted(ids)}"])
        if a.wants_admission:
            raise StepFailed(["expected: admitted", f"got: {got}"])
        if a.expect_reason is not None and result.reason != a.expect_reason:
            raise StepFailed([f"expected: reason {a.expect_reason!r}", f"got: {got}"])
        if a.expect_error is not None and a.expect_error not in result.message:
            raise StepFailed([f"expected: an error containing {a.expect_error!r}", f"got: {got}"])
        return f"rejected as expected ({result.reason})"

    async def _reconfigure(self, node: FakeNode, r: ReconfigureArgs) -> str:
        old = node.inputs
        changes: dict[str, Any] = {}
        if r.gpus is not None:
            changes.update(gpus=_gpus(r.gpus), node_spec=None)
        if r.mig_layout is not None:
            changes["mig_layout"] = r.mig_layout
        if r.mig_strategy is not None:
            changes["cli_flags"] = {**old.cli_flags, "mig_strategy": r.mig_strategy}
        if r.config is not None:
            # A new file each time: the plugin manager watches the original one and would reload twice.
            self._configs += 1
            changes["config_file"] = _write(self.root, f"config-{self._configs}.yaml", r.config)
        node.inputs = dataclasses.replace(old, **changes)
        errors_before = len(node.plugins.stats.reload_errors)
        if await node.reload():
            if r.expect_error is not None:
                raise StepFailed([f"expected: reload rejected with {r.expect_error!r}", "got: reload accepted"])
            return f"serving {', '.join(node.plugins.wanted())}"
        node.inputs = old
        error = self._readable("; ".join(node.plugins.stats.reload_errors[errors_before:]) or "reload rejected")
        if r.expect_error is None:
            raise StepFailed(["expected: reload accepted", f"got: {error}"])
        if r.expect_error not in error:
            raise StepFailed([f"expected: reload rejected with {r.expect_error!r}", f"got: {error}"])
        return f"rejected as expected, still serving {', '.join(node.plugins.wanted())}"


async def _gpu_fault(node: FakeNode, g: GpuFaultArgs) -> str:
    """Strike the GPU as the ``gpu-fault`` op does; returns once the kubelet shows it (an armed fault changes
    nothing yet)."""
    try:
        answer = gpu_fault(node.live, GpuFaultFace(), str(g.gpu), g.fault())
    except AdminError as exc:
        raise BadReference(str(exc)) from None
    if not answer["armed"]:
        await node.wait_kubelet_current(what=f"{g.kind} on GPU {g.gpu}")
    return gpu_fault_note(answer)


async def _recover(node: FakeNode, r: RecoverArgs) -> str:
    try:
        answer = recover(node.live, GpuFaultFace(), str(r.gpu), r.what)
    except AdminError as exc:
        raise BadReference(str(exc)) from None
    await node.wait_kubelet_current(what=f"{r.what} on GPU {r.gpu}")
    return recover_note(answer)


async def _plugins_looked(node: FakeNode) -> str:
    """The ``plugins_looked`` barrier; its timeout is a failed step that says what it waited for, not a crash
    of the run."""
    before = node.plugins.stats.watch_steps
    try:
        await node.wait_plugins_looked()
    except TimeoutError as exc:  # KubeletEmulator.wait_for's timeout; anything else is a bug and propagates
        raise StepFailed([str(exc)]) from None
    return f"{node.plugins.stats.watch_steps - before} watch step(s)"


async def run_scenario(scenario: Scenario, out: TextIO, count: RunCount | None = None) -> int:
    """Run one parsed scenario; raises SpecError (exit 2) for a step naming what the node lacks."""
    return await ScenarioRun(scenario, out, count).run()


def scenario_files(paths: Sequence[str | Path]) -> list[Path | SpecError]:
    """Each path, a directory replaced by its ``*.yaml`` files in name order (a directory without any is a
    SpecError in its place, reported like a bad file)."""
    out: list[Path | SpecError] = []
    for given in paths:
        path = Path(given)
        try:
            directory = path.is_dir()
        except OSError:  # a name too long, say: the loader reports it against the file
            directory = False
        if not directory:
            out.append(path)
            continue
        found = sorted(p for p in path.glob("*.yaml") if p.is_file())
        out.extend(found or [SpecError(str(path), "no scenario files (*.yaml) in this directory")])
    return out


async def run_files(
    paths: Sequence[str | Path],
    out: TextIO,
    err: TextIO,
    socket: str | Path | None = None,
    count: RunCount | None = None,
) -> int:
    """Run every file (a directory: its ``*.yaml`` files, sorted); bad files print one ``fakegpu: error:``
    line on ``err``. Returns the worst exit status; several files end with a summary line.

    With ``socket`` (a live daemon's admin socket) no node is started: the inject steps are sent to the
    daemon (``fakegpu.testing.scenario.live``), and a file with a step that needs the kubelet emulator is bad;
    no daemon on ``socket`` is ``EXIT_NO_DAEMON``. ``count`` is kept up to date for a progress line.
    """
    count = count if count is not None else RunCount()
    face = DEVICE_PLUGIN_FAULTS if socket is None else None
    loaded: list[Scenario | SpecError] = []
    for entry in scenario_files(paths):
        try:
            loaded.append(entry if isinstance(entry, SpecError) else load_scenario(entry, face=face))
        except SpecError as exc:
            loaded.append(exc)
    count.files_total = len(loaded)
    count.steps_total = sum(len(s.steps) for s in loaded if isinstance(s, Scenario))
    statuses: list[int] = []
    for item in loaded:
        try:
            if isinstance(item, SpecError):
                raise item
            if socket is None:
                status = await run_scenario(item, out, count)
            else:
                status = await run_live_scenario(item, Path(socket), out, count)
        except SpecError as exc:
            out.flush()
            err.write(f"fakegpu: error: {exc}\n")
            status = EXIT_BAD_FILE
        except DaemonNotFound as exc:
            out.flush()
            err.write(f"fakegpu: error: {exc}\n")
            status = EXIT_NO_DAEMON
        statuses.append(status)
        count.files_done += 1
        if isinstance(item, Scenario):
            count.steps_done = sum(len(s.steps) for s in loaded[: count.files_done] if isinstance(s, Scenario))
    if len(statuses) > 1:
        passed = statuses.count(EXIT_PASS)
        failed = statuses.count(EXIT_FAIL)
        bad = statuses.count(EXIT_BAD_FILE)
        missing = statuses.count(EXIT_NO_DAEMON)
        summary = f"{len(statuses)} scenario files: {passed} passed, {failed} failed, {bad} bad"
        out.write(summary + (f", {missing} without a daemon" if missing else "") + "\n")
    return max(statuses, default=EXIT_PASS)
