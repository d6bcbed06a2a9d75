"""The admin ops as one table: for each op its fields as ``fakegpu ctl`` takes them, and the line printed
for its answer.

``fakegpu ctl`` builds one subcommand per :class:`Operation` (``add_to``), turns the parsed command line
into the op's request (``request``) and prints ``summary(request, result)``. A field is sent only when
it has a value (options left out are ``None``, a switch left off is ``False``), so the daemon's own
defaults apply. The daemons' op functions say which fields each op takes and check them
(``fakegpu.control.protocol``); this table is how a person writes them.
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from fakegpu.control.gpu_fault_ops import COUNTED_CALLS, KIND_LABELS
from fakegpu.control.pods_text import render_pod, render_pods
from fakegpu.control.status_text import render_status
from fakegpu.sharing.bug_modes import OFF_THE_BUS_XID
from fakegpu.sharing.errors import error_message, shorten
from fakegpu.sharing.faults import FaultSpec, FromText
from fakegpu.sharing.gpu_condition import RECOVERIES, recovery_refusal
from fakegpu.sharing.gpu_faults import KINDS, GpuFault

Request = Mapping[str, Any]
"""An op's fields, without ``op``."""
OUTPUTS = ("table", "json", "yaml")
"""``-o`` of every op: the text below (``table``), or the answer as JSON or YAML."""


@dataclass(frozen=True)
class Arg:
    """One field, as a positional argument (``flag`` None) or an option."""

    field: str
    help: str | None = None
    flag: str | None = None
    type: Callable[[str], Any] | None = None
    """How the command line's text becomes the field's value (``int``, ``str.upper``); text by default."""
    choices: tuple[str, ...] | None = None
    default: Any = None
    optional: bool = False
    """A positional argument that may be left out."""
    switch: bool = False
    """An option without a value: the field is ``true`` when it is given."""
    repeat: bool = False
    """An option that may be given more than once: the field is the list of its values."""
    metavar: str | None = None
    """How ``--help`` names the value (argparse's upper-cased field name by default)."""
    required: bool = False
    """An option that must be given (argparse refuses the command line without it)."""
    switch_value: Any = True
    """The field's value when a switch is given (``--uncontained`` sends ``contained: false``)."""

    @property
    def fields(self) -> tuple[str, ...]:
        return (self.field,)

    def add_to(self, parser: argparse.ArgumentParser, help_values: Mapping[str, str]) -> None:
        text = self.help.format_map(help_values) if self.help is not None else None
        if self.switch:
            assert self.flag is not None, self.field
            parser.add_argument(self.flag, dest=self.field, action="store_const", const=self.switch_value, help=text)
            return
        kwargs: dict[str, Any] = {"default": self.default, "help": text}
        if self.required:
            kwargs["required"] = True
        if self.repeat:
            kwargs["action"] = "append"
        if self.metavar is not None:
            kwargs["metavar"] = self.metavar
        if self.type is not None:
            kwargs["type"] = self.type
        if self.choices is not None:
            kwargs["choices"] = self.choices
        if self.flag is not None:
            parser.add_argument(self.flag, dest=self.field, **kwargs)
        else:
            parser.add_argument(self.field, nargs="?" if self.optional else None, **kwargs)

    def values(self, args: argparse.Namespace) -> dict[str, Any]:
        value = getattr(args, self.field)
        return {} if value is None else {self.field: value}


@dataclass(frozen=True)
class Either:
    """A field set by exactly one of several switches (``--healthy`` or ``--unhealthy``)."""

    field: str
    states: tuple[tuple[str, Any, str], ...]
    """(flag, the field's value, help) for each switch."""

    @property
    def fields(self) -> tuple[str, ...]:
        return (self.field,)

    def add_to(self, parser: argparse.ArgumentParser, help_values: Mapping[str, str]) -> None:
        group = parser.add_mutually_exclusive_group(required=True)
        for flag, value, text in self.states:
            group.add_argument(flag, dest=self.field, action="store_const", const=value, help=text)

    def values(self, args: argparse.Namespace) -> dict[str, Any]:
        return {self.field: getattr(args, self.field)}


Param = Arg | Either

_FROM_TEXT: dict[Any, Callable[[str], Any] | None] = {str: None, int: int, float: float}
"""How an option's text becomes a value of each scalar type (text stays text)."""


def options_of(model: type[BaseModel], skip: tuple[str, ...] = ()) -> tuple[Arg, ...]:
    """One ``--name`` option per field of ``model``, so a model defines an op's fields once: the field's
    description is the help (its default appended when it says something), its default the option's (a
    required field's option left out is not sent, and the daemon names it), a ``bool`` field a switch, a
    :class:`FromText` in its annotation how the text is read."""
    args = []
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        flag = "--" + name.replace("_", "-")
        default = None if info.is_required() else info.get_default()
        help_text = info.description or ""
        if default:
            help_text += " (default %(default)s)"
        scalar = info.annotation
        if typing.get_origin(scalar) in (typing.Union, types.UnionType):  # ``int | None``: left out is None
            scalar = next(a for a in typing.get_args(scalar) if a is not type(None))
        if scalar is bool:
            args.append(Arg(name, help_text, flag=flag, switch=True))
            continue
        parse = next((m.parse for m in info.metadata if isinstance(m, FromText)), None)
        if parse is None and scalar not in _FROM_TEXT:
            raise TypeError(f"{model.__name__}.{name}: no command-line option for a field of type {scalar!r}")
        args.append(Arg(name, help_text, flag=flag, type=parse or _FROM_TEXT[scalar], default=default))
    return tuple(args)


@dataclass(frozen=True)
class Operation:
    """One admin op: its name on the wire and on the command line, its fields and its answer's text."""

    name: str
    help: str
    summary: Callable[[Request, Any], str]
    """The text printed for an answer (``-o table``): one line, or the status tables."""
    args: tuple[Param, ...] = ()
    kubelet: bool = False
    """Served by the kubelet emulator only (``fakegpu kubelet``), so ``ctl`` asks the kubelet's socket."""
    check: Callable[[Request], None] | None = None
    """Checks the request before it is sent (ValueError: bad usage, one line), where the command line's
    types cannot say it (a field that does not apply to a fault's kind)."""

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(f for a in self.args for f in a.fields)

    def add_to(self, ops: Any, help_values: Mapping[str, str]) -> argparse.ArgumentParser:
        """Add this op's subcommand to ``ops`` (a subparsers action); ``{name}`` in a help text is filled
        from ``help_values``."""
        parser: argparse.ArgumentParser = ops.add_parser(self.name, help=self.help, description=self.help)
        parser.add_argument("-o", "--output", choices=OUTPUTS, default="table", help="output format")
        for arg in self.args:
            arg.add_to(parser, help_values)
        return parser

    def request(self, args: argparse.Namespace) -> dict[str, Any]:
        """The request for the parsed command line: ``op`` and the fields given."""
        request: dict[str, Any] = {"op": self.name}
        for arg in self.args:
            request.update(arg.values(args))
        return request


# --- the answers' texts --------------------------------------------------------------------------------


def _list(ids: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _status(_request: Request, result: Any) -> str:
    return render_status(result)


def _health(request: Request, result: Any) -> str:
    healthy, xid = request["healthy"], request.get("xid")
    if not result:
        return f"no device changed: {request['target']} was already {'healthy' if healthy else 'unhealthy'}"
    how = "healthy" if healthy else "unhealthy" + (f" (XID {xid})" if xid is not None else "")
    return f"marked {len(result)} device(s) {how}: {_list(result)}"


def _ignored(xid: int, already: str) -> str:
    return (
        f"no device made unhealthy: XID {xid} is ignored (non-fatal) by the daemon's health policy "
        f"(or {already} already unhealthy)"
    )


def _unhealthy(result: Sequence[str]) -> str:
    return f"{len(result)} device(s) unhealthy: {_list(result)}"


def _xid(request: Request, result: Any) -> str:
    if not result:
        return _ignored(request["xid"], "the devices were")
    return f"XID {request['xid']} on {request['target']}: {_unhealthy(result)}"


def _off_bus(request: Request, result: Any) -> str:
    if not result:
        return _ignored(OFF_THE_BUS_XID, "the GPU was")
    return f"GPU {request['gpu']} fell off the bus (XID {OFF_THE_BUS_XID}): {_unhealthy(result)}"


def _gpu_lost(_request: Request, result: Any) -> str:
    return f"NVML reports the GPU lost: {_unhealthy(result)}"


def _unmonitored(request: Request, result: Any) -> str:
    return f"GPU {request['gpu']} unmonitored (NVML cannot watch its events): {len(result)} device(s): {_list(result)}"


def _fault(_request: Request, result: Any) -> str:
    scope = f" for {result['resource']}" if result["resource"] else ""
    spec = FaultSpec.shown(result)
    which = spec.calls(result["method"], result["times"], result.get("after", 0))
    return f"planned: {which}{scope} {spec.effect(result['message'])}"


def _xids(xids: Sequence[Mapping[str, Any]]) -> str:
    """`` (XID 94, 63: fatal)``, or each with its class when they differ."""
    if not xids:
        return ""
    classes = {x["class"] for x in xids}
    if len(classes) == 1:
        return f" (XID {', '.join(str(x['xid']) for x in xids)}: {classes.pop()})"
    return " (XID " + ", ".join(f"{x['xid']} {x['class']}" for x in xids) + ")"


def _gpu_fault(_request: Request, result: Any) -> str:
    head = f"GPU {result['gpu']}: {KIND_LABELS[result['kind']]}"
    if result["armed"]:
        return (
            f"{head} armed ({result['fault']}): strikes when {result['calls_left']} more call(s) use the GPU "
            f"({COUNTED_CALLS})"
        )
    changed = result["changed"]
    effect = f"device(s) {_list(changed)} unhealthy" if changed else "no device changed health"
    note = f"; {result['note']}" if result["note"] else ""
    return f"{head}{_xids(result['xids'])}: {effect}{note}"


def _recover(_request: Request, result: Any) -> str:
    """``GPU 2 reset: no fault to end``, ``GPU 3 reset: ended ecc-uncorrectable``, ``GPU 1: thermal fault
    cleared``, then the faults left and whether the devices stay unhealthy."""
    if result["what"] == "reset":
        ended = f"ended {', '.join(result['ended'])}" if result["ended"] else "no fault to end"
        line = f"GPU {result['gpu']} reset: {ended}"
    else:
        line = f"GPU {result['gpu']}: {result['what']} fault cleared"
    if result["remaining"]:
        line += f"; still {', '.join(result['remaining'])}"
    if not result["healthy"]:
        line += "; its devices stay unhealthy (NVIDIA's plugins never mark an XID-unhealthy device healthy again)"
    return line + (f"; {result['note']}" if result["note"] else "")


def _check_gpu_fault(request: Request) -> None:
    """The fault the request describes, checked by the model before it is sent: bad usage, one line."""
    kind = request.get("kind")
    if kind not in KINDS:
        raise ValueError(f"unknown fault kind {kind!r}; expected one of: {', '.join(KINDS)}")
    if kind == "xid" and request.get("xid") is None:
        raise ValueError("an xid fault needs the XID: --xid N")
    try:
        GpuFault.model_validate({k: v for k, v in request.items() if k in GpuFault.model_fields})
    except ValidationError as exc:
        raise ValueError(_option_error(exc.errors(include_url=False)[0])) from None


def _option_error(err: Any) -> str:
    """A field's error as the option that set it: ``--watts: must be greater than 0, found -5.0``; an error
    of the whole fault (a field the kind does not take) as the model says it."""
    loc = err.get("loc") or ()
    if not loc or not isinstance(loc[0], str):
        return error_message(err)
    flag = "--uncontained" if loc[0] == "contained" else "--" + loc[0].replace("_", "-")
    msg = str(err["msg"])
    text = "must be " + msg.removeprefix("Input should be ") if msg.startswith("Input should be ") else msg
    if "input" in err and not isinstance(err["input"], (dict, list)):
        text += f", found {shorten(repr(err['input']), 40)}"
    return f"{flag}: {text}"


def _check_recover(request: Request) -> None:
    if request.get("what") not in RECOVERIES:
        raise ValueError(recovery_refusal(str(request.get("what"))))


def _clear_faults(_request: Request, result: Any) -> str:
    return f"cleared {result} planned fault(s)"


def _end_streams(_request: Request, result: Any) -> str:
    return f"ended {result} ListAndWatch stream(s)"


def _serving(result: Any) -> str:
    return ", ".join(result["serving"]) or "nothing"


def _plugins(request: Request, result: Any) -> str:
    action = request["action"]
    if action == "stop":
        return "plugins stopped"
    done = {"start": "started", "restart": "restarted"}[action]
    return f"plugins {done}; serving {_serving(result)}"


def _reload(_request: Request, result: Any) -> str:
    return f"reloaded; serving {_serving(result)}"


def _reconfigure(_request: Request, result: Any) -> str:
    return f"reconfigured: {result['gpus']} GPU(s); serving {_serving(result)}"


def _pods(_request: Request, result: Any) -> str:
    return render_pods(result)


def _run_pod(_request: Request, result: Any) -> str:
    return render_pod(result)


def _delete_pod(_request: Request, result: Any) -> str:
    released = "; ".join(f"{r}: {_list(ids)}" for r, ids in sorted(result["released"].items()))
    line = f"pod {result['namespace']}/{result['name']} deleted" + (f"; released {released}" if released else "")
    if result.get("unprepared"):
        line += f"; unprepared claims {', '.join(result['unprepared'])}"
    if result.get("unprepare_error"):
        line += f"; unprepare failed, retrying: {result['unprepare_error']}"
    return line


def _restart_kubelet(request: Request, result: Any) -> str:
    line = f"kubelet restarted (start {result['starts']}); {result['pods']} pod(s) kept"
    if result["registered"]:
        line += f"; registered again: {', '.join(result['registered'])}"
    if result["missing"]:
        line += f"; not registered again after {request.get('wait', 10.0):g}s: {', '.join(result['missing'])}"
    return line


def _advance_clock(_request: Request, result: Any) -> str:
    resources = "; ".join(
        f"{name} capacity={count} allocatable={result['allocatable'].get(name, 0)}"
        for name, count in result["capacity"].items()
    )
    return f"kubelet clock advanced {result['advanced']:g}s; " + (resources or "no extended resources")


_REQUEST_HELP = "(repeatable), e.g. nvidia.com/gpu=2"

# --- the table -----------------------------------------------------------------------------------------

_TARGET = "device ID, GPU or MIG UUID, GPU index (or DRA device name)"

DAEMON_OPERATIONS: tuple[Operation, ...] = (  # the device plugin's and the DRA driver's
    Operation(
        "status",
        "what the daemon serves: resources, devices, health, faults; the kubelet's: node status and pods",
        _status,
    ),
    Operation(
        "health",
        "set a device's health directly, and recover it again",
        _health,
        (
            Arg("target", _TARGET),
            Either("healthy", (("--healthy", True, "mark healthy"), ("--unhealthy", False, "mark unhealthy"))),
            Arg("xid", "the XID that made it unhealthy (with --unhealthy)", flag="--xid", type=int),
        ),
    ),
    Operation(
        "xid",
        "an XID event on a device, honouring ignored XIDs and DP_* variables",
        _xid,
        (
            Arg("target", _TARGET),
            Arg("xid", "XID code, e.g. 79 (fallen off the bus) or 48 (double-bit ECC)", type=int),
        ),
    ),
    Operation(
        "off-bus",
        "make a GPU fall off the bus (XID 79): it, its replicas and MIG devices unhealthy",
        _off_bus,
        (Arg("gpu", "GPU index or UUID"),),
    ),
    Operation(
        "gpu-lost",
        "NVML reports the GPU lost: every device unhealthy (DRA: gpu.nvidia.com/gpu-lost on every device)",
        _gpu_lost,
    ),
    Operation(
        "unmonitored",
        "NVML cannot watch a GPU's events: its devices unhealthy (DRA: gpu.nvidia.com/unmonitored, health Unknown)",
        _unmonitored,
        (Arg("gpu", "GPU index or UUID"),),
    ),
    Operation(
        "gpu-fault",
        "a GPU fault of any kind, now or after N calls: xid, off-bus, gpu-lost, ECC, thermal, power, NVLink, fabric",
        _gpu_fault,
        (
            Arg("kind", f"one of: {', '.join(KINDS)}"),
            Arg("gpu", "GPU index or UUID", flag="--gpu", required=True),
            *options_of(GpuFault, skip=("kind", "contained")),
            Arg(
                "contained",
                "an uncontained uncorrectable ECC error (XID 95; kind ecc-uncorrectable)",
                flag="--uncontained",
                switch=True,
                switch_value=False,
            ),
        ),
        check=_check_gpu_fault,
    ),
    Operation(
        "recover",
        "a GPU's way back: thermal, power, fabric (the cause cleared) or reset (a GPU reset)",
        _recover,
        (
            Arg("what", f"one of: {', '.join(RECOVERIES)}"),
            Arg("gpu", "GPU index or UUID", flag="--gpu", required=True),
        ),
        check=_check_recover,
    ),
    Operation(
        "fault",
        "make calls of an RPC fail with a gRPC status, or take longer (after N calls pass)",
        _fault,
        (
            Arg("method", "{faultable_rpcs}"),
            *options_of(FaultSpec),
        ),
    ),
    Operation(
        "clear-faults",
        "drop planned faults (all, or those of one RPC)",
        _clear_faults,
        (Arg("method", optional=True),),
    ),
    Operation(
        "end-streams",
        "end the open ListAndWatch streams (the kubelet sees them end)",
        _end_streams,
        (Arg("resource", "only this resource's streams", flag="--resource"),),
    ),
    Operation(
        "plugins",
        "stop, start or restart the device plugin servers",
        _plugins,
        (Arg("action", choices=("stop", "start", "restart")),),
    ),
    Operation("reload", "rebuild the inventory from the daemon's input files", _reload),
    Operation(
        "reconfigure",
        "change the GPUs, the MIG layout or the device IDs of the running daemon",
        _reconfigure,
        (
            Arg("gpus", "the node's GPUs from now on, e.g. 4xh100-80gb", flag="--gpus"),
            Arg("mig_layout", "re-partition MIG: all-1g.10gb, all-balanced, ...", flag="--mig-layout"),
            Arg(
                "mig_strategy",
                "how MIG devices are advertised from now on: none, single or mixed (NVIDIA's --mig-strategy)",
                flag="--mig-strategy",
                choices=("none", "single", "mixed"),
            ),
            Arg("new_ids", "restart the plugins with fresh device IDs", flag="--new-ids", switch=True),
        ),
    ),
)

KUBELET_OPERATIONS: tuple[Operation, ...] = (
    Operation("pods", "the kubelet's pods with their devices, envs, mounts and CDI devices", _pods, kubelet=True),
    Operation(
        "run-pod",
        "admit a pod on the kubelet emulator: an app container 'main', optionally an init container and a sidecar",
        _run_pod,
        (
            Arg("name", "the pod's name"),
            Arg(
                "requests",
                f"a request of the app container {_REQUEST_HELP}",
                flag="--request",
                repeat=True,
                metavar="RESOURCE=COUNT",
            ),
            Arg(
                "init_requests",
                f"a request of an init container {_REQUEST_HELP}",
                flag="--init-request",
                repeat=True,
                metavar="RESOURCE=COUNT",
            ),
            Arg(
                "sidecar_requests",
                f"a request of a sidecar {_REQUEST_HELP}",
                flag="--sidecar-request",
                repeat=True,
                metavar="RESOURCE=COUNT",
            ),
            Arg(
                "claims",
                "a ResourceClaim of the pod, prepared by the named DRA drivers before it starts (repeatable), "
                "e.g. default/gpu-claim/7f3c...=gpu.nvidia.com",
                flag="--claim",
                repeat=True,
                metavar="NS/NAME/UID=DRIVER[,DRIVER]",
            ),
            Arg("namespace", "the pod's namespace (default default)", flag="--namespace"),
            Arg("uid", "the pod's UID (default: derived from namespace and name)", flag="--uid"),
        ),
        kubelet=True,
    ),
    Operation(
        "delete-pod",
        "delete a pod from the kubelet emulator: its devices are free again",
        _delete_pod,
        (Arg("name", "the pod's name"), Arg("namespace", "the pod's namespace (default default)", flag="--namespace")),
        kubelet=True,
    ),
    Operation(
        "restart-kubelet",
        "restart the kubelet emulator as a kubelet restarts: sockets removed, checkpoint read, plugins register again",
        _restart_kubelet,
        (Arg("wait", "seconds to wait for the plugins to register again (default 10)", flag="--wait", type=float),),
        kubelet=True,
    ),
    Operation(
        "advance-clock",
        "move the kubelet's clock forward (grace periods are measured on it)",
        _advance_clock,
        (Arg("seconds", "how far, e.g. 300", type=float),),
        kubelet=True,
    ),
)

OPERATIONS: tuple[Operation, ...] = DAEMON_OPERATIONS + KUBELET_OPERATIONS
"""Every op ``fakegpu ctl`` knows; ``status`` is served by all three daemons."""

BY_NAME: dict[str, Operation] = {op.name: op for op in OPERATIONS}
