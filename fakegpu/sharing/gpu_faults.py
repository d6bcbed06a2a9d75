"""The GPU faults operators meet, as one model every face reads: what each kind does to a GPU.

A fault is injected on one physical GPU (``fakegpu ctl gpu-fault``, a scenario step, ``fakegpu virtual-nodes
--fault``) and changes two things, both kept by the live inventory (``fakegpu.sharing.live_inventory``):

- the GPU's **condition** (:class:`fakegpu.sharing.gpu_condition.GpuCondition`): ECC counters, retired pages or
  remapped rows, temperature, clocks and their event ("throttle") reasons, power draw, NVLink error counters,
  the NVLink fabric registration, lost / off the bus. nvidia-smi and the DCGM exporter print it;
- the **XIDs** the driver reports for it, in order. They reach NVIDIA's health models as real XIDs do: the
  device plugin marks devices unhealthy unless the XID is ignored (``DP_*``), the DRA driver taints devices
  ``gpu.nvidia.com/xid`` (effect ``None`` for its non-fatal list).

:data:`FAULT_KINDS` says per kind which XIDs come with it, whether the device recovers, and how; the README's
fault table is written from it (a test keeps them equal). "Fail after N calls" is not a kind of its own: any
kind may wait for ``after_calls`` RPCs (Allocate, NodePrepareResources) before it strikes, as NVIDIA's
mock NVML's ``after_calls`` trigger does, and RPC faults (``fakegpu.sharing.faults``) take ``after`` too.

No gRPC or Kubernetes here: the faces turn this into their own outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fakegpu.sharing.bug_modes import OFF_THE_BUS_XID
from fakegpu.sharing.errors import error_message

FaultKind = Literal[
    "xid",
    "off-bus",
    "gpu-lost",
    "ecc-uncorrectable",
    "ecc-correctable",
    "thermal",
    "power",
    "nvlink",
    "fabric",
]
KINDS: Final[tuple[str, ...]] = get_args(FaultKind)

DBE_XID: Final = 48
"""Double Bit ECC Error: an uncorrectable ECC error on GPUs before Ampere (page retirement)."""
ROW_REMAP_EVENT_XID: Final = 63
"""ECC page retirement or row remapping recording event."""
CONTAINED_ECC_XID: Final = 94
"""Contained ECC error (Ampere and later): only the processes using the bad memory are hit."""
UNCONTAINED_ECC_XID: Final = 95
"""Uncontained ECC error (Ampere and later): every process on the GPU is hit; a GPU reset is needed."""
SBE_STORM_XID: Final = 92
"""High single-bit ECC error rate."""
NVLINK_XID: Final = 74
"""NVLink error (a link's errors went past what its recovery can hide)."""

PAGE_RETIREMENT_ARCHITECTURES: Final = frozenset({"Kepler", "Maxwell", "Pascal", "Volta", "Turing"})
"""Boards that retire framebuffer pages; from Ampere on, boards remap rows instead (``nvidia-smi -q``
shows "Retired Pages" on the former, "Remapped Rows" on the latter)."""

Recovery = Literal["clear", "reset", "reboot"]
"""How the real device gets back: ``clear`` when the cause goes away (the temperature drops, the fabric
re-registers), ``reset`` a GPU reset (``nvidia-smi -r``: volatile ECC counters and pending remaps cleared),
``reboot`` only a reboot of the node (the GPU is gone from the bus)."""


@dataclass(frozen=True)
class KindFacts:
    """What a kind does and how the real device recovers from it: the README's fault table."""

    what: str
    xids: str
    """The XIDs the driver reports, as the README shows them (``79``, ``94 (95 uncontained), 63``, ``-``)."""
    recovery: Recovery
    recovery_text: str


FAULT_KINDS: Final[dict[str, KindFacts]] = {
    "xid": KindFacts(
        "an XID event (its class under NVIDIA's lists: fatal, application/non-fatal, or ignored by config)",
        "the given one",
        "reset",
        "a GPU reset clears the cause; NVIDIA's device plugin keeps the devices unhealthy until it restarts",
    ),
    "off-bus": KindFacts(
        "the GPU has fallen off the bus: NVML cannot reach it",
        f"{OFF_THE_BUS_XID}",
        "reboot",
        "none without a reboot (nvidia-smi: GPU is lost. Reboot the system to recover this GPU)",
    ),
    "gpu-lost": KindFacts(
        "NVML returns ERROR_GPU_IS_LOST while waiting for events: the device plugin marks every device of the "
        "node unhealthy, the DRA driver taints every device gpu-lost",
        "-",
        "reboot",
        "none without a reboot",
    ),
    "ecc-uncorrectable": KindFacts(
        "uncorrectable (double-bit) ECC errors; a row is remapped (pending until a reset) or a page retired",
        f"{CONTAINED_ECC_XID} ({UNCONTAINED_ECC_XID} uncontained), {ROW_REMAP_EVENT_XID}; before Ampere "
        f"{DBE_XID}, {ROW_REMAP_EVENT_XID}",
        "reset",
        "a GPU reset clears the volatile counters and applies the pending remap; aggregate counters and "
        "remapped rows stay; device-plugin health stays unhealthy until the plugin restarts",
    ),
    "ecc-correctable": KindFacts(
        "a storm of correctable (single-bit) ECC errors",
        f"{SBE_STORM_XID}",
        "reset",
        "a GPU reset clears the volatile counters; device-plugin health stays unhealthy until the plugin restarts",
    ),
    "thermal": KindFacts(
        "the GPU runs hot: thermal slowdown, clocks cut",
        "-",
        "clear",
        "clocks and temperature come back when it cools (the fault is cleared); health never changed",
    ),
    "power": KindFacts(
        "power excursion: the power cap and the power brake slow the clocks",
        "-",
        "clear",
        "clocks come back when the excursion ends (the fault is cleared); health never changed",
    ),
    "nvlink": KindFacts(
        "NVLink errors on a link (CRC, replay, recovery counters), the link going down",
        f"{NVLINK_XID}",
        "reset",
        "a GPU reset brings the link back; error counters stay; device-plugin health stays unhealthy",
    ),
    "fabric": KindFacts(
        "the GPU's NVLink fabric registration fails (the clique's fabric state): IMEX daemons not ready",
        "-",
        "clear",
        "the fabric re-registers (the fault is cleared): the ComputeDomain turns Ready again",
    ),
}

DEFAULT_THERMAL_C: Final = 92
"""Where a thermal fault puts the GPU: above the slowdown temperatures of NVIDIA's data-centre boards."""
MAX_TEMPERATURE_C: Final = 120
MAX_ERRORS: Final = 10**9
MAX_AFTER_CALLS: Final = 10**6
FABRIC_ERROR_STATUSES: Final = ("ERROR_UNKNOWN", "ERROR_NOT_READY", "ERROR_TIMEOUT", "ERROR_GPU_IS_LOST")
"""NVML return codes the fabric registration may end with (``nvmlGpuFabricInfo_t.status``)."""


class GpuFault(BaseModel):
    """One fault on one physical GPU; the fields are the ``gpu-fault`` op's request fields, ``fakegpu ctl
    gpu-fault``'s options, a scenario step's keys and ``fakegpu virtual-nodes --fault``'s ``key=value`` parts.
    Fields a kind does not use are refused for it (a typo never silently does nothing)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    kind: FaultKind
    xid: int | None = Field(None, ge=1, le=2**32 - 1, description="the XID (kind xid)")
    count: int | None = Field(None, ge=1, le=MAX_ERRORS, description="how many errors (ECC, NVLink kinds)")
    contained: bool = Field(True, description="ecc-uncorrectable on Ampere and later: contained (XID 94) or not (95)")
    temperature: int | None = Field(
        None, ge=0, le=MAX_TEMPERATURE_C, description=f"degrees C (kind thermal, default {DEFAULT_THERMAL_C})"
    )
    watts: float | None = Field(None, gt=0, le=5000, description="power draw in W (kind power, default the limit)")
    link: int | None = Field(None, ge=0, le=17, description="the NVLink that fails (kind nvlink, default 0)")
    status: str | None = Field(
        None, description=f"the fabric registration's NVML result (kind fabric, default {FABRIC_ERROR_STATUSES[0]})"
    )
    after_calls: int = Field(0, ge=0, le=MAX_AFTER_CALLS, description="strike only after this many RPC calls")

    @model_validator(mode="after")
    def _fields_of_kind(self) -> GpuFault:
        used = _FIELDS_OF_KIND[self.kind]
        for name in ("xid", "count", "temperature", "watts", "link", "status"):
            if getattr(self, name) is not None and name not in used:
                takes = ", ".join(used) or "none"
                raise ValueError(f"{name} does not apply to a {self.kind} fault (it takes: {takes})")
        if not self.contained and self.kind != "ecc-uncorrectable":
            raise ValueError(f"contained does not apply to a {self.kind} fault")
        if self.kind == "xid" and self.xid is None:
            raise ValueError("an xid fault needs the XID (xid=N)")
        if self.status is not None and self.status not in FABRIC_ERROR_STATUSES:
            known = ", ".join(FABRIC_ERROR_STATUSES)
            raise ValueError(f"unknown fabric status {self.status!r}; expected one of: {known}")
        return self

    def describe(self) -> str:
        """One line: ``ecc-uncorrectable count=2``."""
        parts: list[str] = [self.kind]
        for name in ("xid", "count", "temperature", "watts", "link", "status"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}")
        if not self.contained:
            parts.append("contained=false")
        if self.after_calls:
            parts.append(f"after_calls={self.after_calls}")
        return " ".join(parts)


_FIELDS_OF_KIND: Final[dict[str, tuple[str, ...]]] = {
    "xid": ("xid",),
    "off-bus": (),
    "gpu-lost": (),
    "ecc-uncorrectable": ("count",),
    "ecc-correctable": ("count",),
    "thermal": ("temperature",),
    "power": ("watts",),
    "nvlink": ("count", "link"),
    "fabric": ("status",),
}


def parse_fault_text(text: str, where: str) -> GpuFault:
    """``KIND[,key=value...]`` or ``KIND key=value ...`` (the command-line form) as a fault; ValueError naming
    ``where`` (the flag or field) and what was expected."""
    words = [w for part in text.replace(",", " ").split() for w in [part.strip()] if w]
    if not words:
        raise ValueError(f"{where}: empty fault; expected KIND[,key=value...] with KIND one of: {', '.join(KINDS)}")
    kind, *pairs = words
    if kind not in KINDS:
        raise ValueError(f"{where}: unknown fault kind {kind!r}; expected one of: {', '.join(KINDS)}")
    fields: dict[str, object] = {"kind": kind}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{where}: expected key=value after the kind, found {pair!r}")
        fields[key.replace("-", "_")] = _value(raw)
    if "uncontained" in fields:  # ctl's --uncontained, in the key=value form: the opposite of contained
        uncontained = fields.pop("uncontained")
        if "contained" in fields or not isinstance(uncontained, bool):
            raise ValueError(f"{where}: uncontained: expected true or false, and not with contained")
        fields["contained"] = not uncontained
    try:
        return GpuFault.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"{where}: {field + ': ' if field else ''}{error_message(err)}") from None


def _value(raw: str) -> object:
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            continue
    return raw
