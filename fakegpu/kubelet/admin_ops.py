"""The kubelet emulator's admin ops (served by ``fakegpu.control.server``, used by ``fakegpu ctl``).

What a person at a standalone node needs and the device plugin API cannot give: run and delete pods,
see which pod holds which device with what the plugins answered (envs, mounts, device nodes, CDI
devices), restart the kubelet, move its clock.

- ``status``: the node's extended resources (capacity, allocatable, in use, plugin registered or gone),
  the registered DRA drivers, the claims the kubelet prepared, and the pods with their devices.
- ``pods``: every pod with, per container, its requests, devices, envs, mounts, device nodes, CDI devices
  and, for a regular container holding devices or claims, ``allocatedResourcesStatus`` as the kubelet writes
  it to the pod's status (KEP-4680); its ResourceClaims with their CDI devices, and the last
  FailedPrepareDynamicResources error.
- ``run-pod`` (name, requests, init_requests, sidecar_requests, claims, namespace, uid): admit a pod;
  refused with the kubelet's status text when the kubelet rejects it. ``claims`` are
  ``NS/NAME/UID=DRIVER[,DRIVER]``; a pod whose claims cannot be prepared yet is answered in
  ``ContainerCreating`` with the error, and the kubelet keeps trying.
- ``delete-pod`` (name, namespace): the pod goes and its devices are free again; claims no pod uses any
  more are unprepared.
- ``restart-kubelet`` (wait): the emulator's restart (sockets removed, checkpoint read, ``kubelet.sock``
  anew); waits up to ``wait`` seconds for the plugins registered before to register again.
- ``advance-clock`` (seconds): move the clock grace periods are measured on.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any, Protocol

from fakegpu.control.op_table import TargetOp, bind_ops
from fakegpu.control.protocol import AdminError, Op
from fakegpu.kubelet.clock import EmulatorClock
from fakegpu.kubelet.device_manager import UNHEALTHY, DeviceManager
from fakegpu.kubelet.dra_manager import DraManager
from fakegpu.kubelet.dra_plugins import DraPluginRegistry
from fakegpu.kubelet.dra_state import ClaimInfo
from fakegpu.kubelet.emulator import PodResult
from fakegpu.kubelet.pod_claims import PodClaim, parse_claim
from fakegpu.kubelet.pod_spec import ContainerSpec, parse_requests
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2
from fakegpu.runtime.eventually import WaitTimeout, eventually
from fakegpu.runtime.kubelet_paths import KubeletPaths

KIND = "kubelet"
"""The ``kind`` of this daemon's status answer."""
MAIN_CONTAINER = "main"
INIT_CONTAINER = "init"
SIDECAR_CONTAINER = "sidecar"


class KubeletAdmin(Protocol):
    """What the kubelet's ops act on: the emulator's parts they show, and the pod and restart actions
    (``KubeletEmulator`` is one)."""

    @property
    def paths(self) -> KubeletPaths: ...
    @property
    def running(self) -> bool: ...
    @property
    def starts(self) -> int: ...
    @property
    def clock(self) -> EmulatorClock: ...
    @property
    def manager(self) -> DeviceManager: ...
    @property
    def dra(self) -> DraManager: ...
    @property
    def dra_plugins(self) -> DraPluginRegistry: ...
    @property
    def pods(self) -> MutableMapping[str, PodResult]: ...
    def capacity(self) -> dict[str, int]: ...
    def allocatable(self) -> dict[str, int]: ...
    def devices(self, resource: str) -> dict[str, str]: ...
    def allocated_resources_status(self, uid: str) -> dict[str, list[dict[str, Any]]]: ...
    async def run_pod(
        self,
        uid: str,
        containers: Mapping[str, Mapping[str, int]],
        *,
        name: str | None = None,
        namespace: str = "default",
        init_containers: Sequence[ContainerSpec] = (),
        claims: Sequence[PodClaim] = (),
    ) -> PodResult: ...
    async def remove_pod(self, uid: str) -> list[ClaimInfo]: ...
    async def restart(self) -> None: ...


def pod_uid(namespace: str, name: str) -> str:
    """A pod's UID when none is given: derived from its namespace and name, so a rerun gives the same."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fakegpu-pod:{namespace}/{name}"))


def _response(response: api_pb2.ContainerAllocateResponse) -> dict[str, Any]:
    return {
        "envs": dict(sorted(response.envs.items())),
        "mounts": [
            {"container_path": m.container_path, "host_path": m.host_path, "read_only": m.read_only}
            for m in response.mounts
        ],
        "device_nodes": [
            {"container_path": d.container_path, "host_path": d.host_path, "permissions": d.permissions}
            for d in response.devices
        ],
        "cdi_devices": [d.name for d in response.cdi_devices],
        "annotations": dict(sorted(response.annotations.items())),
    }


def pod_view(kubelet: KubeletAdmin, pod: PodResult) -> dict[str, Any]:
    """One pod as ``pods`` answers it: the devices are the device manager's (the checkpoint's after a
    restart), the rest what the plugins answered in Allocate, merged per container as CRI merges them."""
    responses = kubelet.manager.container_responses(pod.uid)

    def health(resource: str, device: str) -> str:
        return kubelet.devices(resource).get(device, "")  # "" before its plugin has sent its devices

    containers = []
    specs = pod.specs or tuple(ContainerSpec(name) for name in pod.containers)
    resources_status = kubelet.allocated_resources_status(pod.uid) if pod.uid in kubelet.pods else {}
    for spec in specs:
        devices = kubelet.manager.container_devices(pod.uid, spec.name)
        merged: dict[str, Any] = {"envs": {}, "mounts": [], "device_nodes": [], "cdi_devices": [], "annotations": {}}
        for _resource, response in sorted(responses.get(spec.name, {}).items()):
            part = _response(response)
            merged["envs"].update(part["envs"])
            merged["annotations"].update(part["annotations"])
            for key in ("mounts", "device_nodes", "cdi_devices"):
                merged[key] += part[key]
        view = {
            "name": spec.name,
            "kind": spec.kind,
            "requests": dict(spec.requests),
            "devices": devices,
            "unhealthy": sorted(i for r, ids in devices.items() for i in ids if health(r, i) == UNHEALTHY),
            **merged,
        }
        if spec.name in resources_status:
            view["allocatedResourcesStatus"] = resources_status[spec.name]
        containers.append(view)
    claims = []
    for claim in pod.claims:
        info = kubelet.dra.claims.get(claim.key)
        uid = info.uid if info is not None else claim.uid
        claims.append(
            {
                "namespace": claim.namespace,
                "name": claim.name,
                "uid": uid,
                "drivers": list(info.drivers if info is not None else claim.drivers),
                "prepared": info is not None and info.prepared,
                "cdi_devices": list(pod.cdi_devices.get(uid, [])),
            }
        )
    return {
        "uid": pod.uid,
        "name": pod.name,
        "namespace": pod.namespace,
        "phase": pod.phase,
        "reason": pod.reason,
        "message": pod.message,
        "restored": pod.restored,
        "containers": containers,
        "claims": claims,
        "prepare_error": pod.prepare_error,
        "prepare_attempts": pod.prepare_attempts,
    }


def claim_view(info: ClaimInfo) -> dict[str, Any]:
    """A claim of the kubelet's claim info cache, as ``status`` shows it."""
    return {
        "namespace": info.namespace,
        "name": info.name,
        "uid": info.uid,
        "drivers": list(info.drivers),
        "pods": sorted(info.pod_uids),
        "prepared": info.prepared,
        "cdi_devices": info.cdi_device_ids(),
    }


def _find(kubelet: KubeletAdmin, namespace: str, name: str) -> PodResult | None:
    for pod in kubelet.pods.values():
        if (pod.namespace, pod.name) == (namespace, name) and pod.phase != "Failed":
            return pod
    return None


def _pod_names(kubelet: KubeletAdmin) -> str:
    names = [f"{p.namespace}/{p.name}" for p in kubelet.pods.values() if p.phase != "Failed"]
    return ", ".join(names) or "none"


def _resources(kubelet: KubeletAdmin) -> list[dict[str, Any]]:
    capacity, allocatable = kubelet.capacity(), kubelet.allocatable()
    out = []
    for name, state in sorted(kubelet.manager.resources.items()):
        gone = None if state.stop_time is None else kubelet.clock.now() - state.stop_time
        out.append(
            {
                "name": name,
                "capacity": capacity.get(name, 0),
                "allocatable": allocatable.get(name, 0),
                "in_use": len(kubelet.manager.in_use(name)),
                "registered": state.endpoint is not None,
                "gone_for": gone,
                "devices": [{"id": i, "health": h} for i, h in kubelet.devices(name).items()],
            }
        )
    return out


def _pods_now(kubelet: KubeletAdmin) -> list[dict[str, Any]]:
    return [pod_view(kubelet, p) for p in kubelet.pods.values() if p.phase != "Failed"]


def _registered(kubelet: KubeletAdmin) -> list[str]:
    """The resources whose plugin is registered now."""
    return sorted(n for n, s in kubelet.manager.resources.items() if s.endpoint is not None)


def _registered_again(kubelet: KubeletAdmin, before: list[str]) -> list[str]:
    """Those of ``before`` registered again."""
    now = _registered(kubelet)
    return [n for n in before if n in now]


async def status(kubelet: KubeletAdmin) -> dict[str, Any]:
    return {
        "kind": KIND,
        "root": str(kubelet.paths.root),
        "running": kubelet.running,
        "starts": kubelet.starts,
        "grace_period": kubelet.manager.grace_period,
        "resources": _resources(kubelet),
        "dra_drivers": kubelet.dra_plugins.drivers(),
        "claims": [claim_view(c) for c in kubelet.dra.claims.values()],
        "unprepare_error": kubelet.dra.unprepare_error,
        "pods": _pods_now(kubelet),
    }


async def pods(kubelet: KubeletAdmin) -> list[dict[str, Any]]:
    return _pods_now(kubelet)


async def run_pod(
    kubelet: KubeletAdmin,
    name: str,
    requests: list[str] | None = None,
    init_requests: list[str] | None = None,
    sidecar_requests: list[str] | None = None,
    namespace: str = "default",
    uid: str | None = None,
    claims: list[str] | None = None,
) -> dict[str, Any]:
    """Admit a pod with one app container (``main``) and, when they request anything, one init
    container (``init``) and one sidecar (``sidecar``), started in that order; ``claims`` are
    prepared before they start."""
    try:
        app = parse_requests(requests or [], "requests")
        init = parse_requests(init_requests or [], "init_requests")
        sidecar = parse_requests(sidecar_requests or [], "sidecar_requests")
        pod_claims = [parse_claim(c, "claims") for c in claims or []]
    except ValueError as exc:
        raise AdminError(str(exc)) from None
    existing = _find(kubelet, namespace, name)
    if existing is not None:
        raise AdminError(f"pod {namespace}/{name} already exists (uid {existing.uid}); delete it first")
    init_containers = []
    if init_requests is not None:
        init_containers.append(ContainerSpec(INIT_CONTAINER, init, "init"))
    if sidecar_requests is not None:
        init_containers.append(ContainerSpec(SIDECAR_CONTAINER, sidecar, "sidecar"))
    uid = uid or pod_uid(namespace, name)
    try:
        result = await kubelet.run_pod(
            uid,
            {MAIN_CONTAINER: app},
            name=name,
            namespace=namespace,
            init_containers=init_containers,
            claims=pod_claims,
        )
    except ValueError as exc:
        raise AdminError(str(exc)) from None
    if result.phase == "Failed":
        kubelet.pods.pop(uid, None)  # a rejected pod never ran: the same name may be tried again
        raise AdminError(f"pod {namespace}/{name} was rejected: {result.reason}: {result.message}")
    return pod_view(kubelet, result)


async def delete_pod(kubelet: KubeletAdmin, name: str, namespace: str = "default") -> dict[str, Any]:
    pod = _find(kubelet, namespace, name)
    if pod is None:
        raise AdminError(f"no pod {namespace}/{name} on this kubelet; its pods: {_pod_names(kubelet)}")
    released: dict[str, list[str]] = {}
    for container in pod.containers:
        for resource, ids in kubelet.manager.container_devices(pod.uid, container).items():
            released.setdefault(resource, []).extend(i for i in ids if i not in released.get(resource, []))
    unprepared = await kubelet.remove_pod(pod.uid)
    return {
        "uid": pod.uid,
        "name": name,
        "namespace": namespace,
        "released": released,
        "unprepared": [f"{c.namespace}/{c.name}" for c in unprepared],
        "unprepare_error": kubelet.dra.unprepare_error,
    }


async def restart_kubelet(kubelet: KubeletAdmin, wait: float = 10.0) -> dict[str, Any]:
    """Restart as a kubelet does; answer once the plugins registered before are registered again
    (and have sent their devices), or after ``wait`` seconds with the ones still missing."""
    if wait < 0:
        raise AdminError(f"wait must be 0 or more seconds, found {wait:g}")
    before = _registered(kubelet)
    updates = kubelet.manager.updates
    await kubelet.restart()

    # Each plugin registered again sends its devices at least once (a ListAndWatch update).
    with contextlib.suppress(WaitTimeout):  # time is up: the answer names the plugins still missing
        await eventually(
            lambda: (
                len(_registered_again(kubelet, before)) >= len(before)
                and kubelet.manager.updates >= updates + len(before)
            ),
            "the plugins to register again",
            wait,
            assertions_mean_not_yet=False,
        )
    registered = _registered_again(kubelet, before)
    return {
        "starts": kubelet.starts,
        "registered": registered,
        "missing": [n for n in before if n not in registered],
        "pods": len(_pods_now(kubelet)),
    }


async def advance_clock(kubelet: KubeletAdmin, seconds: float) -> dict[str, Any]:
    try:
        kubelet.clock.advance(seconds)
    except ValueError as exc:
        raise AdminError(f"{exc}: seconds must be 0 or more, found {seconds:g}") from None
    return {"advanced": seconds, "capacity": kubelet.capacity(), "allocatable": kubelet.allocatable()}


KUBELET_OPS: Mapping[str, TargetOp[KubeletAdmin]] = {
    "status": status,
    "pods": pods,
    "run-pod": run_pod,
    "delete-pod": delete_pod,
    "restart-kubelet": restart_kubelet,
    "advance-clock": advance_clock,
}
"""Every op of the kubelet emulator's admin socket."""


def kubelet_ops(kubelet: KubeletAdmin) -> dict[str, Op]:
    """The ops the kubelet emulator serves (``fakegpu kubelet --admin-socket``)."""
    return bind_ops(kubelet, KUBELET_OPS)
