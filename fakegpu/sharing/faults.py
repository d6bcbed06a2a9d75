"""Scripted faults for reproducing bugs: make the next calls of an RPC fail or stall.

Kept with the live inventory so both faces see one plan: a fault injected through the admin socket or
a scenario applies to whichever server answers that RPC. Which RPCs a fault may name is each face's
own list (``DEVICE_PLUGIN_FAULTS``, ``DRA_FAULTS``), checked by whoever plans it (the admin ops, the
scenario loader): the plan is state only. Status codes are gRPC code names (``INVALID_ARGUMENT``), so this
module needs no gRPC import.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


class FaultError(ValueError):
    """A fault that cannot be injected; the text says which part is wrong."""


@dataclass
class RpcFault:
    method: str
    remaining: int
    code: str | None = None
    """gRPC status code name to fail with; None only delays."""
    message: str = ""
    delay: float = 0.0
    resource: str | None = None
    """Only calls for this resource (device plugin) or driver (DRA); None for all."""


@dataclass
class FaultPlan:
    faults: list[RpcFault] = field(default_factory=list)
    fired: list[tuple[str, str]] = field(default_factory=list)
    """(method, what happened) for every fault that fired, for status and scenario checks."""

    def inject(
        self,
        method: str,
        *,
        times: int = 1,
        code: str | None = None,
        message: str = "",
        delay: float = 0.0,
        resource: str | None = None,
    ) -> RpcFault:
        """Plan a fault for ``method`` (an RPC the caller knows its face serves); FaultError for a bad one."""
        if code is not None and code not in STATUS_CODES:
            raise FaultError(f"unknown gRPC status code {code!r}; expected one of: {', '.join(STATUS_CODES)}")
        if times < 1:
            raise FaultError(f"times must be at least 1, found {times}")
        if not 0 <= delay <= 3600:
            raise FaultError(f"delay must be between 0 and 3600 seconds, found {delay}")
        if code is None and delay == 0:
            raise FaultError("a fault needs a status code to fail with or a delay in seconds")
        fault = RpcFault(method, times, code, message or f"injected fault: {method} fails with {code}", delay, resource)
        self.faults.append(fault)
        return fault

    def take(self, method: str, resource: str | None = None) -> RpcFault | None:
        """The fault for this call, if any (each fault fires ``times`` times, oldest first)."""
        for fault in self.faults:
            if fault.method == method and fault.resource in (None, resource):
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self.faults.remove(fault)
                delayed = f"delayed {fault.delay}s" if fault.delay else ""
                failed = f"failed with {fault.code}" if fault.code else ""
                self.fired.append((method, " then ".join(p for p in (delayed, failed) if p)))
                return fault
        return None

    def clear(self, method: str | None = None) -> int:
        before = len(self.faults)
        self.faults = [f for f in self.faults if method is not None and f.method != method]
        return before - len(self.faults)
