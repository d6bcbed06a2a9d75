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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from fakegpu.kubelet.checkpoint import CHECKPOINT_NAME, CheckpointData, read
from fakegpu.kubelet.clock import EmulatorClock
from fakegpu.kubelet.device_manager import ENDPOINT_STOP_GRACE_PERIOD, AdmissionError, DeviceManager
from fakegpu.kubelet.plugin_endpoint import PluginEndpoint
from fakegpu.kubelet.plugin_watcher import PluginHandler, PluginWatcher, RegistrationRejected
from fakegpu.kubelet.pod_records import PODS_DIR, PodRecord, check_uid, read_records, remove_record, write_record
from fakegpu.kubelet.pod_resources_service import (
    POD_RESOURCES_DIR,
    POD_RESOURCES_SOCKET,
    ActivePod,
    PodResourcesService,
)
from fakegpu.kubelet.pod_spec import ContainerSpec, check_containers, effective_requests
from fakegpu.kubelet.registration_service import KubeletRegistrationService, validate_registration
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from fakegpu.kubeletapi.pluginregistration.v1 import api_pb2 as reg_pb2
from fakegpu.kubeletapi.podresources.v1 import api_pb2_grpc as podresources_grpc
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.runtime.socket_server import SocketServer
from fakegpu.runtime.unix_socket import check_socket_path

log = logging.getLogger(__name__)


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
    ) -> None:
        self.paths = KubeletPaths(root)
        self.clock = clock or EmulatorClock()
        self.manager = DeviceManager(self.paths.device_plugins / CHECKPOINT_NAME, self.clock, grace_period)
        self.registration = KubeletRegistrationService(self.manager, self.paths.device_plugins)
        self.watch_plugins_registry = watch_plugins_registry
        self.watcher = PluginWatcher(self.paths.plugins_registry, {"DevicePlugin": self._device_plugin_handler()})
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
        self._restore_pods()
        server = grpc.aio.server()
        api_pb2_grpc.add_RegistrationServicer_to_server(self.registration, server)
        server.add_insecure_port(f"unix://{self.paths.kubelet_socket}")
        await server.start()
        self._server = server
        await self._pod_resources_server.start()
        if self.watch_plugins_registry:
            await self.watcher.start()
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
            )
        if restored:
            log.info("kubelet emulator restored %d pod(s) from %s", restored, self.paths.root / PODS_DIR)

    async def stop(self) -> None:
        """SIGTERM: plugins see their ListAndWatch streams end; kubelet.sock goes away."""
        await self.watcher.stop()
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
        """Poll ``predicate`` until true; returns the seconds it took; raises TimeoutError naming ``what``."""
        start = time.monotonic()
        while not predicate():
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
            await asyncio.sleep(0.005)
        return time.monotonic() - start

    # -- pods --------------------------------------------------------------------------------
    async def run_pod(
        self,
        uid: str,
        containers: Mapping[str, Mapping[str, int]],
        *,
        name: str | None = None,
        namespace: str = "default",
        annotations: Mapping[str, str] | None = None,
        init_containers: Sequence[ContainerSpec] = (),
    ) -> PodResult:
        """Admit a pod: the node's allocatable check, then per container and resource the device
        manager's allocation, then PreStartContainer as each container starts. ``containers`` are the
        app containers; ``init_containers`` (kind ``init`` or ``sidecar``) start before them, in order,
        and a finished init container's devices are reused by the containers after it, as the kubelet
        does. ``name`` defaults to the UID; name, namespace and annotations are what the pod resources
        API and the DCGM exporter see."""
        check_uid(uid)
        if uid in self.pods and self.pods[uid].admitted:
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
        try:
            for spec in specs:
                await self.manager.pre_start(uid, spec.name)
        except AdmissionError as exc:
            result.reason, result.message = exc.reason, exc.message
            self._admitted(result)
            return result
        result.phase = "Running"
        self._admitted(result)
        return result

    def _admitted(self, result: PodResult) -> None:
        """Keep an admitted pod, in memory and in its record, so it survives a restart."""
        self.pods[result.uid] = result
        self._admissions += 1
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
                self._admissions,
            ),
        )

    def delete_pod(self, uid: str) -> None:
        self.pods.pop(uid, None)
        self.manager.release_pod(uid)
        with contextlib.suppress(ValueError):  # a UID that names no directory has no record
            check_uid(uid)
            remove_record(self.paths.root, uid)

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
