"""The scenario file schema: a node to start and a timeline of steps, validated strictly.

Every mistake in a file becomes one ``SpecError`` naming the file, the step and the field, e.g.
``scenarios/<file>.yaml: steps[3].allocate.resources.nvidia.com/gpu: Input should be a valid integer (found '2')``.
Steps are numbered from 0, as the error locations and the runner's output number them.

A ``fault`` step is checked against the face the scenario drives (:data:`FACES`): the embedded runner
drives the device plugin, so a fault on a DRA RPC there is an error, as it could never fire; a live
daemon's face is known once it answers (``check_fault_rpcs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fakegpu.control.fault_ops import FaultableRpcs
from fakegpu.dra.admin_ops import DRA_FAULTS
from fakegpu.fakeplugin.admin_ops import DEVICE_PLUGIN_FAULTS
from fakegpu.sharing.bug_modes import BUG_MODES
from fakegpu.sharing.errors import SpecError, error_message, format_location
from fakegpu.sharing.faults import FaultSpec
from fakegpu.sharing.gpu_condition import RECOVERIES
from fakegpu.sharing.gpu_faults import GpuFault
from fakegpu.sharing.plugin_flags import PLUGIN_FLAGS
from fakegpu.sharing.yaml_source import parse_yaml, read_text

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)

FACES: dict[str, FaultableRpcs] = {f.kind: f for f in (DEVICE_PLUGIN_FAULTS, DRA_FAULTS)}
"""The faces a scenario can drive, by the kind their daemon's status reports."""

PositiveCount = Annotated[int, Field(ge=1)]
Seconds = Annotated[float, Field(ge=0, le=3600)]


class _Model(BaseModel):
    model_config = _STRICT


class NodeModel(_Model):
    """What the node is made of; the same knobs as the ``fakegpu_node`` pytest fixture."""

    gpus: str | list[str] = "8xh100-80gb"
    node_spec: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    mig_layout: str | None = None
    mig_strategy: str | None = None
    flags: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    node_name: str = Field("fake-node", min_length=1)
    grace_period: float = Field(300.0, gt=0, le=3600)
    pre_start_required: bool = False
    registration: Literal["kubelet", "plugins-registry"] = "kubelet"
    bugs: list[str] = Field(default_factory=list)
    """Bug-compatible modes (sharing/bug_modes.py) to reproduce a known bug on purpose."""

    @field_validator("bugs")
    @classmethod
    def _known_bugs(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(BUG_MODES))
        if unknown:
            raise ValueError(
                f"unknown bug-compatible mode(s) {', '.join(unknown)}; expected some of: {', '.join(BUG_MODES)}"
            )
        return value

    @field_validator("flags")
    @classmethod
    def _known_flags(cls, value: dict[str, str]) -> dict[str, str]:
        known = [f.key for f in PLUGIN_FLAGS]
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ValueError(f"unknown plugin flag(s) {', '.join(unknown)}; expected some of: {', '.join(known)}")
        return value


class _Target(_Model):
    gpu: int | None = Field(None, ge=0)
    device: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one_target(self) -> _Target:
        if (self.gpu is None) == (self.device is None):
            raise ValueError("give exactly one of 'gpu' (an index) or 'device' (an advertised ID or UUID)")
        return self

    @property
    def target(self) -> str:
        return str(self.gpu) if self.gpu is not None else str(self.device)


class XidArgs(_Target):
    xid: int = Field(ge=0)


class HealthArgs(_Target):
    healthy: bool


class FaultArgs(FaultSpec):
    """A ``fault:`` step: the fault's own fields (``FaultSpec``) and the RPC it hits."""

    rpc: str
    """An RPC of the face the scenario drives; checked by ``check_fault_rpcs``, which knows the face."""


class GpuFaultArgs(GpuFault):
    """A ``gpu_fault:`` step: the GPU (its index) and the fault's own fields (``GpuFault``: ``kind`` and the
    fields of that kind, ``after_calls``)."""

    gpu: int = Field(ge=0)

    def fault(self) -> GpuFault:
        """The fault without its GPU, as the live inventory and the ``gpu-fault`` op take it."""
        return GpuFault.model_validate(self.model_dump(exclude={"gpu"}, exclude_defaults=True))


Recovery = Literal["thermal", "power", "fabric", "reset"]
assert frozenset(RECOVERIES) == frozenset(get_args(Recovery)), "the step takes what the ops take"


class RecoverArgs(_Model):
    """A ``recover:`` step: the GPU's way back (the cause of a thermal, power or fabric fault cleared, or a
    GPU reset)."""

    gpu: int = Field(ge=0)
    what: Recovery


class AllocateArgs(_Model):
    pod: str = Field(min_length=1)
    container: str = Field("main", min_length=1)
    resources: dict[str, PositiveCount] = Field(min_length=1)
    expect: Literal["admitted", "rejected"] | None = None
    expect_error: str | None = Field(None, min_length=1)
    expect_reason: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> AllocateArgs:
        rejected = self.expect_error is not None or self.expect_reason is not None
        if self.expect == "admitted" and rejected:
            raise ValueError("'expect: admitted' cannot be combined with 'expect_error' or 'expect_reason'")
        return self

    @property
    def wants_admission(self) -> bool:
        return self.expect != "rejected" and self.expect_error is None and self.expect_reason is None


class ReconfigureArgs(_Model):
    gpus: str | list[str] | None = None
    config: dict[str, Any] | None = None
    mig_layout: str | None = None
    mig_strategy: str | None = None
    expect_error: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _changes_something(self) -> ReconfigureArgs:
        if self.gpus is None and self.config is None and self.mig_layout is None and self.mig_strategy is None:
            raise ValueError("give at least one of gpus, config, mig_layout, mig_strategy")
        return self


class EnvExpect(_Model):
    pod: str = Field(min_length=1)
    container: str = Field("main", min_length=1)
    vars: dict[str, str] = Field(default_factory=dict)
    distinct: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    """Number of distinct comma-separated entries, e.g. ``NVIDIA_VISIBLE_DEVICES: 1``."""

    @model_validator(mode="after")
    def _checks_something(self) -> EnvExpect:
        if not self.vars and not self.distinct:
            raise ValueError("give 'vars' (exact values) or 'distinct' (entry counts)")
        return self


EXPECT_TIMEOUT = 5.0
"""Seconds an ``expect`` step waits for its checks to hold unless its ``within`` says otherwise."""


class Checks(_Model):
    """What an ``expect`` or ``expect_now`` step checks (at least one)."""

    capacity: dict[str, int] | None = None
    allocatable: dict[str, int] | None = None
    resources_absent: list[str] | None = None
    labels: dict[str, str | None] | None = None
    env: EnvExpect | None = None
    checkpoint_pods: list[str] | None = None
    same_devices: list[str] | None = Field(None, min_length=2)
    serving: list[str] | None = None

    @model_validator(mode="after")
    def _checks_something(self) -> Checks:
        checks = (
            self.capacity,
            self.allocatable,
            self.resources_absent,
            self.labels,
            self.env,
            self.checkpoint_pods,
            self.same_devices,
            self.serving,
        )
        if all(c is None for c in checks):
            raise ValueError(
                "give at least one of capacity, allocatable, resources_absent, labels, env, checkpoint_pods, "
                "same_devices, serving"
            )
        return self


class ExpectArgs(Checks):
    """An ``expect`` step: an eventually check, polled until every check holds or ``within`` seconds pass."""

    within: float = Field(EXPECT_TIMEOUT, ge=0, le=60)


# -- one wrapper model per step kind: the YAML step is a mapping with exactly that one key --------
class ExpectStep(_Model):
    expect: ExpectArgs


class ExpectNowStep(_Model):
    """``expect_now``: the checks must hold at once (no waiting): for a state that must already be there."""

    expect_now: Checks


class XidStep(_Model):
    xid: XidArgs


class HealthStep(_Model):
    health: HealthArgs


class FaultStep(_Model):
    fault: FaultArgs


class GpuFaultStep(_Model):
    gpu_fault: GpuFaultArgs


class RecoverStep(_Model):
    recover: RecoverArgs


class AllocateStep(_Model):
    allocate: AllocateArgs


class DeletePodStep(_Model):
    delete_pod: str = Field(min_length=1)


class RestartStep(_Model):
    restart: Literal["kubelet", "plugins"]


class EndStreamsStep(_Model):
    end_streams: str = Field(min_length=1)


class AdvanceClockStep(_Model):
    advance_clock: Seconds


class ReconfigureStep(_Model):
    reconfigure: ReconfigureArgs


class DeleteCheckpointStep(_Model):
    delete_checkpoint: Literal[True]


class WaitStep(_Model):
    """``wait``: sleeps, for time that must pass; to show that nothing happened use ``plugins_looked``."""

    wait: float = Field(ge=0, le=60)


class PluginsLookedStep(_Model):
    """``plugins_looked``: a barrier for "the plugins did nothing": returns once their watch loop (which
    follows the kubelet socket, the input files and failed registrations) has begun and finished a step
    after this one began, so whatever they would do about what came before, they have done."""

    plugins_looked: Literal[True]


Step = (
    ExpectStep
    | ExpectNowStep
    | XidStep
    | HealthStep
    | FaultStep
    | GpuFaultStep
    | RecoverStep
    | AllocateStep
    | DeletePodStep
    | RestartStep
    | EndStreamsStep
    | AdvanceClockStep
    | ReconfigureStep
    | DeleteCheckpointStep
    | WaitStep
    | PluginsLookedStep
)

STEP_KINDS: dict[str, type[Step]] = {
    "expect": ExpectStep,
    "expect_now": ExpectNowStep,
    "xid": XidStep,
    "health": HealthStep,
    "fault": FaultStep,
    "gpu_fault": GpuFaultStep,
    "recover": RecoverStep,
    "allocate": AllocateStep,
    "delete_pod": DeletePodStep,
    "restart": RestartStep,
    "end_streams": EndStreamsStep,
    "advance_clock": AdvanceClockStep,
    "reconfigure": ReconfigureStep,
    "delete_checkpoint": DeleteCheckpointStep,
    "wait": WaitStep,
    "plugins_looked": PluginsLookedStep,
}


def step_kind(step: BaseModel) -> str:
    """A parsed step's kind (its model's one field), for node and cluster scenarios alike."""
    return next(iter(type(step).model_fields))


class ScenarioHeader(_Model):
    name: str = Field(min_length=1)
    issue: str = Field(min_length=1)
    description: str = Field(min_length=1)
    node: NodeModel = Field(default_factory=NodeModel)
    expect_start_error: str | None = Field(None, min_length=1)
    steps: list[Any] = Field(default_factory=list)


@dataclass(frozen=True)
class Scenario:
    path: str
    name: str
    issue: str
    description: str
    node: NodeModel
    expect_start_error: str | None
    steps: tuple[Step, ...]


# -- loading ------------------------------------------------------------------------------------


StepT = TypeVar("StepT", bound=BaseModel)
HeaderT = TypeVar("HeaderT", bound=BaseModel)


def _error(source: str, exc: ValidationError, prefix: tuple[int | str, ...] = ()) -> SpecError:
    """pydantic's report as one line: ``file: steps[3].allocate.pod: message`` (several joined by ``; ``)."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = format_location((*prefix, *err["loc"]))
        parts.append((loc, error_message(err)))
    if len(parts) == 1:
        loc, msg = parts[0]
        return SpecError(source, msg, loc or None)
    return SpecError(source, "; ".join(f"{loc}: {msg}" if loc else msg for loc, msg in parts))


def parse_step_of(source: str, index: int, raw: Any, kinds: Mapping[str, type[StepT]], scenario: str = "") -> StepT:
    """Step ``index`` of a scenario file: a mapping with one key, its kind in ``kinds`` (node scenarios'
    ``STEP_KINDS``, cluster scenarios' own table; ``scenario`` says which in the unknown-kind error)."""
    where = f"steps[{index}]"
    if not isinstance(raw, dict):
        raise SpecError(source, f"a step is a mapping with one key (its kind), found {type(raw).__name__}", where)
    if len(raw) != 1:
        keys = ", ".join(str(k) for k in raw) or "none"
        raise SpecError(source, f"a step has exactly one key (its kind), found {len(raw)}: {keys}", where)
    kind = next(iter(raw))
    model = kinds.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise SpecError(source, f"unknown step kind {kind!r}{scenario}; expected one of: {', '.join(kinds)}", where)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise _error(source, exc, ("steps", index)) from None


def parse_header(data: Any, source: str, header: type[HeaderT]) -> HeaderT:
    """A scenario file's top level (a mapping) validated as ``header``; its steps are parsed one by one after."""
    if not isinstance(data, dict):
        raise SpecError(
            source, f"expected a mapping at the top level of the scenario file, found {type(data).__name__}"
        )
    try:
        return header.model_validate(data)
    except ValidationError as exc:
        raise _error(source, exc) from None


def parse_step(source: str, index: int, raw: Any) -> Step:
    return parse_step_of(source, index, raw, STEP_KINDS)


def _rpc_refusal(rpc: str, face: FaultableRpcs) -> str | None:
    if rpc in face.rpcs:
        return None
    allowed = ", ".join(face.rpcs)
    owner = next((f for f in FACES.values() if rpc in f.rpcs), None)
    if owner is None:
        return f"unknown RPC {rpc!r}; expected one of: {allowed}"
    return f"{rpc!r} is an RPC of {owner.face}, not of {face.face} this scenario drives; expected one of: {allowed}"


def check_fault_rpcs(scenario: Scenario, face: FaultableRpcs) -> None:
    """SpecError naming the first ``fault`` step whose RPC ``face`` does not serve (it could never fire)."""
    for index, step in enumerate(scenario.steps):
        if isinstance(step, FaultStep):
            refusal = _rpc_refusal(step.fault.rpc, face)
            if refusal is not None:
                raise SpecError(scenario.path, refusal, f"steps[{index}].fault.rpc")


def parse_scenario(data: Any, source: str, face: FaultableRpcs | None = DEVICE_PLUGIN_FAULTS) -> Scenario:
    """The scenario in ``data``, validated; its fault steps against ``face`` (the device plugin, which the
    embedded runner drives), or not yet with None (a live daemon's face is known once it answers)."""
    if data is None:
        raise SpecError(source, "scenario file is empty")
    header = parse_header(data, source, ScenarioHeader)
    steps = tuple(parse_step(source, i, raw) for i, raw in enumerate(header.steps))
    if header.expect_start_error is None and not steps:
        raise SpecError(source, "a scenario needs steps, or expect_start_error for a node that must fail", "steps")
    if header.expect_start_error is not None and steps:
        raise SpecError(source, "a node expected to fail at start runs no steps; remove them", "steps")
    scenario = Scenario(
        path=source,
        name=header.name,
        issue=header.issue,
        description=header.description,
        node=header.node,
        expect_start_error=header.expect_start_error,
        steps=steps,
    )
    if face is not None:
        check_fault_rpcs(scenario, face)
    return scenario


def load_scenario(path: str | Path, face: FaultableRpcs | None = DEVICE_PLUGIN_FAULTS) -> Scenario:
    """Read and validate one scenario file (its fault steps against ``face``, as ``parse_scenario``);
    every problem raises a one-line SpecError."""
    source = str(path)
    return parse_scenario(parse_yaml(read_text(path, "scenario file"), source), source, face)
