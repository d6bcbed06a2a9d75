"""The kubelet emulator: the kubelet's side of the device plugin protocol over real Unix sockets.

Start and restart behave like a kubelet's device manager: every socket in ``device-plugins/`` is
removed (the checkpoint file is kept), allocations are restored from the checkpoint, registered
resources come back with capacity 0 until their plugin registers again, and ``kubelet.sock`` is
created anew. Pods are admitted the way the kubelet admits them, with its status texts.

Pods outlive a restart of the emulator, in the process or of the process: their devices come back from
the checkpoint, their specs from the emulator's pod records (``pod_records``), as a real kubelet's come
back from the checkpoint and the API server.

Like a kubelet it also serves the pod resources API on ``pod-resources/kubelet.sock``, answered from the
allocations it made, so a monitoring agent (dcgm-exporter, fakegpu's own exporter) can tell which pod
holds which device. Pods have a name, a namespace and annotations for that; tests that only pass a UID
get the UID as name in namespace ``default``.

Its DRA face (``dra_plugins``, ``dra_manager``): plugins of type ``DRAPlugin`` register through
``plugins_registry/``; a pod run with ``claims`` has them prepared before its containers start. While a
claim cannot be prepared the pod stays ``Pending`` with its containers waiting in ``ContainerCreating``,
the error kept on the pod as the kubelet's ``FailedPrepareDynamicResources`` event, and the kubelet tries
again with backoff until it works or the pod is deleted. A claim no pod uses any more is unprepared.

Device health reaches the pods as a v1.36 kubelet shows it (KEP-4680): each regular container's
``allocatedResourcesStatus`` (:meth:`KubeletEmulator.allocated_resources_status`, ``resource_health``) from the
device plugins' ListAndWatch health and the DRA drivers' ``NodeWatchResources`` streams (``dra_health``);
:meth:`KubeletEmulator.subscribe` tells a listener when it may have changed (``pod_status.PodStatusWriter``
writes it to an API server).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import stat
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from lightkube import AsyncClient

from fakegpu.kubelet.checkpoint import CHECKPOINT_NAME, CheckpointData, read
from fakegpu.kubelet.clock import EmulatorClock
from fakegpu.kubelet.container_claims import ContainerClaim
from fakegpu.kubelet.device_manager import ENDPOINT_STOP_GRACE_PERIOD, AdmissionError, DeviceManager
from fakegpu.kubelet.dra_health import HealthInfoCache, HealthStreams
from fakegpu.kubelet.dra_manager import Backoff, DraManager, PrepareFailed, UnprepareFailed
from fakegpu.kubelet.dra_plugins import PLUGIN_TYPE as DRA_PLUGIN_TYPE
from fakegpu.kubelet.dra_plugins import DraPluginRegistry
from fakegpu.kubelet.dra_state import DRA_STATE_NAME, ClaimInfo
from fakegpu.kubelet.plugin_endpoint import PluginEndpoint
from fakegpu.kubelet.plugin_watcher import PluginHandler, PluginWatcher, RegistrationRejected
from fakegpu.kubelet.pod_claims import PodClaim, pod_claim
from fakegpu.kubelet.pod_records import PODS_DIR, PodRecord, check_uid, read_records, remove_record, write_record
from fakegpu.kubelet.pod_resources_service import (
    POD_RESOURCES_DIR,
    POD_RESOURCES_SOCKET,
    ActivePod,
    PodResourcesService,
)
from fakegpu.kubelet.pod_spec import ContainerSpec, check_containers, effective_requests
from fakegpu.kubelet.registration_service import KubeletRegistrationService, validate_registration
from fakegpu.kubelet.resource_health import ResourceStatus, device_plugin_status, dra_status
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2 as reg_pb2
from fakegpu.kubeletapi.podresources.v1 import api_pb2_grpc as podresources_grpc
from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.runtime.eventually import WaitTimeout, eventually
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.runtime.socket_server import SocketServer
from fakegpu.runtime.unix_socket import check_socket_path
from fakegpu.sharing.change_listeners import ChangeListeners

log = logging.getLogger(__name__)

CONTAINER_CREATING = "ContainerCreating"
"""The waiting reason of a pod's containers while its claims are not prepared."""
FAILED_PREPARE_EVENT = "FailedPrepareDynamicResources"
"""The kubelet's event reason; its message is ``Failed to prepare dynamic resources: <error>``."""
WAIT_INTERVAL = 0.005
"""Seconds between two looks of ``wait_for``: short, since callers time what they wait for."""


@dataclass
class PodResult:
    uid: str
    phase: str
    reason: str = ""
    message: str = ""
    responses: dict[str, dict[str, api_pb2.ContainerAllocateResponse]] = field(default_factory=dict)
    name: str = ""
    """metadata.name; the UID when the caller gave none."""
    namespace: str = "default"
    annotations: dict[str, str] = field(default_factory=dict)
    containers: tuple[str, ...] = ()
    """Every container of the pod spec, in order (init containers and sidecars first), also those that
    request no devices."""
    specs: tuple[ContainerSpec, ...] = ()
    """The containers with their kind and requests."""
    restored: bool = False
    """Known from the pod records and the checkpoint after a restart, not admitted by this process."""
    claims: tuple[PodClaim, ...] = ()
    """The pod's ResourceClaims."""
    cdi_devices: dict[str, list[str]] = field(default_factory=dict)
    """CDI device IDs per claim UID, once its drivers prepared it."""
    container_claims: dict[str, tuple[ContainerClaim, ...]] | None = None
    """Per container, the claims (and requests) its ``resources.claims`` names; None when the caller gave
    none, and then every container gets every claim."""
    prepare_error: str = ""
    """The last FailedPrepareDynamicResources event's message ("" once the claims are prepared)."""
    prepare_attempts: int = 0
    claim_entries: dict[str, str] | None = None
    """The pod's claim names -> ResourceClaim names as ``status.resourceClaimStatuses`` has them (claims made
    from templates); None when the caller gave none, and then each claim stands for itself (its entry in
    ``allocatedResourcesStatus`` is ``claim:<ResourceClaim name>``)."""
    images: dict[str, str] = field(default_factory=dict)
    """Each container's image, for the container statuses written to an API server."""

    @property
    def admitted(self) -> bool:
        return self.phase == "Running"

    def env(self, container: str) -> dict[str, str]:
        """The environment the device plugins gave the container (later resources win, as in CRI)."""
        out: dict[str, str] = {}
        for response in self.responses.get(container, {}).values():
            out.update(response.envs)
        return out


class KubeletEmulator:
    def __init__(
        self,
        root: Path,
        *,
        grace_period: float = ENDPOINT_STOP_GRACE_PERIOD,
        clock: EmulatorClock | None = None,
        watch_plugins_registry: bool = True,
        api_client: AsyncClient | None = None,
        prepare_backoff: Backoff | None = None,
    ) -> None:
        """``api_client``: read each pod claim from the API server (its UID, drivers, reservedFor) as a
        kubelet does, for claims given without drivers. ``prepare_backoff``: the delays between attempts
        to prepare a pod's claims or unprepare claims (0.2 s doubling to 5 s by default)."""
        self.paths = KubeletPaths(root)
        self.clock = clock or EmulatorClock()
        self.manager = DeviceManager(self.paths.device_plugins / CHECKPOINT_NAME, self.clock, grace_period)
        self.registration = KubeletRegistrationService(self.manager, self.paths.device_plugins)
        self.watch_plugins_registry = watch_plugins_registry
        self.dra_plugins = DraPluginRegistry()
        self.dra = DraManager(self.paths.root / DRA_STATE_NAME, self.dra_plugins, api_client)
        self.dra_health = HealthInfoCache()
        """The DRA drivers' device health, from their ``NodeWatchResources`` streams."""
        self.health_streams = HealthStreams(self.dra_health, self._notify)
        self._listeners = ChangeListeners()
        self.manager.on_change = self._notify
        self.prepare_backoff = prepare_backoff or Backoff()
        self._prepare_tasks: dict[str, asyncio.Task[None]] = {}
        self._unprepare_task: asyncio.Task[None] | None = None
        self._retries: set[asyncio.Task[None]] = set()
        """Every prepare and unprepare retry task until it is done, cancelled ones included."""
        self._orders: dict[str, int] = {}
        self.watcher = PluginWatcher(
            self.paths.plugins_registry,
            {"DevicePlugin": self._device_plugin_handler(), DRA_PLUGIN_TYPE: self._dra_plugin_handler()},
        )
        self._server: grpc.aio.Server | None = None
        self.starts = 0
        self.pods: dict[str, PodResult] = {}
        self._admissions = 0
        self.pod_resources = PodResourcesService(self.active_pods, self.manager)
        self._pod_resources_server = SocketServer(
            self.pod_resources_socket,
            lambda server: podresources_grpc.add_PodResourcesListerServicer_to_server(self.pod_resources, server),
        )

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def pod_resources_socket(self) -> Path:
        """``<root>/pod-resources/kubelet.sock``, where dcgm-exporter finds the pod resources API."""
        return self.paths.root / POD_RESOURCES_DIR / POD_RESOURCES_SOCKET

    async def start(self) -> None:
        dp_dir = self.paths.device_plugins
        dp_dir.mkdir(parents=True, exist_ok=True)
        check_socket_path(self.paths.kubelet_socket)
        self._cleanup_plugin_directory()
        self.manager.restore()
        self.dra.restore()
        self._restore_pods()
        server = grpc.aio.server()
        api_pb2_grpc.add_RegistrationServicer_to_server(self.registration, server)
        server.add_insecure_port(f"unix://{self.paths.kubelet_socket}")
        await server.start()
        self._server = server
        await self._pod_resources_server.start()
        if self.watch_plugins_registry:
            await self.watcher.start()
        for pod in self.pods.values():
            if pod.phase == "Pending" and pod.reason == CONTAINER_CREATING:
                self._retry_prepare(pod)
        if self.dra.orphans():
            self._kick_unprepare()
        self.starts += 1
        log.info("kubelet emulator started in %s", self.paths.root)

    def _cleanup_plugin_directory(self) -> None:
        """CleanupPluginDirectory: remove every socket except the checkpoint; keep other files and dirs."""
        for entry in self.paths.device_plugins.iterdir():
            if entry.name == CHECKPOINT_NAME:
                continue
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(entry.lstat().st_mode):
                    entry.unlink()

    def _restore_pods(self) -> None:
        """Pods this emulator ran before a restart of its process, from their records; their devices are
        the checkpoint's (the manager has just read it). Pods still in memory stay as they are."""
        restored = 0
        for record in read_records(self.paths.root):
            self._admissions = max(self._admissions, record.order)
            if record.uid in self.pods:
                continue
            restored += 1
            self._orders[record.uid] = record.order
            self.pods[record.uid] = PodResult(
                record.uid,
                record.phase,
                record.reason,
                record.message,
                self.manager.container_responses(record.uid),
                name=record.name,
                namespace=record.namespace,
                annotations=dict(record.annotations),
                containers=tuple(c.name for c in record.containers),
                specs=record.containers,
                restored=True,
                claims=record.claims,
                cdi_devices=self.dra.cdi_devices(record.claims),
                claim_entries=record.claim_entries,
            )
        if restored:
            log.info("kubelet emulator restored %d pod(s) from %s", restored, self.paths.root / PODS_DIR)

    async def stop(self) -> None:
        """SIGTERM: plugins see their ListAndWatch streams end; kubelet.sock goes away."""
        await self.watcher.stop()
        tasks, self._prepare_tasks = list(self._prepare_tasks.values()), {}
        await cancel_and_wait([*tasks, self._unprepare_task])
        self._unprepare_task = None
        await self.health_streams.stop_all()
        self.dra_health.drivers.clear()
        self.dra_plugins.clear()
        await self.manager.close_all()
        await self._pod_resources_server.stop()
        server, self._server = self._server, None
        if server is not None:
            await server.stop(0.2)
        self.paths.kubelet_socket.unlink(missing_ok=True)

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def __aenter__(self) -> KubeletEmulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- plugins_registry --------------------------------------------------------------------
    def _device_plugin_handler(self) -> PluginHandler:
        async def register(info: reg_pb2.PluginInfo, endpoint: Path) -> None:
            version = next((v for v in info.supported_versions if v == "v1beta1"), "")
            problem = validate_registration(version or ",".join(info.supported_versions), info.name)
            if problem is not None:
                raise RegistrationRejected(problem)
            plugin = PluginEndpoint(info.name, endpoint)
            try:
                await plugin.connect()
            except grpc.aio.AioRpcError as exc:
                raise RegistrationRejected(f"failed to dial device plugin: {exc.details()}") from None
            await self.manager.connect(info.name, plugin)

        async def deregister(info: reg_pb2.PluginInfo) -> None:
            state = self.manager.resources.get(info.name)
            if state is not None and state.endpoint is not None:
                await state.endpoint.close()
            self.manager.disconnect(info.name)

        return PluginHandler(register, deregister)

    def _dra_plugin_handler(self) -> PluginHandler:
        """The DRA registry's handler, plus the plugin's health stream (when it lists the health service)."""
        registry = self.dra_plugins.handler()

        async def register(info: reg_pb2.PluginInfo, endpoint: Path) -> None:
            await registry.register(info, endpoint)
            self.health_streams.start(info.name, endpoint, list(info.supported_versions))

        async def deregister(info: reg_pb2.PluginInfo) -> None:
            await registry.deregister(info)
            await self.health_streams.stop(info.name, Path(info.endpoint))

        return PluginHandler(register, deregister)

    # -- health --------------------------------------------------------------------------------
    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` (no arguments, no await) after anything a pod's status shows may have changed: a
        device plugin's device health, a DRA driver's health report or stream end, a pod admitted, started or
        deleted. Returns a function that unsubscribes. The kubelet's ``resourceupdates`` channel, in short."""
        return self._listeners.subscribe(listener)

    def _notify(self) -> None:
        self._listeners.announce()

    def allocated_resources_status(self, uid: str) -> dict[str, list[ResourceStatus]]:
        """Per regular container of the pod, its ``allocatedResourcesStatus`` now (containers without any are
        left out); see ``fakegpu.kubelet.resource_health``."""
        pod = self.pods[uid]
        entries = pod.claim_entries if pod.claim_entries is not None else {c.name: c.name for c in pod.claims}
        claims = {name: info for (ns, name), info in self.dra.claims.items() if ns == pod.namespace}
        out: dict[str, list[ResourceStatus]] = {}
        for spec in pod.specs:
            if spec.kind != "app":
                continue
            if pod.container_claims is None:
                refs: tuple[ContainerClaim, ...] = tuple(ContainerClaim(c.name) for c in pod.claims)
            else:
                refs = pod.container_claims.get(spec.name, ())
            status = device_plugin_status(self.manager, uid, spec.name) + dra_status(
                refs, entries, claims, self.dra_health
            )
            if status:
                out[spec.name] = status
        return out

    # -- node status -------------------------------------------------------------------------
    def capacity(self) -> dict[str, int]:
        return self.manager.capacity()

    def allocatable(self) -> dict[str, int]:
        return self.manager.allocatable()

    def checkpoint(self) -> CheckpointData | None:
        return read(self.manager.checkpoint_path)

    def devices(self, resource: str) -> dict[str, str]:
        state = self.manager.resources.get(resource)
        return {} if state is None else {i: d.health for i, d in sorted(state.devices.items())}

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> float:
        """Poll ``predicate`` until true (through the one polling helper, ``fakegpu.runtime.eventually``);
        returns the seconds it took; raises TimeoutError naming ``what`` and the last value seen."""
        start = time.monotonic()
        try:
            await eventually(predicate, what, timeout, interval=WAIT_INTERVAL, assertions_mean_not_yet=False)
        except WaitTimeout as exc:
            raise TimeoutError(str(exc)) from None
        return time.monotonic() - start

    # -- pods --------------------------------------------------------------------------------
    def container_cdi_devices(self, uid: str, container: str) -> list[str]:
        """The CDI device IDs the runtime gets for one container of a pod: those of the claims and requests
        it names, or of every prepared claim when the pod was run without ``container_claims``."""
        pod = self.pods[uid]
        if pod.container_claims is None:
            return [i for ids in pod.cdi_devices.values() for i in ids]
        return self.dra.container_cdi_devices(pod.namespace, pod.container_claims.get(container, ()))

    async def run_pod(
        self,
        uid: str,
        containers: Mapping[str, Mapping[str, int]],
        *,
        name: str | None = None,
        namespace: str = "default",
        annotations: Mapping[str, str] | None = None,
        init_containers: Sequence[ContainerSpec] = (),
        claims: Sequence[PodClaim | tuple[str, ...]] = (),
        container_claims: Mapping[str, Sequence[ContainerClaim]] | None = None,
        claim_entries: Mapping[str, str] | None = None,
        images: Mapping[str, str] | None = None,
    ) -> PodResult:
        """Admit a pod: the node's allocatable check, then per container and resource the device
        manager's allocation, then PreStartContainer as each container starts. ``containers`` are the
        app containers; ``init_containers`` (kind ``init`` or ``sidecar``) start before them, in order,
        and a finished init container's devices are reused by the containers after it, as the kubelet
        does. ``name`` defaults to the UID; name, namespace and annotations are what the pod resources
        API and the DCGM exporter see.

        ``claims``: the pod's ResourceClaims, each a :class:`PodClaim` or ``(namespace, name, uid,
        *drivers)``; without drivers the emulator reads the claim from its API client. They are prepared
        after admission, before the containers start: while that fails the pod is returned (and stays)
        ``Pending`` in ``ContainerCreating`` with ``prepare_error``, and is tried again in the background.
        ``container_claims``: per container, the claims of ``claims`` (by name) and requests it uses, as its
        ``resources.claims`` names them (see :meth:`container_cdi_devices`). ``claim_entries``: the pod's claim
        names -> ResourceClaim names (``status.resourceClaimStatuses``), which name the claims' entries in
        ``allocatedResourcesStatus``; ``images``: each container's image, for the statuses written to an API
        server."""
        check_uid(uid)
        pod_claims = tuple(pod_claim(c) for c in claims)
        if len({c.key for c in pod_claims}) != len(pod_claims):
            raise ValueError(f"pod {uid}: a ResourceClaim is listed twice: {[c.key for c in pod_claims]}")
        if self.dra.client is None and any(not c.drivers for c in pod_claims):
            missing = next(c for c in pod_claims if not c.drivers)
            raise ValueError(
                f"claim {missing.namespace}/{missing.name}: name the drivers of its allocation (no API client to "
                "read them from)"
            )
        if uid in self.pods and (self.pods[uid].admitted or uid in self._prepare_tasks):
            return self.pods[uid]
        specs = (
            *(ContainerSpec(c.name, dict(c.requests), c.kind) for c in init_containers),
            *(ContainerSpec(n, dict(r), "app") for n, r in containers.items()),
        )
        check_containers(specs)
        result = PodResult(
            uid,
            "Pending",
            name=uid if name is None else name,
            namespace=namespace,
            annotations=dict(annotations or {}),
            containers=tuple(c.name for c in specs),
            specs=specs,
            claims=pod_claims,
            container_claims=None if container_claims is None else _container_claims(uid, container_claims, pod_claims),
            claim_entries=None if claim_entries is None else dict(claim_entries),
            images=dict(images or {}),
        )
        allocatable = self.allocatable()
        for resource, count in effective_requests(specs).items():
            used = len(self.manager.in_use(resource, exclude_pod=uid))
            have = allocatable.get(resource, 0)
            if count + used > have:
                result.phase = "Failed"
                result.reason = f"OutOf{resource}"
                result.message = (
                    f"Pod was rejected: Node didn't have enough resource: {resource}, requested: {count}, "
                    f"used: {used}, capacity: {have}"
                )
                self.pods[uid] = result
                return result
        reuse: dict[str, set[str]] = {}
        try:
            for spec in specs:
                for resource, count in spec.requests.items():
                    pool = reuse.setdefault(resource, set())
                    response = await self.manager.allocate(uid, spec.name, resource, count, pool)
                    result.responses.setdefault(spec.name, {})[resource] = response
                # devicesToReuse: a finished init container's devices go back to the pod's pool; a
                # container that keeps running (sidecar, app) takes its devices out of it.
                for resource, ids in self.manager.container_devices(uid, spec.name).items():
                    if spec.kind == "init":
                        reuse.setdefault(resource, set()).update(ids)
                    else:
                        reuse.setdefault(resource, set()).difference_update(ids)
        except AdmissionError as exc:
            self.manager.release_pod(uid)
            result.phase, result.reason, result.message = "Failed", exc.reason, f"Pod was rejected: {exc.message}"
            result.responses = {}
            self.pods[uid] = result
            return result
        if pod_claims and not await self._prepare_once(result):
            result.phase, result.reason = "Pending", CONTAINER_CREATING
            self._admitted(result)
            self._retry_prepare(result)
            return result
        await self._start_containers(result)
        self._admitted(result)
        return result

    async def _start_containers(self, result: PodResult) -> None:
        """PreStartContainer as each container starts; Running, or the failing container's reason."""
        try:
            for spec in result.specs:
                await self.manager.pre_start(result.uid, spec.name)
        except AdmissionError as exc:
            result.phase, result.reason, result.message = "Pending", exc.reason, exc.message
            return
        result.phase, result.reason, result.message = "Running", "", ""

    async def _prepare_once(self, result: PodResult) -> bool:
        """One attempt to prepare the pod's claims; True when they are."""
        result.prepare_attempts += 1
        try:
            result.cdi_devices = await self.dra.prepare(result.uid, result.name, result.claims)
        except PrepareFailed as exc:
            result.prepare_error = f"Failed to prepare dynamic resources: {exc}"
            log.warning("pod %s/%s: %s: %s", result.namespace, result.name, FAILED_PREPARE_EVENT, result.prepare_error)
            return False
        result.prepare_error = ""
        return True

    def _retry_prepare(self, result: PodResult) -> None:
        """Try again with backoff until the claims are prepared (then start the containers) or the pod goes."""

        async def retry() -> None:
            for delay in self.prepare_backoff.delays():
                await asyncio.sleep(delay)
                if self.pods.get(result.uid) is not result:
                    return
                if await self._prepare_once(result):
                    await self._start_containers(result)
                    self._write_record(result)
                    self._prepare_tasks.pop(result.uid, None)
                    self._notify()
                    return

        self._prepare_tasks[result.uid] = self._start_retry(retry(), f"prepare-{result.uid}")

    def _kick_unprepare(self) -> None:
        """Unprepare the claims without pods in the background, with backoff until it works."""
        if self._unprepare_task is not None and not self._unprepare_task.done():
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a synchronous caller): the next start unprepares them

        async def unprepare() -> None:
            for delay in self.prepare_backoff.delays():
                try:
                    await self.dra.unprepare_orphans()
                except UnprepareFailed as exc:
                    log.warning("%s; trying again in %gs", exc, delay)
                if not self.dra.orphans():
                    return
                await asyncio.sleep(delay)

        self._unprepare_task = self._start_retry(unprepare(), "unprepare-claims")

    def _start_retry(self, retries: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(retries, name=name)
        self._retries.add(task)
        task.add_done_callback(self._retries.discard)
        return task

    def background_idle(self) -> bool:
        """Whether no retry of a pod's prepare or of an unprepare is running (one cancelled by a pod's
        deletion counts until it has ended): a test's barrier for "the kubelet will not call again"."""
        return all(task.done() for task in self._retries)

    def _admitted(self, result: PodResult) -> None:
        """Keep an admitted pod, in memory and in its record, so it survives a restart."""
        self.pods[result.uid] = result
        self._admissions += 1
        self._orders[result.uid] = self._admissions
        self._write_record(result)
        self._notify()

    def _write_record(self, result: PodResult) -> None:
        write_record(
            self.paths.root,
            PodRecord(
                result.uid,
                result.name,
                result.namespace,
                result.specs,
                result.phase,
                result.reason,
                result.message,
                dict(result.annotations),
                self._orders.get(result.uid, self._admissions),
                result.claims,
                result.claim_entries,
            ),
        )

    def delete_pod(self, uid: str) -> None:
        """The pod goes: its devices are free, its claims lose a user (those left without one are
        unprepared in the background)."""
        self.pods.pop(uid, None)
        self._orders.pop(uid, None)
        task = self._prepare_tasks.pop(uid, None)
        if task is not None:
            task.cancel()
        self.manager.release_pod(uid)
        with contextlib.suppress(ValueError):  # a UID that names no directory has no record
            check_uid(uid)
            remove_record(self.paths.root, uid)
        if self.dra.release_pod(uid):
            self._kick_unprepare()
        self._notify()

    async def remove_pod(self, uid: str) -> list[ClaimInfo]:
        """``delete_pod``, then unprepare the claims no pod uses any more before returning; returns the
        claims unprepared. A claim that fails stays for the background retries (``dra.unprepare_error``)."""
        self.delete_pod(uid)
        task, self._unprepare_task = self._unprepare_task, None
        await cancel_and_wait([task])
        try:
            done = await self.dra.unprepare_orphans()
        except UnprepareFailed:
            done = []
        if self.dra.orphans():
            self._kick_unprepare()
        return done

    def active_pods(self) -> list[ActivePod]:
        """Pods the kubelet runs (admitted, or admitted with a container that failed to start), in
        admission order: what the pod resources API lists. Rejected pods never ran."""
        return [
            ActivePod(uid, pod.name or uid, pod.namespace, pod.containers)
            for uid, pod in self.pods.items()
            if pod.phase != "Failed"
        ]

    def pod_annotations(self, namespace: str, name: str) -> dict[str, str]:
        """Annotations of the active pod ``namespace/name`` ({} when there is none): what a cluster
        daemon reads from the API server, offered here so the DCGM exporter can run against the emulator."""
        for pod in self.pods.values():
            if (pod.namespace, pod.name) == (namespace, name) and pod.phase != "Failed":
                return dict(pod.annotations)
        return {}


def _container_claims(
    uid: str, given: Mapping[str, Sequence[ContainerClaim]], claims: Sequence[PodClaim]
) -> dict[str, tuple[ContainerClaim, ...]]:
    """``given`` checked: every claim a container names is one of the pod's."""
    names = {c.name for c in claims}
    for container, refs in given.items():
        for ref in refs:
            if ref.claim not in names:
                raise ValueError(
                    f"pod {uid}: container {container} names ResourceClaim {ref.claim}, not one of the pod's"
                )
    return {container: tuple(refs) for container, refs in given.items()}
