"""The checks of a cluster scenario's ``expect`` step, on the objects as the API server returns them (dicts).

Each check returns the problems it sees (empty: it holds), worded as "expected ..., got ..." so a step that
times out prints what it waited for and what the cluster last showed. The runner fetches the objects; nothing
here talks to a server, so the same check reads the tests' API server and a real cluster alike.

Shapes followed: ``status.containerStatuses[].allocatedResourcesStatus`` (KEP-4680, kubernetes
pkg/apis/core/types.go ``ResourceStatus``/``ResourceHealth`` at v1.36.0), a claim's
``status.allocation.devices.results[]`` and a slice device's ``taints`` (resource.k8s.io/v1, KEP-5055),
NVIDIA's ComputeDomain ``status.status`` (kubernetes-sigs/dra-driver-nvidia-gpu api/nvidia.com/resource/
v1beta1/computedomain.go at commit 61de3f2).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fakegpu.sharing.fault_record import FAULTS_ANNOTATION
from fakegpu.testing.scenario.cluster_model import (
    ClaimTaint,
    ComputeDomainStatus,
    NodeAllocatable,
    PodGroupCondition,
    PodHealth,
    TaintedDevices,
)

JSON = dict[str, Any]
SliceVersions = Mapping[str, tuple[str, ...]]
"""Per node, the resourceVersions of its ResourceSlices (sorted by slice name)."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _status(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("status") or {}


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = _status(pod)
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def resource_health(pod: Mapping[str, Any] | None, container: str | None, resource: str) -> list[JSON]:
    """The ``resources`` of the pod's ``allocatedResourcesStatus`` entry named ``resource`` (of ``container``,
    or of every container)."""
    out: list[JSON] = []
    for status in _containers(pod or {}):
        if container is not None and status.get("name") != container:
            continue
        for entry in status.get("allocatedResourcesStatus") or []:
            if entry.get("name") == resource:
                out.extend(entry.get("resources") or [])
    return out


def check_pod_health(pod: Mapping[str, Any] | None, want: PodHealth) -> list[str]:
    if pod is None:
        return [f"expected pod {want.pod}, got no such pod"]
    got = resource_health(pod, want.container, want.resource)
    shown = ", ".join(
        f"{r.get('resourceID')}: {r.get('health')}" + (f" ({r['message']})" if r.get("message") else "") for r in got
    )
    wanted = f"{want.resource} {want.health}" + (f" with message containing {want.message!r}" if want.message else "")
    if not got:
        names = sorted(
            {str(e.get("name")) for s in _containers(pod) for e in (s.get("allocatedResourcesStatus") or [])}
        )
        return [f"pod {want.pod}: expected {wanted}, got no such allocatedResourcesStatus entry (entries: {names})"]
    bad = [
        r
        for r in got
        if r.get("health") != want.health or (want.message is not None and want.message not in str(r.get("message")))
    ]
    return [f"pod {want.pod}: expected {wanted}, got {shown}"] if bad else []


def gpu_under(pod: Mapping[str, Any], resource: str, claim: Mapping[str, Any] | None) -> str | None:
    """The GPU (an index or UUID, as the ``gpu-fault`` op takes it) behind the pod's ``resource``: a DRA claim's
    first allocated device ``gpu-<index>[-mig-...]``, or the UUID of a device plugin's ``<UUID>[::<replica>]``."""
    if resource.startswith("claim:"):
        for _driver, _pool, device in allocated_devices(claim or {}):
            parts = device.split("-")
            if len(parts) >= 2 and parts[0] == "gpu" and parts[1].isdigit():
                return parts[1]
        return None
    for entry in resource_health(pod, None, resource):
        rid = str(entry.get("resourceID") or "")
        if rid:
            return rid.split("::", 1)[0]
    return None


def pod_phase(pod: Mapping[str, Any] | None) -> str:
    """The pod's phase; a Pending pod the scheduler could not place reads ``Pending (Unschedulable)``: its
    ``PodScheduled`` condition is ``False`` (kubernetes ``pkg/scheduler/schedule_one.go`` ``handleSchedulingFailure``
    at v1.36.0 writes it with reason ``Unschedulable``)."""
    if pod is None:
        return "absent"
    phase = str(_status(pod).get("phase") or "Pending")
    if phase != "Pending":
        return phase
    for condition in _status(pod).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"Pending ({condition.get('reason') or 'not scheduled'})"
    return phase


def check_phases(pods: Mapping[str, Mapping[str, Any] | None], phase: str) -> list[str]:
    """Each pod in ``phase``; ``Pending`` means left Pending by the scheduler (``PodScheduled`` False), not a pod
    no scheduler has looked at yet, nor one bound and waiting for its containers."""
    if phase == "Pending":
        wrong = {name: pod_phase(pod) for name, pod in pods.items() if not pod_phase(pod).startswith("Pending (")}
    else:
        wrong = {name: pod_phase(pod) for name, pod in pods.items() if pod_phase(pod) != phase}
    if not wrong:
        return []
    got = ", ".join(f"{name}: {p}" for name, p in sorted(wrong.items()))
    wanted = "Pending, unschedulable" if phase == "Pending" else phase
    return [f"expected pods {', '.join(sorted(pods))} {wanted}, got {got}"]


def claim_name(pod: Mapping[str, Any], entry: str) -> str | None:
    """The ResourceClaim behind the pod's claim entry: named in the spec, or made from a template (the
    resourceclaim controller records it in ``status.resourceClaimStatuses``)."""
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        if ref.get("name") == entry and ref.get("resourceClaimName"):
            return str(ref["resourceClaimName"])
    for ref in _status(pod).get("resourceClaimStatuses") or []:
        if ref.get("name") == entry and ref.get("resourceClaimName"):
            return str(ref["resourceClaimName"])
    return None


def allocated_devices(claim: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of each allocated device of the claim."""
    results = ((_status(claim).get("allocation") or {}).get("devices") or {}).get("results") or []
    return [(str(r.get("driver")), str(r.get("pool")), str(r.get("device"))) for r in results]


def device_taints(slices: Iterable[Mapping[str, Any]], driver: str, pool: str, device: str) -> list[JSON] | None:
    """The taints of ``device`` in ``pool`` of ``driver`` (None: no slice publishes it)."""
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") != driver or (spec.get("pool") or {}).get("name") != pool:
            continue
        for d in spec.get("devices") or []:
            if d.get("name") == device:
                return list(d.get("taints") or (d.get("basic") or {}).get("taints") or [])
    return None


def _taint_text(t: Mapping[str, Any]) -> str:
    value = f"={t['value']}" if t.get("value") else ""
    return f"{t.get('key')}{value}:{t.get('effect')}"


def _matches(taint: Mapping[str, Any], want: ClaimTaint | TaintedDevices) -> bool:
    if want.key is not None and taint.get("key") != want.key:
        return False
    if isinstance(want, ClaimTaint):
        if want.value is not None and str(taint.get("value")) != want.value:
            return False
        if want.effect is not None and taint.get("effect") != want.effect:
            return False
    return True


def check_claim_taint(
    pod: Mapping[str, Any] | None,
    claim: Mapping[str, Any] | None,
    slices: Sequence[Mapping[str, Any]],
    want: ClaimTaint,
) -> list[str]:
    wanted = f"taint {want.key}" + (f"={want.value}" if want.value else "") + (f":{want.effect}" if want.effect else "")
    if pod is None:
        return [f"expected pod {want.pod}, got no such pod"]
    if claim is None:
        return [f"pod {want.pod}: expected a ResourceClaim for its claim {want.claim!r}, got none"]
    devices = allocated_devices(claim)
    if not devices:
        return [f"claim {_meta(claim).get('name')}: expected an allocated device with {wanted}, got no allocation"]
    problems = []
    for driver, pool, device in devices:
        taints = device_taints(slices, driver, pool, device)
        if taints is None:
            problems.append(f"device {pool}/{device} ({driver}): expected {wanted}, got no slice publishing it")
        elif not any(_matches(t, want) for t in taints):
            got = ", ".join(_taint_text(t) for t in taints) or "no taints"
            problems.append(f"device {pool}/{device} ({driver}): expected {wanted}, got {got}")
    return problems


def check_compute_domain(domain: Mapping[str, Any] | None, want: ComputeDomainStatus) -> list[str]:
    if domain is None:
        return [f"expected ComputeDomain {want.name} {want.status}, got no such ComputeDomain"]
    got = _status(domain).get("status") or "(no status)"
    nodes = ", ".join(f"{n.get('name')}: {n.get('status')}" for n in _status(domain).get("nodes") or [])
    if got == want.status:
        return []
    return [f"expected ComputeDomain {want.name} {want.status}, got {got}" + (f" (nodes: {nodes})" if nodes else "")]


def check_pod_group(group: Mapping[str, Any] | None, want: PodGroupCondition) -> list[str]:
    wanted = f"{want.condition}={want.status}" + (f" ({want.reason})" if want.reason else "")
    if group is None:
        return [f"expected PodGroup {want.name} with {wanted}, got no such PodGroup"]
    conditions = _status(group).get("conditions") or []
    if any(
        c.get("type") == want.condition
        and c.get("status") == want.status
        and (want.reason is None or c.get("reason") == want.reason)
        for c in conditions
    ):
        return []
    got = ", ".join(
        f"{c.get('type')}={c.get('status')}" + (f" ({c['reason']})" if c.get("reason") else "") for c in conditions
    )
    return [f"expected PodGroup {want.name} with {wanted}, got {got or 'no conditions'}"]


def _fleet_slices(slices: Iterable[Mapping[str, Any]], driver: str, prefix: str | None) -> list[Mapping[str, Any]]:
    return [
        s
        for s in slices
        if (s.get("spec") or {}).get("driver") == driver
        and (prefix is None or str((s.get("spec") or {}).get("nodeName") or "").startswith(prefix))
    ]


def tainted_count(slices: Iterable[Mapping[str, Any]], want: TaintedDevices) -> tuple[int, int]:
    """(tainted devices, all devices) of ``want.driver``'s slices of the fleet."""
    tainted = total = 0
    for s in _fleet_slices(slices, want.driver, want.node_prefix):
        for d in (s.get("spec") or {}).get("devices") or []:
            total += 1
            taints = d.get("taints") or (d.get("basic") or {}).get("taints") or []
            tainted += any(_matches(t, want) for t in taints)
    return tainted, total


def check_tainted_devices(slices: Sequence[Mapping[str, Any]], want: TaintedDevices) -> list[str]:
    tainted, total = tainted_count(slices, want)
    if tainted == want.count:
        return []
    what = f"taint {want.key}" if want.key else "a taint"
    return [f"expected {want.count} device(s) of {want.driver} with {what}, got {tainted} of {total}"]


def check_node_allocatable(node: Mapping[str, Any] | None, name: str, want: NodeAllocatable) -> list[str]:
    if node is None:
        return [f"expected Node {name or '(the pod is on no node)'}, got no such Node"]
    allocatable = _status(node).get("allocatable") or {}
    got = {k: allocatable.get(k) for k in want.resources}
    wanted = {k: str(v) for k, v in want.resources.items()}
    if {k: str(v) if v is not None else None for k, v in got.items()} == wanted:
        return []
    return [f"Node {name}: expected allocatable {wanted}, got {got}"]


def slice_versions(slices: Iterable[Mapping[str, Any]], nodes: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Per node of ``nodes``, the resourceVersions of its slices in name order (what "never written" compares)."""
    wanted = set(nodes)
    found: dict[str, list[tuple[str, str]]] = {n: [] for n in wanted}
    for s in slices:
        node = str((s.get("spec") or {}).get("nodeName") or "")
        if node in wanted:
            found[node].append((str(_meta(s).get("name")), str(_meta(s).get("resourceVersion"))))
    return {n: tuple(rv for _, rv in sorted(pairs)) for n, pairs in found.items()}


def faulted(node: Mapping[str, Any]) -> bool:
    return bool((_meta(node).get("annotations") or {}).get(FAULTS_ANNOTATION))


def check_unwritten(
    nodes: Mapping[str, Mapping[str, Any] | None], slices: Sequence[Mapping[str, Any]], before: SliceVersions
) -> list[str]:
    """The fleet's nodes without a fault record kept the slices ``before`` holds for them."""
    if not before:
        return ["expected a fleet brought up by a virtual_nodes step, got none"]
    healthy = [n for n, obj in nodes.items() if obj is not None and not faulted(obj)]
    now = slice_versions(slices, healthy)
    written = sorted(n for n in healthy if now[n] != before.get(n))
    if not written:
        return []
    shown = ", ".join(written[:5]) + (f" and {len(written) - 5} more" if len(written) > 5 else "")
    return [f"expected no writes to the {len(healthy)} healthy node(s), got slices rewritten on {shown}"]
