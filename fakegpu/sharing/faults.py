"""Scripted faults for reproducing bugs: make the next calls of an RPC fail or stall.

:class:`FaultSpec` is the one definition of what a fault does: its fields (type, default, bounds, help),
their checks and the texts that tell what it does. Everything else is derived from it: the admin
``fault`` op takes its fields as request fields, ``fakegpu ctl fault`` as options, a scenario's ``fault:``
step is this mapping plus ``rpc``, and status shows it through its methods. So a new fault parameter is
added here, and applied where a gRPC handler meets the plan (``fakegpu.control.injected_faults``).

Kept with the live inventory so both faces see one plan: a fault injected through the admin socket or
a scenario applies to whichever server answers that RPC. Which RPCs a fault may name is each face's
own list (``DEVICE_PLUGIN_FAULTS``, ``DRA_FAULTS``), checked by whoever plans it (the admin ops, the
scenario loader): the plan is state only. Status codes are gRPC code names (``INVALID_ARGUMENT``), so this
module needs no gRPC import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

STATUS_CODES = (
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)

MAX_DELAY = 3600.0
"""Longest a fault may stall a call, in seconds."""
MAX_AFTER = 10**6
"""Most calls a fault may let pass before it hits."""


@dataclass(frozen=True)
class FromText:
    """How a command line's text becomes a field's value when its type alone does not say it (a status
    code name is accepted in any case)."""

    parse: Callable[[str], Any]


class FaultSpec(BaseModel):
    """What a scripted fault does to each call of an RPC it hits, and to how many calls.

    The field names are the admin ``fault`` op's request fields, ``fakegpu ctl fault``'s options and the
    keys of a scenario's ``fault:`` step; each ``description`` is the option's help.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    times: int = Field(1, description="how many calls")
    code: Annotated[str | None, FromText(str.upper)] = Field(
        None, description="gRPC status code name, e.g. INVALID_ARGUMENT"
    )
    """gRPC status code name to fail with; None only delays."""
    message: str = Field("", description="the status message")
    """The status message; empty for one naming the RPC and the code."""
    delay: float = Field(0.0, description="seconds each call takes first")
    resource: str | None = Field(None, description="only calls for this resource (DRA: driver name)")
    """Only calls for this resource (device plugin) or driver (DRA); None for all."""
    after: int = Field(0, description="let this many calls pass first")
    """Calls (of this RPC and resource) that pass before the fault hits ``times`` calls: "fail after N calls"."""

    @field_validator("times")
    @classmethod
    def _at_least_once(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"times must be at least 1, found {value}")
        return value

    @field_validator("after")
    @classmethod
    def _bounded_after(cls, value: int) -> int:
        if not 0 <= value <= MAX_AFTER:
            raise ValueError(f"after must be between 0 and {MAX_AFTER} calls, found {value}")
        return value

    @field_validator("code")
    @classmethod
    def _known_code(cls, value: str | None) -> str | None:
        if value is not None and value not in STATUS_CODES:
            raise ValueError(f"unknown gRPC status code {value!r}; expected one of: {', '.join(STATUS_CODES)}")
        return value

    @field_validator("delay")
    @classmethod
    def _bounded_delay(cls, value: float) -> float:
        if not 0 <= value <= MAX_DELAY:
            raise ValueError(f"delay must be between 0 and {MAX_DELAY:g} seconds, found {value}")
        return value

    @model_validator(mode="after")
    def _does_something(self) -> FaultSpec:
        if self.code is None and self.delay == 0:
            raise ValueError("a fault needs a 'code' to fail with or a 'delay' in seconds")
        return self

    @classmethod
    def shown(cls, fields: Mapping[str, Any]) -> FaultSpec:
        """The fault a described one (an admin answer, a status entry) was made from, for its texts: the
        keys this model knows, taken as they are (the daemon validated them)."""
        return cls.model_construct(**{name: fields[name] for name in cls.model_fields if name in fields})

    def fields(self) -> dict[str, Any]:
        """This fault's fields by name, in order: what the admin ``fault`` op takes (a scenario step's
        ``rpc`` is not one of them)."""
        return {name: getattr(self, name) for name in FaultSpec.model_fields}

    def status_message(self, method: str) -> str:
        """The message the failing call gets: the given one, or one naming the RPC and the code."""
        return self.message or f"injected fault: {method} fails with {self.code}"

    def effect(self, message: str | None = None, seconds: str = "s") -> str:
        """What it does to each call it hits: ``take 0.5s then fail with INTERNAL: boom`` (``message`` is
        the status message to show, if any; ``seconds`` the unit as the text writes it)."""
        delay = f"take {self.delay:g}{seconds}" if self.delay else ""
        fail = f"fail with {self.code}" + (f": {message}" if message is not None else "") if self.code else ""
        return " then ".join(p for p in (delay, fail) if p)

    def calls(self, method: str, times: int, after: int, the: str = "the ") -> str:
        """Which calls it hits: ``the next 2 Allocate call(s)``, or with calls to pass first ``2 Allocate
        call(s) after the next 3`` (``the`` is the article a text puts before ``next``)."""
        if not after:
            return f"{the}next {times} {method} call(s)"
        return f"{times} {method} call(s) after {the}next {after}"

    def fired(self) -> str:
        """What it did to a call, for the plan's record: ``delayed 0.5s then failed with INTERNAL``."""
        delayed = f"delayed {self.delay}s" if self.delay else ""
        failed = f"failed with {self.code}" if self.code else ""
        return " then ".join(p for p in (delayed, failed) if p)


@dataclass
class PlannedFault:
    """A fault planned for an RPC, how many calls it still lets pass, and how many more it hits."""

    method: str
    spec: FaultSpec
    remaining: int
    passing: int = 0
    """Calls still to pass before it hits (``after``, counted down by every matching call)."""

    def described(self, calls: str) -> dict[str, Any]:
        """As the ``fault`` answer and status show it: its fields, the calls it still hits under the key
        ``calls`` in place of ``times`` and the calls still to pass as ``after``, its message as the call
        gets it, and only when it fails."""
        fields = self.spec.fields()
        fields["times"] = self.remaining
        fields["after"] = self.passing
        fields["message"] = self.spec.status_message(self.method) if self.spec.code else ""
        return {"method": self.method, **{calls if name == "times" else name: v for name, v in fields.items()}}


@dataclass
class FaultPlan:
    faults: list[PlannedFault] = field(default_factory=list)
    fired: list[tuple[str, str]] = field(default_factory=list)
    """(method, what happened) for every fault that fired, for status and scenario checks."""

    def inject(self, method: str, spec: FaultSpec) -> PlannedFault:
        """Plan ``spec`` for ``method`` (an RPC the caller knows its face serves)."""
        fault = PlannedFault(method, spec, spec.times, spec.after)
        self.faults.append(fault)
        return fault

    def take(self, method: str, resource: str | None = None) -> PlannedFault | None:
        """The fault for this call, if any: the oldest one that has let its ``after`` calls pass (each fires
        ``times`` times). Every call counts for the faults still letting calls pass, the one another fault
        hits too: it was made."""
        hit: PlannedFault | None = None
        for fault in list(self.faults):
            if fault.method != method or fault.spec.resource not in (None, resource):
                continue
            if fault.passing > 0:
                fault.passing -= 1
                continue
            if hit is None:
                hit = fault
        if hit is None:
            return None
        hit.remaining -= 1
        if hit.remaining <= 0:
            self.faults.remove(hit)
        self.fired.append((method, hit.spec.fired()))
        return hit

    def clear(self, method: str | None = None) -> int:
        before = len(self.faults)
        self.faults = [f for f in self.faults if method is not None and f.method != method]
        return before - len(self.faults)
