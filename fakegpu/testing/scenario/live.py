"""Runs a scenario's inject steps against a live daemon through its admin socket (``scenario run --socket``).

No node is started: ``xid``, ``health``, ``fault``, ``gpu_fault``, ``recover``, ``end_streams`` and ``restart:
plugins`` become the daemon's admin ops, ``plugins_looked`` polls its ``status`` until the plugins' watch loop
has taken two more steps, ``wait`` sleeps. Every other step (and ``expect_start_error``) needs the embedded
kubelet emulator, so such a file is refused before anything is sent; so is a ``fault`` on an RPC the daemon's
face does not serve, once its status says which face it is. The output and exit statuses are the embedded
runner's: 0 every step passed, 1 an op failed (the daemon's error is printed), 2 a bad file or no daemon to
talk to.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, TextIO

from fakegpu.control.client import NoDaemonError, admin_call
from fakegpu.control.protocol import AdminError
from fakegpu.runtime.eventually import WaitTimeout, eventually
from fakegpu.sharing.errors import SpecError
from fakegpu.testing.scenario.model import (
    FACES,
    EndStreamsStep,
    FaultStep,
    GpuFaultStep,
    HealthStep,
    PluginsLookedStep,
    RecoverStep,
    RestartStep,
    Scenario,
    Step,
    WaitStep,
    XidStep,
    check_fault_rpcs,
    step_kind,
)
from fakegpu.testing.scenario.output import (
    EXIT_FAIL,
    EXIT_PASS,
    STEP_TIMEOUT,
    describe_step,
    detail_lines,
    gpu_fault_note,
    recover_note,
    step_line,
)
from fakegpu.testing.scenario.run_count import RunCount

_EMULATOR_ONLY = "needs the embedded kubelet emulator; run without --socket"
LOOK_TIMEOUT = 5.0
"""Seconds ``plugins_looked`` waits for the daemon's plugins to take two more watch steps."""
_LOOK_POLL = 0.02


class LiveStepFailed(Exception):
    """A step that waits on the daemon saw it never get there (not an error the daemon answered)."""


class DaemonNotFound(Exception):
    """Nothing listens on the admin socket: the run exits ``EXIT_NO_DAEMON``, as ``fakegpu ctl`` does."""


def _live_capable(step: Step) -> bool:
    match step:
        case XidStep() | HealthStep() | FaultStep() | EndStreamsStep() | WaitStep() | PluginsLookedStep():
            return True
        case GpuFaultStep() | RecoverStep():
            return True
        case RestartStep(restart="plugins"):
            return True
    return False


def check_live(scenario: Scenario) -> None:
    """SpecError naming the first step (or ``expect_start_error``) a live daemon cannot run."""
    if scenario.expect_start_error is not None:
        raise SpecError(scenario.path, f"expect_start_error {_EMULATOR_ONLY}")
    for index, step in enumerate(scenario.steps):
        if not _live_capable(step):
            kind = step_kind(step)
            if isinstance(step, RestartStep):
                kind = f"restart: {step.restart}"
            raise SpecError(scenario.path, f"step {index} ({kind}) {_EMULATOR_ONLY}")


class LiveScenarioRun:
    def __init__(self, scenario: Scenario, socket: Path, out: TextIO, count: RunCount | None = None) -> None:
        self.scenario = scenario
        self.socket = socket
        self.out = out
        self.count = count or RunCount()

    async def _call(self, op: str, **args: Any) -> Any:
        return await admin_call(self.socket, op, **args)

    async def run(self) -> int:
        s = self.scenario
        check_live(s)
        self.out.write(f"scenario {s.name} ({s.issue}): {s.path}\n")
        began = time.monotonic()
        try:
            status = await asyncio.wait_for(self._call("status"), STEP_TIMEOUT)
        except NoDaemonError as exc:
            raise DaemonNotFound(
                f"{s.path}: {exc}; start one with an admin socket: fakegpu plugin --admin-socket {self.socket} "
                f"(or fakegpu dra --admin-socket {self.socket})"
            ) from None
        except (AdminError, TimeoutError) as exc:
            reason = str(exc) or f"no answer within {STEP_TIMEOUT:.0f} s"
            raise SpecError(s.path, f"cannot use the admin socket {self.socket}: {reason}") from None
        kind = status.get("kind", "daemon") if isinstance(status, dict) else "daemon"
        node = status.get("node", "?") if isinstance(status, dict) else "?"
        face = FACES.get(kind)
        if face is not None:
            check_fault_rpcs(s, face)
        step_line(self.out, "", "connect", f"{kind} on node {node} at {self.socket}", time.monotonic() - began, "PASS")
        result = await self._run_steps()
        took = time.monotonic() - began
        if result == EXIT_PASS:
            self.out.write(f"PASS {s.name}: {len(s.steps)} step(s) against {self.socket} in {took:.2f} s\n")
        else:
            self.out.write(f"FAIL {s.name} after {took:.2f} s\n")
        return result

    async def _run_steps(self) -> int:
        for index, step in enumerate(self.scenario.steps):
            kind = step_kind(step)
            text = describe_step(step)
            started = time.monotonic()
            try:
                note = await asyncio.wait_for(self._execute(step), STEP_TIMEOUT)
            except AdminError as exc:
                step_line(self.out, str(index), kind, text, time.monotonic() - started, "FAIL")
                detail_lines(self.out, [f"the daemon answered: {exc}"])
                return EXIT_FAIL
            except TimeoutError:
                step_line(self.out, str(index), kind, text, time.monotonic() - started, "FAIL")
                detail_lines(self.out, [f"the step did not finish within {STEP_TIMEOUT:.0f} s"])
                return EXIT_FAIL
            except LiveStepFailed as exc:
                step_line(self.out, str(index), kind, text, time.monotonic() - started, "FAIL")
                detail_lines(self.out, [str(exc)])
                return EXIT_FAIL
            shown = f"{text}: {note}" if note else text
            step_line(self.out, str(index), kind, shown, time.monotonic() - started, "PASS")
            self.count.steps_done += 1
        return EXIT_PASS

    async def _execute(self, step: Step) -> str:
        match step:
            case XidStep(xid=x):
                changed = await self._call("xid", target=x.target, xid=x.xid)
                return f"{len(changed)} device(s) unhealthy" if changed else "ignored by the XID policy"
            case HealthStep(health=h):
                changed = await self._call("health", target=h.target, healthy=h.healthy)
                return f"{len(changed)} device(s)"
            case FaultStep(fault=f):
                await self._call("fault", method=f.rpc, **f.fields())
                return ""
            case GpuFaultStep(gpu_fault=g):
                fields = {"kind": g.kind, **g.fault().model_dump(exclude_defaults=True)}
                return gpu_fault_note(await self._call("gpu-fault", gpu=str(g.gpu), **fields))
            case RecoverStep(recover=r):
                return recover_note(await self._call("recover", gpu=str(r.gpu), what=r.what))
            case EndStreamsStep(end_streams=name):
                ended = await self._call("end-streams", resource=name)
                return f"{ended} stream(s) ended"
            case RestartStep(restart="plugins"):
                answer = await self._call("plugins", action="restart")
                serving = answer.get("serving", []) if isinstance(answer, dict) else []
                return f"serving {', '.join(serving)}"
            case WaitStep(wait=seconds):
                await asyncio.sleep(seconds)
                return ""
            case PluginsLookedStep():
                return await self._plugins_looked()
        raise AssertionError(f"step {step!r} cannot run against a live daemon")  # pragma: no cover

    async def _watch_steps(self) -> int:
        """The daemon's count of its plugins' watch steps, from its ``status``; only a device plugin daemon
        (its plugin manager) reports one."""
        status = await self._call("status")
        stats = status.get("stats") if isinstance(status, dict) else None
        steps = stats.get("watch_steps") if isinstance(stats, dict) else None
        if not isinstance(steps, int):
            raise LiveStepFailed("the daemon's status reports no plugins' watch_steps (a device plugin daemon does)")
        return steps

    async def _plugins_looked(self) -> str:
        """The ``plugins_looked`` barrier against the daemon: once its count grew by two, a whole watch step
        began after this one did."""
        before = await self._watch_steps()

        async def looked() -> int:
            now = await self._watch_steps()
            return now - before if now >= before + 2 else 0

        try:
            grown = await eventually(looked, "the plugins' watch loop to look again", LOOK_TIMEOUT, interval=_LOOK_POLL)
        except WaitTimeout as exc:
            raise LiveStepFailed(str(exc)) from None
        return f"{grown} watch step(s)"


async def run_live_scenario(scenario: Scenario, socket: Path, out: TextIO, count: RunCount | None = None) -> int:
    """Run one parsed scenario against the daemon on ``socket``; SpecError (exit 2) for a step it cannot
    run or a daemon that does not answer, DaemonNotFound when nothing listens on ``socket``."""
    return await LiveScenarioRun(scenario, socket, out, count).run()
