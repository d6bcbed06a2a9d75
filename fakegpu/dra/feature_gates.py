"""NVIDIA's DRA driver feature gates: names, stages, defaults, the ``--feature-gates`` syntax and its checks.

NVIDIA's gpu-kubelet-plugin takes ``--feature-gates`` (env ``FEATURE_GATES``, which its Helm chart sets from
``featureGates``) in Kubernetes' component-base syntax ``Name=bool,Name=bool``, and validates the
combination at start (``pkg/featuregates/featuregates.go`` in kubernetes-sigs/dra-driver-nvidia-gpu). fakegpu
accepts every gate NVIDIA knows, so a DaemonSet copied from NVIDIA's chart starts; three change what it does:
``TimeSlicingSettings`` and ``MPSSupport`` admit the opaque configs' sharing strategies (both off by default),
and ``DynamicMIG`` is NVIDIA's switch for what ``--mig-mode dynamic`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

Stage = Literal["ALPHA", "BETA", "GA"]

TIME_SLICING_SETTINGS: Final = "TimeSlicingSettings"
MPS_SUPPORT: Final = "MPSSupport"
DYNAMIC_MIG: Final = "DynamicMIG"
PASSTHROUGH_SUPPORT: Final = "PassthroughSupport"
FABRIC_MANAGER_PARTITIONING: Final = "FabricManagerPartitioning"
DRA_LIST_TYPE_ATTRIBUTES: Final = "DRAListTypeAttributes"

KNOWN_GATES: Final[Mapping[str, tuple[bool, Stage]]] = {
    # NVIDIA's own gates and their defaults (pkg/featuregates/featuregates.go).
    TIME_SLICING_SETTINGS: (False, "ALPHA"),
    MPS_SUPPORT: (False, "ALPHA"),
    "IMEXDaemonsWithDNSNames": (True, "BETA"),
    PASSTHROUGH_SUPPORT: (False, "ALPHA"),
    "NVMLDeviceHealthCheck": (False, "ALPHA"),
    DYNAMIC_MIG: (False, "ALPHA"),
    "ComputeDomainCliques": (True, "BETA"),
    "CrashOnNVLinkFabricErrors": (True, "BETA"),
    "DeviceMetadata": (False, "ALPHA"),
    FABRIC_MANAGER_PARTITIONING: (False, "ALPHA"),
    "HostManagedIMEXDaemon": (False, "ALPHA"),
    "NodeLocalFabricIPC": (False, "ALPHA"),
    DRA_LIST_TYPE_ATTRIBUTES: (False, "ALPHA"),
    "ConsumableShares": (False, "ALPHA"),
    "PerNodeGPUConfig": (False, "ALPHA"),
    # component-base's logging gates, registered into the same set (NVIDIA turns ContextualLogging on).
    "ContextualLogging": (True, "BETA"),
    "LoggingAlphaOptions": (False, "ALPHA"),
    "LoggingBetaOptions": (True, "BETA"),
}
_ALL_STAGE: Final[Mapping[str, Stage]] = {"AllAlpha": "ALPHA", "AllBeta": "BETA"}
"""component-base's special gates: set every gate of that stage not set explicitly."""

_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@dataclass(frozen=True)
class FeatureGates:
    """The gates as set on the command line; every other gate keeps NVIDIA's default."""

    explicit: Mapping[str, bool] = field(default_factory=dict)

    def enabled(self, gate: str) -> bool:
        if gate not in KNOWN_GATES:
            raise KeyError(gate)
        if gate in self.explicit:
            return self.explicit[gate]
        default, stage = KNOWN_GATES[gate]
        for special, special_stage in _ALL_STAGE.items():
            if special_stage == stage and special in self.explicit:
                return self.explicit[special]
        return default

    def with_gate(self, gate: str, value: bool) -> FeatureGates:
        return FeatureGates({**self.explicit, gate: value})

    def __str__(self) -> str:
        return ",".join(f"{k}={str(v).lower()}" for k, v in sorted(self.explicit.items()))


def _parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def parse_feature_gates(value: str) -> FeatureGates:
    """component-base's ``featureGate.Set``: comma-separated ``Name=bool``, empty items skipped (NVIDIA's
    chart leaves a trailing comma), the same error texts for a missing or bad value and an unknown gate."""
    settings: dict[str, bool] = {}
    for item in value.split(","):
        if not item:
            continue
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"missing bool value for {name}")
        raw = raw.strip()
        try:
            settings[name] = _parse_bool(raw)
        except ValueError as exc:
            raise ValueError(f"invalid value of {name}={raw}, err: {exc}") from None
    for name in settings:
        if name not in KNOWN_GATES and name not in _ALL_STAGE:
            raise ValueError(f"unrecognized feature gate: {name}")
    return FeatureGates(settings)


_CHECKS: Final = (
    ("requires", "ComputeDomainCliques", "IMEXDaemonsWithDNSNames"),
    ("excludes", DYNAMIC_MIG, PASSTHROUGH_SUPPORT),
    ("excludes", DYNAMIC_MIG, MPS_SUPPORT),
    ("excludes", PASSTHROUGH_SUPPORT, "NVMLDeviceHealthCheck"),
    ("requires", "DeviceMetadata", PASSTHROUGH_SUPPORT),
)
"""NVIDIA's ``ValidateFeatureGates``, in its order."""


def validate_feature_gates(gates: FeatureGates) -> None:
    """NVIDIA's start-up check of the combination, with its texts (``main.go`` prefixes them)."""
    for kind, gate, other in _CHECKS:
        if not gates.enabled(gate):
            continue
        if kind == "requires" and not gates.enabled(other):
            problem = f"feature gate {gate} requires {other} to also be enabled"
        elif kind == "excludes" and gates.enabled(other):
            problem = f"feature gate {gate} is currently mutually exclusive with {other}"
        else:
            continue
        raise ValueError(f"feature gate validation failed: {problem}")
