"""What both scenario runners print: one line per step (number, kind, what, milliseconds, status)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

from fakegpu.testing.scenario.expectations import describe
from fakegpu.testing.scenario.model import (
    AdvanceClockStep,
    AllocateStep,
    DeleteCheckpointStep,
    DeletePodStep,
    EndStreamsStep,
    ExpectNowStep,
    ExpectStep,
    FaultStep,
    GpuFaultStep,
    HealthStep,
    PluginsLookedStep,
    ReconfigureStep,
    RecoverStep,
    RestartStep,
    Step,
    WaitStep,
    XidStep,
)

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_BAD_FILE = 2
# EXIT_NO_DAEMON (3, from fakegpu.control.client): --socket names a socket nobody listens on
STEP_TIMEOUT = 30.0
POLL_INTERVAL = 0.01
_TEXT_WIDTH = 72


def _target_name(gpu: int | None, device: str | None) -> str:
    return f"GPU {gpu}" if gpu is not None else f"device {device}"


def _short(text: str) -> str:
    return text if len(text) <= _TEXT_WIDTH else text[: _TEXT_WIDTH - 3] + "..."


def step_line(out: TextIO, number: str, kind: str, text: str, seconds: float, status: str) -> None:
    """One step's output line: number, kind, what it did, milliseconds, PASS/FAIL/ERROR."""
    out.write(f"  {number:>4}  {kind:<17} {_short(text):<{_TEXT_WIDTH}} {seconds * 1000:>7.0f} ms  {status}\n")


def detail_lines(out: TextIO, details: Sequence[str]) -> None:
    for d in details:
        out.write(f"          {d}\n")


def describe_step(step: Step) -> str:  # noqa: PLR0912 - one flat case per step kind
    """What a step does, for its output line."""
    match step:
        case ExpectStep(expect=e):
            return describe(e)
        case ExpectNowStep(expect_now=e):
            return describe(e)
        case XidStep(xid=x):
            return f"XID {x.xid} on {_target_name(x.gpu, x.device)}"
        case HealthStep(health=h):
            return f"{_target_name(h.gpu, h.device)} -> {'healthy' if h.healthy else 'unhealthy'}"
        case FaultStep(fault=f):
            return f"{f.calls(f.rpc, f.times, f.after, the='')} {f.effect(seconds=' s')}"
        case GpuFaultStep(gpu_fault=g):
            return f"{g.fault().describe()} on GPU {g.gpu}"
        case RecoverStep(recover=r):
            return f"{r.what} on GPU {r.gpu}"
        case AllocateStep(allocate=a):
            wanted = ", ".join(f"{k}: {v}" for k, v in a.resources.items())
            return f"pod {a.pod}/{a.container} asks {wanted}"
        case DeletePodStep(delete_pod=pod):
            return f"pod {pod}"
        case RestartStep(restart=target):
            return "the kubelet emulator" if target == "kubelet" else "the device plugins"
        case EndStreamsStep(end_streams=name):
            return f"ListAndWatch streams of {name}"
        case AdvanceClockStep(advance_clock=seconds):
            return f"kubelet clock +{seconds:g} s"
        case ReconfigureStep(reconfigure=r):
            changed = [f"{k}={v}" for k in ("gpus", "mig_layout", "mig_strategy") if (v := getattr(r, k)) is not None]
            if r.config is not None:
                changed.append("config")
            return ", ".join(changed)
        case DeleteCheckpointStep():
            return "kubelet_internal_checkpoint"
        case WaitStep(wait=seconds):
            return f"{seconds:g} s"
        case PluginsLookedStep():
            return "the plugins' watch loop looks again"
    raise AssertionError(f"unhandled step {step!r}")  # pragma: no cover


def gpu_fault_note(answer: dict[str, Any]) -> str:
    """What a ``gpu_fault`` step did, for its line: ``XID 94, 63: 2 device(s) unhealthy`` or ``armed``."""
    if answer["armed"]:
        return f"armed: strikes when {answer['calls_left']} more call(s) use the GPU"
    xids = ", ".join(f"{x['xid']} {x['class']}" for x in answer["xids"])
    changed = f"{len(answer['changed'])} device(s) unhealthy" if answer["changed"] else "no health change"
    return f"XID {xids}: {changed}" if xids else changed


def recover_note(answer: dict[str, Any]) -> str:
    """What a ``recover`` step did, for its line."""
    ended = ", ".join(answer["ended"]) or "no fault"
    return f"ended {ended}" + ("" if answer["healthy"] else "; the GPU stays unhealthy")
