"""NVIDIA's DRA driver feature gates: names, stages, defaults, the ``--feature-gates`` syntax and its checks.

NVIDIA's gpu-kubelet-plugin takes ``--feature-gates`` (env ``FEATURE_GATES``, which its Helm chart sets from
``featureGates``) in Kubernetes' component-base syntax ``Name=bool,Name=bool``, and validates the
combination at start (``pkg/featuregates/featuregates.go`` in kubernetes-sigs/dra-driver-nvidia-gpu: v0.4.x
has the first nine driver gates, main adds the rest, ``NodeAllocatableResources`` among them at commit bccebfd).
fakegpu accepts every gate NVIDIA knows, so a DaemonSet
copied from NVIDIA's chart starts; :data:`GATE_EFFECTS` says, gate by gate, what each one changes in fakegpu
(``fakegpu slices --feature-gates`` prints it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from fakegpu.sharing.go_bool import parse_go_bool_text

Stage = Literal["ALPHA", "BETA", "GA"]

TIME_SLICING_SETTINGS: Final = "TimeSlicingSettings"
MPS_SUPPORT: Final = "MPSSupport"
DYNAMIC_MIG: Final = "DynamicMIG"
PASSTHROUGH_SUPPORT: Final = "PassthroughSupport"
FABRIC_MANAGER_PARTITIONING: Final = "FabricManagerPartitioning"
DRA_LIST_TYPE_ATTRIBUTES: Final = "DRAListTypeAttributes"
NVML_DEVICE_HEALTH_CHECK: Final = "NVMLDeviceHealthCheck"

KNOWN_GATES: Final[Mapping[str, tuple[bool, Stage]]] = {
    # NVIDIA's own gates and their defaults (pkg/featuregates/featuregates.go).
    TIME_SLICING_SETTINGS: (False, "ALPHA"),
    MPS_SUPPORT: (False, "ALPHA"),
    "IMEXDaemonsWithDNSNames": (True, "BETA"),
    PASSTHROUGH_SUPPORT: (False, "ALPHA"),
    NVML_DEVICE_HEALTH_CHECK: (False, "ALPHA"),
    DYNAMIC_MIG: (False, "ALPHA"),
    "ComputeDomainCliques": (True, "BETA"),
    "CrashOnNVLinkFabricErrors": (True, "BETA"),
    "DeviceMetadata": (False, "ALPHA"),
    FABRIC_MANAGER_PARTITIONING: (False, "ALPHA"),
    "HostManagedIMEXDaemon": (False, "ALPHA"),
    "NodeLocalFabricIPC": (False, "ALPHA"),
    DRA_LIST_TYPE_ATTRIBUTES: (False, "ALPHA"),
    "ConsumableShares": (False, "ALPHA"),
    "NodeAllocatableResources": (False, "ALPHA"),
    "PerNodeGPUConfig": (False, "ALPHA"),
    # component-base's logging gates, registered into the same set (NVIDIA turns ContextualLogging on).
    "ContextualLogging": (True, "BETA"),
    "LoggingAlphaOptions": (False, "ALPHA"),
    "LoggingBetaOptions": (True, "BETA"),
}
GATE_EFFECTS: Final[Mapping[str, str]] = {
    # One line per gate: what NVIDIA's gate does and what fakegpu does with it. The one table of it; a change
    # that gives a gate behaviour in fakegpu updates its line here.
    TIME_SLICING_SETTINGS: "opaque GpuConfig/MigDeviceConfig with sharing strategy TimeSlicing are admitted "
    "(the container gets NVIDIA_TIME_SLICE_INTERVAL); off, such claims fail with NVIDIA's text",
    MPS_SUPPORT: "opaque configs with sharing strategy MPS are admitted (MPS env and mounts in the CDI spec); "
    "off, such claims fail with NVIDIA's text",
    "IMEXDaemonsWithDNSNames": "the emulated IMEX daemon writes nodes.cfg with the static names "
    "compute-domain-daemon-0000..0017 and hosts lines mapping the clique's members to IPs; off, "
    "nodes.cfg lists the clique's daemon IPs once numNodes joined",
    PASSTHROUGH_SUPPORT: "NVIDIA: GPUs can be bound to vfio-pci and published as vfio devices; fakegpu publishes "
    "no vfio devices: accepted without effect",
    NVML_DEVICE_HEALTH_CHECK: "device health from NVML events: XIDs taint devices gpu.nvidia.com/xid "
    "(NoSchedule, None for non-fatal XIDs), a lost GPU taints every device gpu.nvidia.com/gpu-lost, an "
    "unmonitored GPU gpu.nvidia.com/unmonitored, and the DRAResourceHealth stream is served; off, none of it",
    DYNAMIC_MIG: "every MIG profile at every placement published as partitionable devices with counters, "
    "created at prepare (= --mig-mode dynamic)",
    "ComputeDomainCliques": "each node's IMEX daemon keeps its entry in the ComputeDomainClique "
    "<domain UID>.<clique>, folded into status.nodes by the controller; off, daemons write "
    "status.nodes themselves and readiness is read there only (requires IMEXDaemonsWithDNSNames)",
    "CrashOnNVLinkFabricErrors": "a pending or failed NVLink fabric registration stops the "
    "compute-domain plugin ('... refusing to start'), except a single-node NVSwitch node with "
    "FabricManagerPartitioning; off, such GPUs mean no clique",
    "DeviceMetadata": "NVIDIA: prepared devices get KEP-5304 metadata files in the workload; fakegpu: accepted "
    "without effect (requires PassthroughSupport, as NVIDIA checks)",
    "FabricManagerPartitioning": "full GPUs of an 8-GPU SXM NVSwitch node get gpuModuleID and "
    "partition1/2/4/8 attributes (NVIDIA also activates the partition at prepare; fakegpu checks "
    "nothing there)",
    "HostManagedIMEXDaemon": "unlocks --imex-mode hostManaged: no daemons, no node label, channel "
    "claims ask the host nvidia-imex socket for READY; off, hostManaged is refused with NVIDIA's "
    "text",
    "NodeLocalFabricIPC": "NVIDIA: a single-node IMEX service for ComputeDomains on nodes without an NVLink "
    "clique; fakegpu: accepted without effect",
    "DRAListTypeAttributes": "resource.kubernetes.io/numaNode is published as a one-element ints "
    "list (needs Kubernetes' gate of the same name)",
    "ConsumableShares": "admits --consumable-shares (env CONSUMABLE_SHARES: memory, unlimited or N): every GPU "
    "and MIG device is published with allowMultipleAllocations and NVIDIA's memory request policy (N adds a shares "
    "capacity), and claims with the same config may share a prepared device (MPS refused); alone, no change",
    "NodeAllocatableResources": "NVIDIA: devices carry KEP-5517 nodeAllocatableResources overhead (host memory and "
    "CPU per pod or container) from the --node-allocatable-* flags; fakegpu has none of the flags: accepted "
    "without effect",
    "PerNodeGPUConfig": "NVIDIA: a per-node profile (node label nvidia.com/dra-driver-gpu.config) limits the "
    "advertised device types; fakegpu: accepted without effect",
    "ContextualLogging": "component-base logging gate (NVIDIA turns it on); fakegpu's logs do not change",
    "LoggingAlphaOptions": "component-base logging gate; fakegpu's logs do not change",
    "LoggingBetaOptions": "component-base logging gate; fakegpu's logs do not change",
}
"""What each gate changes, in one line (``fakegpu slices --feature-gates`` prints the lines of the gates given)."""

_ALL_STAGE: Final[Mapping[str, Stage]] = {"AllAlpha": "ALPHA", "AllBeta": "BETA"}
"""component-base's special gates: set every gate of that stage not set explicitly."""


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
            settings[name] = parse_go_bool_text(raw)
        except ValueError as exc:
            raise ValueError(f"invalid value of {name}={raw}, err: {exc}") from None
    for name in settings:
        if name not in KNOWN_GATES and name not in _ALL_STAGE:
            raise ValueError(f"unrecognized feature gate: {name}")
    return FeatureGates(settings)


def gate_lines(given: FeatureGates) -> list[str]:
    """``Name=value: what it changes`` (``off (on: ...)`` for a gate set to false) for every gate ``given``
    sets, in NVIDIA's order of the gate list
    (``AllAlpha`` / ``AllBeta`` stand for each gate of their stage they set)."""
    lines = []
    for gate in KNOWN_GATES:
        default, stage = KNOWN_GATES[gate]
        named = gate in given.explicit or any(
            special in given.explicit for special, s in _ALL_STAGE.items() if s == stage
        )
        if not named:
            continue
        value = given.enabled(gate)
        note = " (the default)" if value == default else ""
        # GATE_EFFECTS says what a gate does when on; a gate set to false says so first, so the line never
        # reads as if the behaviour it describes were in effect.
        effect = GATE_EFFECTS[gate] if value else f"off (on: {GATE_EFFECTS[gate]})"
        lines.append(f"{gate}={str(value).lower()}{note}: {effect}")
    return lines


_CHECKS: Final = (
    ("requires", "ComputeDomainCliques", "IMEXDaemonsWithDNSNames"),
    ("excludes", DYNAMIC_MIG, PASSTHROUGH_SUPPORT),
    ("excludes", DYNAMIC_MIG, MPS_SUPPORT),
    ("excludes", PASSTHROUGH_SUPPORT, NVML_DEVICE_HEALTH_CHECK),
    ("requires", "DeviceMetadata", PASSTHROUGH_SUPPORT),
)
"""NVIDIA's ``ValidateFeatureGates`` on main (commit 0807eed), in its order. v0.4.x also refuses DynamicMIG with
NVMLDeviceHealthCheck (checked between the DynamicMIG/PassthroughSupport and DynamicMIG/MPSSupport pairs);
main dropped that check when health monitoring learnt dynamic MIG devices."""


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
