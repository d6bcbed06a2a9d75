"""The cluster scenario file: a fault driven into a Kubernetes cluster and what the API server must then show.

A node scenario (``fakegpu.testing.scenario.model``) starts its own node; a cluster scenario runs against an
API server, the tests' or a real cluster's (``fakegpu scenario run --kubeconfig PATH FILE``), and only reads
what Kubernetes shows: a pod's ``allocatedResourcesStatus`` (KEP-4680), the taints of a claim's allocated
device in its ResourceSlice (KEP-5055), a ComputeDomain's ``status.status``, Pending pods and a PodGroup's
condition, Node allocatable, the taints across a fleet. A file is a cluster scenario when it has a top-level
``cluster:`` mapping (what the cluster must have, said in ``needs``, and the namespace it works in).

Every mistake is one ``SpecError`` naming the file, the step and the field, as in node scenarios. Durations are
seconds; ``--time-scale`` runs only a fleet fault's ``over`` (the fault schedule) faster: ``wait`` and
``within`` measure the cluster's reaction, which no flag makes faster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fakegpu.sharing.gpu_faults import GpuFault, parse_fault_text
from fakegpu.sharing.yaml_source import parse_yaml, read_text
from fakegpu.testing.scenario.model import parse_header, parse_step_of

_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)
ScenarioSeconds = Annotated[float, Field(ge=0, le=24 * 3600)]
"""A duration in seconds (a fleet fault's ``over`` is divided by ``--time-scale`` when run)."""
Health = Literal["Healthy", "Unhealthy", "Unknown"]
"""KEP-4680's ``ResourceHealthStatus`` values (kubernetes pkg/apis/core/types.go, v1.36)."""
APPLY_KINDS = (
    "Namespace",
    "DeviceClass",
    "ComputeDomain",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "PodGroup",
    "Workload",
    "Job",
    "Pod",
)
"""What an ``apply`` step may hold, created in this order (a pod after the claims and templates it names)."""


class _Model(BaseModel):
    model_config = _STRICT


class ClusterModel(_Model):
    """The cluster the scenario runs against: the namespace of its objects and what it must have."""

    namespace: str = Field("default", min_length=1, max_length=63)
    needs: str = Field("", description="what the cluster must run for this scenario (read by people)")
    admin_socket: str | None = Field(None, min_length=1)
    """The admin socket of the fakegpu daemon on the node ``node_fault`` hits (``--admin-socket`` overrides)."""


# -- steps -------------------------------------------------------------------------------------------
def _documents(text: str) -> list[dict[str, Any]]:
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"not valid YAML{where}: {getattr(exc, 'problem', None) or type(exc).__name__}") from None
    if not docs:
        raise ValueError("no objects to apply")
    for i, doc in enumerate(docs):
        kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        if not isinstance(doc, dict) or kind not in APPLY_KINDS:
            raise ValueError(
                f"document {i + 1}: kind {kind!r} cannot be applied; expected one of {', '.join(APPLY_KINDS)}"
            )
        meta = doc.get("metadata")
        if not isinstance(doc.get("apiVersion"), str) or not isinstance(meta, dict) or not meta.get("name"):
            raise ValueError(f"document {i + 1} ({kind}): needs apiVersion and metadata.name")
    return docs


class ApplyStep(_Model):
    """``apply``: create the objects of a multi-document YAML (kept when they exist), in ``APPLY_KINDS`` order."""

    apply: str = Field(min_length=1)

    @field_validator("apply")
    @classmethod
    def _parses(cls, value: str) -> str:
        _documents(value)
        return value

    @property
    def documents(self) -> list[dict[str, Any]]:
        return _documents(self.apply)


class VirtualNodesStep(_Model):
    """``virtual_nodes``: bring up a fleet with ``fakegpu virtual-nodes`` options (checked before the run)."""

    virtual_nodes: str = Field(min_length=1)


def _fault(value: Any) -> GpuFault:
    if isinstance(value, str):
        return parse_fault_text(value, "fault")
    return GpuFault.model_validate(value)


class FleetTarget(_Model):
    """Which virtual nodes: exactly one of ``nodes``, ``pod`` (the node a pod runs on), ``racks``, ``cliques`` or
    a seeded random ``fraction`` of the fleet's GPUs."""

    nodes: list[str] | None = Field(None, min_length=1)
    pod: str | None = Field(None, min_length=1)
    racks: list[int] | None = Field(None, min_length=1)
    cliques: list[str] | None = Field(None, min_length=1)
    fraction: float | None = Field(None, gt=0, le=1)
    seed: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _one_target(self) -> FleetTarget:
        given = [n for n in ("nodes", "pod", "racks", "cliques", "fraction") if getattr(self, n) is not None]
        if len(given) != 1:
            found = ", ".join(given) or "none"
            raise ValueError(f"give exactly one of nodes, pod, racks, cliques, fraction (found {found})")
        return self


class FleetFaultArgs(FleetTarget):
    gpus: list[Annotated[int, Field(ge=0)]] | None = Field(None, min_length=1)
    """The GPU indices of each targeted node (default all; not with ``fraction``, which picks GPUs)."""
    fault: str
    """The fault in its command-line form (``ecc-uncorrectable count=2``), as ``virtual-nodes --fault`` takes it."""
    over: ScenarioSeconds = 0.0
    """Spread the faults evenly over this many scenario seconds (a rate); 0 strikes them all at once."""

    @field_validator("fault")
    @classmethod
    def _known_fault(cls, value: str) -> str:
        parse_fault_text(value, "fault")
        return value

    @property
    def gpu_fault(self) -> GpuFault:
        return _fault(self.fault)


class FleetFaultStep(_Model):
    fleet_fault: FleetFaultArgs


class FleetRecoverArgs(_Model):
    """Which virtual nodes recover (at most one of ``nodes``, ``pod``, ``racks``, ``cliques``; none: every node)
    and how:
    the cause went away (``thermal``, ``power``, ``fabric``), a GPU reset with the plugins restarted
    (``reset``), or a reboot (``all``), as ``fakegpu virtual-nodes --recover`` takes it."""

    nodes: list[str] | None = Field(None, min_length=1)
    pod: str | None = Field(None, min_length=1)
    racks: list[int] | None = Field(None, min_length=1)
    cliques: list[str] | None = Field(None, min_length=1)
    gpus: list[Annotated[int, Field(ge=0)]] | None = Field(None, min_length=1)
    how: Literal["thermal", "power", "fabric", "reset", "all"] = "reset"

    @model_validator(mode="after")
    def _one_target(self) -> FleetRecoverArgs:
        given = [n for n in ("nodes", "pod", "racks", "cliques") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of nodes, pod, racks, cliques (found {', '.join(given)})")
        if self.gpus is not None and not given:
            raise ValueError("gpus narrows a target: give nodes, pod, racks or cliques with it")
        return self


class FleetRecoverStep(_Model):
    fleet_recover: FleetRecoverArgs


class GpuOf(_Model):
    """The GPU under a running pod: the one behind its ``allocatedResourcesStatus`` entry ``resource``
    (``nvidia.com/gpu``: the device ID's UUID; ``claim:<name>``: the claim's allocated ``gpu-<index>``)."""

    pod: str = Field(min_length=1)
    resource: str = Field(min_length=1)


class NodeFaultArgs(GpuFault):
    """``node_fault``: the ``gpu-fault`` admin op on a real node's fakegpu daemon: the GPU (``gpu``, an index
    or UUID, or ``gpu_of`` a pod) and the fault's fields (``fakegpu.sharing.gpu_faults.GpuFault``)."""

    gpu: int | str | None = None
    gpu_of: GpuOf | None = None
    socket: str | None = Field(None, min_length=1)
    """The daemon's admin socket; else ``--admin-socket`` or the header's ``cluster.admin_socket``."""

    @model_validator(mode="after")
    def _one_gpu(self) -> NodeFaultArgs:
        if (self.gpu is None) == (self.gpu_of is None):
            raise ValueError("give exactly one of gpu (an index or UUID) or gpu_of (a pod and its resource)")
        return self


class NodeFaultStep(_Model):
    node_fault: NodeFaultArgs


class WaitStep(_Model):
    wait: ScenarioSeconds


# -- expectations ------------------------------------------------------------------------------------
class PodHealth(_Model):
    """A container's ``allocatedResourcesStatus`` entry ``resource`` (``nvidia.com/gpu``, or ``claim:<name>``
    for a DRA claim) holds resources and every one has ``health`` (and ``message`` in its message)."""

    pod: str = Field(min_length=1)
    container: str | None = Field(None, min_length=1)
    resource: str = Field(min_length=1)
    health: Health
    message: str | None = Field(None, min_length=1)


class ClaimTaint(_Model):
    """The device allocated to the pod's claim entry ``claim`` carries this taint in its ResourceSlice."""

    pod: str = Field(min_length=1)
    claim: str = Field(min_length=1)
    key: str = Field(min_length=1)
    value: str | None = None
    effect: Literal["NoSchedule", "NoExecute", "None"] | None = None


class ComputeDomainStatus(_Model):
    name: str = Field(min_length=1)
    status: Literal["Ready", "NotReady"]


class PodGroupCondition(_Model):
    """A PodGroup's condition: Kubernetes 1.36's scheduler reports ``PodGroupScheduled`` (``True`` once the gang
    is placed, ``False`` with a reason such as ``Unschedulable`` when it cannot be)."""

    name: str = Field(min_length=1)
    condition: str = Field("PodGroupScheduled", min_length=1)
    status: Literal["True", "False", "Unknown"] = "True"
    reason: str | None = Field(None, min_length=1)


class TaintedDevices(_Model):
    """How many devices of ``driver``'s ResourceSlices (of nodes named ``node_prefix``...) carry a taint
    (with ``key`` when given): a fleet's count."""

    count: int = Field(ge=0)
    key: str | None = Field(None, min_length=1)
    driver: str = Field("gpu.nvidia.com", min_length=1)
    node_prefix: str | None = Field(None, min_length=1)


class NodeAllocatable(_Model):
    """The Node's ``status.allocatable``: of ``node``, or of the node ``pod`` runs on."""

    node: str | None = Field(None, min_length=1)
    pod: str | None = Field(None, min_length=1)
    resources: dict[str, Annotated[int, Field(ge=0)]] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_node(self) -> NodeAllocatable:
        if (self.node is None) == (self.pod is None):
            raise ValueError("give exactly one of node or pod (the node it runs on)")
        return self


EXPECT_TIMEOUT = 30.0
CHECKS = (
    "pod_health",
    "pods_running",
    "pods_pending",
    "claim_taint",
    "compute_domain",
    "pod_group",
    "tainted_devices",
    "node_allocatable",
    "healthy_nodes_unwritten",
)


class ExpectArgs(_Model):
    """What the cluster must show, polled until it all holds or ``within`` seconds pass (never scaled)."""

    within: ScenarioSeconds = EXPECT_TIMEOUT
    pod_health: PodHealth | None = None
    pods_running: list[str] | None = Field(None, min_length=1)
    pods_pending: list[str] | None = Field(None, min_length=1)
    claim_taint: ClaimTaint | None = None
    compute_domain: ComputeDomainStatus | None = None
    pod_group: PodGroupCondition | None = None
    tainted_devices: TaintedDevices | None = None
    node_allocatable: NodeAllocatable | None = None
    healthy_nodes_unwritten: Literal[True] | None = None
    """The fleet's nodes without a fault kept their ResourceSlices as the ``virtual_nodes`` step left them."""

    @model_validator(mode="after")
    def _checks_something(self) -> ExpectArgs:
        if all(getattr(self, name) is None for name in CHECKS):
            raise ValueError(f"give at least one of {', '.join(CHECKS)}")
        return self


class ExpectStep(_Model):
    expect: ExpectArgs


ClusterStep = ApplyStep | VirtualNodesStep | FleetFaultStep | FleetRecoverStep | NodeFaultStep | WaitStep | ExpectStep
CLUSTER_STEP_KINDS: dict[str, type[ClusterStep]] = {
    "apply": ApplyStep,
    "virtual_nodes": VirtualNodesStep,
    "fleet_fault": FleetFaultStep,
    "fleet_recover": FleetRecoverStep,
    "node_fault": NodeFaultStep,
    "wait": WaitStep,
    "expect": ExpectStep,
}


class ClusterHeader(_Model):
    name: str = Field(min_length=1)
    issue: str = Field(min_length=1)
    description: str = Field(min_length=1)
    cluster: ClusterModel
    steps: list[Any] = Field(min_length=1)


@dataclass(frozen=True)
class ClusterScenario:
    path: str
    name: str
    issue: str
    description: str
    cluster: ClusterModel
    steps: tuple[ClusterStep, ...]


def is_cluster_data(data: Any) -> bool:
    """Whether a parsed file is a cluster scenario: a mapping with a top-level ``cluster`` key."""
    return isinstance(data, dict) and "cluster" in data


def parse_cluster_scenario(data: Any, source: str) -> ClusterScenario:
    """The cluster scenario in ``data`` (a parsed file with a ``cluster`` key), validated."""
    header = parse_header(data, source, ClusterHeader)
    steps = tuple(
        parse_step_of(source, i, raw, CLUSTER_STEP_KINDS, " in a cluster scenario")
        for i, raw in enumerate(header.steps)
    )
    return ClusterScenario(source, header.name, header.issue, header.description, header.cluster, steps)


def read_scenario_data(path: str | Path) -> Any:
    """A scenario file's parsed YAML (bad text or YAML: a one-line SpecError)."""
    return parse_yaml(read_text(path, "scenario file"), str(path))


def load_cluster_scenario(path: str | Path) -> ClusterScenario:
    return parse_cluster_scenario(read_scenario_data(path), str(path))
