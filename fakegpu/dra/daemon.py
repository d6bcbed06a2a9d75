"""``fakegpu dra``: publish the node's ResourceSlices and serve the kubelet's DRA plugin API.

Publishing starts at once and does not wait for the kubelet; the kubelet plugin serves its sockets
whether or not the API server is reachable (claims then fail with a clear error until it is).
SIGHUP or a changed input file reloads the inventory (a bad one is reported and the running one
keeps serving); SIGINT/SIGTERM remove both sockets and stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import grpc
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from fakegpu.control.server import AdminServer
from fakegpu.dra.admin_ops import dra_ops
from fakegpu.dra.claim_reader import CLAIM_KINDS, LightkubeClaimReader
from fakegpu.dra.compute_domain.kubelet_plugin import ComputeDomainPlugin, ComputeDomainSettings
from fakegpu.dra.consumable_shares import OFF, ConsumableShares
from fakegpu.dra.feature_gates import NVML_DEVICE_HEALTH_CHECK, FeatureGates
from fakegpu.dra.gpu_prepare import GpuClaimPreparer
from fakegpu.dra.health_service import HealthService
from fakegpu.dra.health_taints import published_taints
from fakegpu.dra.kubelet_plugin import HEALTH_SERVICE, SUPPORTED_SERVICES, DraKubeletPlugin
from fakegpu.dra.metrics import DraMetrics
from fakegpu.dra.plugin_service import DraPluginV1, DraPluginV1beta1
from fakegpu.dra.prepared_claims import PreparedClaim, PreparedClaims
from fakegpu.dra.published_health import device_health
from fakegpu.dra.resource_slices import SliceOptions
from fakegpu.dra.slice_publisher import SlicePublisher, start_when_reachable
from fakegpu.kube.client import client_factory
from fakegpu.kube.node_events import DRA_COMPONENT, NodeEventRecorder, NodeFaultEvents
from fakegpu.kube.pod_annotations import CachedLookups, PodAnnotations
from fakegpu.kubeletapi.dra.v1 import api_pb2_grpc as v1_grpc
from fakegpu.kubeletapi.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from fakegpu.kubeletapi.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.runtime.boot_id import BOOT_ID_PATH
from fakegpu.runtime.daemon_lifecycle import DaemonLifecycle
from fakegpu.runtime.directories import ensure_dir
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.health import XidPolicy
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.dcgm.attribution import DeviceHolder, DraDevice
from fakegpu.telemetry.health_endpoint import Readiness
from fakegpu.telemetry.nvidia_smi_files import NvidiaSmiFiles
from fakegpu.telemetry.telemetry_settings import TelemetrySettings

FIRST_PUBLISH_RETRY = 0.5
"""A driver that starts before its API server is reachable tries again soon, then backs off."""

log = logging.getLogger(__name__)


CLAIM_TTL = 10.0
"""How long a claim's ``status.reservedFor`` is trusted before it is read again (shared claims gain pods)."""
CLAIM_DEADLINE = 1.0
"""Total time the claim lookups of one scrape may take; the pods' annotation lookups come after them, within
their own 2 s, so a scrape stays well inside Prometheus's 10 s timeout whatever the API server does."""


def reserved_pods(claim: Mapping[str, Any]) -> tuple[str, ...]:
    """The pods a claim is reserved for: ``status.reservedFor`` entries of core ``pods``, in order."""
    status = claim.get("status") or {}
    out: list[str] = []
    for consumer in status.get("reservedFor") or ():
        if consumer.get("resource") == "pods" and not consumer.get("apiGroup") and consumer.get("name"):
            out.append(str(consumer["name"]))
    return tuple(out)


class PreparedClaimHolders:
    """The DCGM exporter's fallback attribution from the claims this driver prepared.

    The kubelet lists DRA devices in PodResources ``dynamic_resources`` only from Kubernetes 1.34 (feature
    gate ``KubeletPodResourcesDynamicResources``). For every prepared claim the kubelet's answer does not
    name, the claim's devices are held by the pods in its ``status.reservedFor`` (read through the API
    server, cached ``CLAIM_TTL`` seconds, concurrently under one deadline, failures backing off and keeping
    the last answer), in the claim's namespace, with an empty container (the claim does not say which
    container uses it). A claim whose pods are not known (yet) still holds its devices, without a pod.
    """

    def __init__(
        self,
        driver: str,
        claims: Callable[[], Iterable[PreparedClaim]],
        read_claim: Callable[[str, str], Awaitable[Mapping[str, Any]]],
        *,
        ttl: float = CLAIM_TTL,
        deadline: float = CLAIM_DEADLINE,
    ) -> None:
        self.driver = driver
        self.claims = claims
        self.read_claim = read_claim
        self.lookups: CachedLookups[tuple[str, str, str], tuple[str, ...]] = CachedLookups(
            self._pods,
            what="ResourceClaim lookups for DCGM attribution",
            name=lambda key: f"claim {key[0]}/{key[1]}",
            ttl=ttl,
            deadline=deadline,
        )

    async def _pods(self, key: tuple[str, str, str]) -> tuple[str, ...]:
        namespace, name, uid = key
        try:
            claim = await self.read_claim(namespace, name)
        except ApiError as exc:
            if exc.status.code == 404:
                return ()  # deleted while prepared: the kubelet unprepares it soon
            raise
        if str((claim.get("metadata") or {}).get("uid", "")) != uid:
            return ()  # replaced by another claim of the same name: not the one prepared
        return reserved_pods(claim)

    async def __call__(self, listed: list[DeviceHolder]) -> list[DeviceHolder]:
        named = {(h.dra.claim_namespace, h.dra.claim_name) for h in listed if h.dra is not None}
        try:
            prepared = [
                c
                for c in self.claims()
                if c.completed and c.driver == self.driver and c.devices and (c.namespace, c.name) not in named
            ]
        except (ValueError, OSError):  # an unusable checkpoint: nothing to add (the preparer reports it)
            prepared = []
        await self.lookups.prefetch((c.namespace, c.name, c.uid) for c in prepared)
        out: list[DeviceHolder] = []
        for claim in prepared:
            pods = self.lookups.get((claim.namespace, claim.name, claim.uid)) or ("",)
            for pod in pods:
                for result in claim.devices:
                    dra = DraDevice(claim.name, claim.namespace, claim.driver, result.pool, result.device)
                    out.append(DeviceHolder(result.uuid, claim.namespace, pod, "", dra))
        return out


@dataclass(frozen=True)
class DraSettings:
    driver: str = "gpu.nvidia.com"
    mig_mode: Literal["static", "dynamic"] = "static"
    cdi_root: Path = Path("/var/run/cdi")
    kubeconfig: str | None = None
    server_minor: int | None = None
    api_version: str | None = None
    resync_interval: float = 30.0
    feature_gates: FeatureGates = field(default_factory=FeatureGates)
    """NVIDIA's driver feature gates (``--feature-gates``); TimeSlicingSettings and MPSSupport admit the
    opaque configs' sharing strategies, DynamicMIG goes with ``mig_mode="dynamic"``, NVMLDeviceHealthCheck
    publishes health taints and serves the health stream."""
    consumable_shares: ConsumableShares = OFF
    """NVIDIA's ``--consumable-shares`` (needs the ConsumableShares gate): shared devices in the slices, and
    claims sharing a device in NodePrepareResources (``fakegpu.dra.consumable_shares``)."""
    compute_domains: ComputeDomainSettings | None = None
    """``--compute-domains``: also run NVIDIA's compute-domain kubelet plugin (``compute-domain.nvidia.com``)."""
    boot_id_file: Path = BOOT_ID_PATH
    """``--boot-id-file``: the node's boot ID; prepared claims of an earlier boot are forgotten at start (by the
    GPU plugin and the compute-domain plugin alike)."""


class DraDriver:
    """The whole DRA face in one object: publisher, kubelet plugin, preparer and health stream."""

    def __init__(
        self,
        live: LiveInventory,
        paths: KubeletPaths,
        settings: DraSettings,
        client_factory: Callable[[], AsyncClient],
        reload_inventory: Callable[[], object] | None = None,
    ) -> None:
        self.live = live
        self.paths = paths
        self.settings = settings
        self.client = client_factory()
        self.metrics = DraMetrics(
            device_health=lambda: (
                h != "Unhealthy" for _, _, h, _ in device_health(live, settings.driver, settings.mig_mode)
            ),
            prepared_claims=lambda: sum(1 for c in self.preparer.checkpoint.claims() if c.completed),
        )
        options = SliceOptions(
            driver=settings.driver,
            mig_mode=settings.mig_mode,
            server_minor=settings.server_minor or 36,
            api_version=settings.api_version or "resource.k8s.io/v1",
            shares=settings.consumable_shares,
            feature_gates=settings.feature_gates,
        )
        self.publisher = SlicePublisher(
            self.client,
            live,
            options,
            auto_api_version=settings.api_version is None,
            auto_server_version=settings.server_minor is None,
            resync_interval=settings.resync_interval,
            metrics=self.metrics,
            health=lambda: published_taints(live),
        )
        self.reader = LightkubeClaimReader(self.client, options.api_version)
        self.preparer = GpuClaimPreparer(
            self.reader,
            live,
            driver=settings.driver,
            mig_mode=settings.mig_mode,
            cdi_root=settings.cdi_root,
            checkpoint=PreparedClaims.in_dir(paths.dra_plugin_dir(settings.driver)),
            metrics=self.metrics,
            gates=settings.feature_gates,
            shares=settings.consumable_shares,
            boot_id_path=settings.boot_id_file,
        )
        self.health = HealthService(live, lambda: device_health(live, settings.driver, settings.mig_mode))
        services = SUPPORTED_SERVICES if self.watches_health else [s for s in SUPPORTED_SERVICES if s != HEALTH_SERVICE]
        self.plugin = DraKubeletPlugin(settings.driver, paths, self._add_services, services=services)
        # The kubelet's NotifyRegistrationStatus is the registration: count what it says.
        self.plugin.registration_service.on_status = self.metrics.registration_status
        self._publish_task: asyncio.Task[None] | None = None
        self._publish_error = ""
        self.fault_events = NodeFaultEvents(
            live,
            NodeEventRecorder(
                self.client, live.inventory.node.name, DRA_COMPONENT, node_uid=lambda: self.publisher.node_uid
            ),
        )
        """GPU faults and recoveries as Events on the Node (``fakegpu.kube.node_events``)."""
        self.compute_domains = (
            ComputeDomainPlugin(
                live,
                paths,
                self.client,
                cdi_root=settings.cdi_root,
                settings=settings.compute_domains,
                gates=settings.feature_gates,
                api_version=settings.api_version,
                server_minor=settings.server_minor,
                resync_interval=settings.resync_interval,
                boot_id_path=settings.boot_id_file,
            )
            if settings.compute_domains is not None
            else None
        )

    @property
    def watches_health(self) -> bool:
        """NVIDIA's ``NVMLDeviceHealthCheck``: health taints and the health service (not advertised without it)."""
        return self.settings.feature_gates.enabled(NVML_DEVICE_HEALTH_CHECK)

    @property
    def published(self) -> bool:
        """The ResourceSlices were published once (later changes are republished in the background)."""
        task = self._publish_task
        return task is not None and task.done() and not task.cancelled() and task.exception() is None

    def not_ready(self) -> str | None:
        """Why the scheduler cannot use this node's devices yet (one line), or ``None``: the ``/readyz`` answer.

        Ready once the ResourceSlices are published and the kubelet confirmed the plugin's registration with
        NotifyRegistrationStatus (``plugin_registered``); not ready again while a re-served registration
        socket waits for the kubelet's word (``DraKubeletPlugin``)."""
        missing: list[str] = []
        if not self.published:
            node = self.live.inventory.node.name
            error = f" (last error: {self._publish_error})" if self._publish_error else ""
            missing.append(f"ResourceSlices for node {node} not published yet{error}")
        service = self.plugin.registration_service
        if service.registered is None:
            missing.append(f"the kubelet has not registered {self.settings.driver} yet (no NotifyRegistrationStatus)")
        elif not service.registered:
            missing.append(f"the kubelet refused to register {self.settings.driver}: {service.error}")
        if self.compute_domains is not None:
            missing += self.compute_domains.not_ready()
        return "; ".join(missing) or None

    def _add_services(self, server: grpc.aio.Server) -> None:
        v1_grpc.add_DRAPluginServicer_to_server(DraPluginV1(self.preparer), server)
        v1beta1_grpc.add_DRAPluginServicer_to_server(DraPluginV1beta1(self.preparer), server)
        if self.watches_health:
            health_grpc.add_DRAResourceHealthServicer_to_server(self.health, server)

    def prepared_device_uuid(self, driver: str, pool: str, device: str) -> str | None:
        """The GPU or MIG UUID behind a device this driver prepared (for the DCGM exporter's attribution)."""
        if driver != self.settings.driver:
            return None
        for claim in self.preparer.checkpoint.claims():
            for result in claim.devices:
                if (result.pool, result.device) == (pool, device):
                    return result.uuid
        return None

    async def read_claim(self, namespace: str, name: str) -> Mapping[str, Any]:
        """A ResourceClaim as a dict, in the resource.k8s.io version the publisher settled on."""
        kind = CLAIM_KINDS[self.publisher.options.api_version]
        claim = await self.client.get(kind, name, namespace=namespace)
        data: dict[str, Any] = claim.to_dict()
        return data

    def prepared_claim_holders(self) -> PreparedClaimHolders:
        """The DCGM exporter's attribution fallback from this driver's prepared claims."""
        return PreparedClaimHolders(self.settings.driver, self.preparer.checkpoint.claims, self.read_claim)

    async def start(self) -> None:
        ensure_dir(self.settings.cdi_root)
        ensure_dir(self.paths.dra_plugin_dir(self.settings.driver))
        self.preparer.recover()
        await self.plugin.start()
        self.fault_events.start()
        self._publish_task = asyncio.create_task(self._start_publishing(), name="dra-publish")
        if self.compute_domains is not None:
            await self.compute_domains.start()

    async def _start_publishing(self) -> None:
        await start_when_reachable(self.publisher, self._publish_failed, FIRST_PUBLISH_RETRY)
        self.reader.api_version = self.publisher.options.api_version

    def _publish_failed(self, error: str) -> None:
        self._publish_error = error

    async def wait_published(self, timeout: float = 10.0) -> None:
        if self._publish_task is not None:
            await asyncio.wait_for(asyncio.shield(self._publish_task), timeout)

    async def stop(self) -> None:
        if self.compute_domains is not None:
            await self.compute_domains.stop()
        await cancel_and_wait([self._publish_task])
        await self.fault_events.stop()
        await self.publisher.stop()
        self.health.stop_streams()
        await self.plugin.stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.client.close(), 2.0)


async def run_dra_daemon(
    inputs: InventoryInputs,
    paths: KubeletPaths,
    settings: DraSettings,
    stop: asyncio.Event | None = None,
    admin_socket: Path | None = None,
    telemetry: TelemetrySettings | None = None,
) -> int:
    """Serve until a stop signal; with ``admin_socket``, also the owner-only admin socket of ``fakegpu ctl``;
    with ``telemetry``, Prometheus metrics and/or the fake dcgm-exporter, attributing claims through the
    kubelet's PodResources ``dynamic_resources``, else to the pods their ``status.reservedFor`` names, and/or
    the kubelet's probes (``DraDriver.not_ready``)."""
    telemetry = telemetry or TelemetrySettings()
    inventory = load_inventory(inputs)
    for warning in inventory.warnings:
        log.warning("%s", warning)
    policy = XidPolicy.for_dra_driver(inputs.env)
    for warning in policy.warnings:
        log.warning("%s", warning)
    live = LiveInventory(inventory, policy)
    readiness = Readiness("starting")
    async with DaemonLifecycle(stop) as daemon:
        await daemon.serve_first(telemetry.health(readiness))
        if inputs.nvidia_smi_dir:
            # The fake nvidia-smi the CDI specs mount, written before any claim is prepared and on every change.
            daemon.cleanup(
                NvidiaSmiFiles(Path(inputs.nvidia_smi_dir), dynamic_mig=settings.mig_mode == "dynamic").follow(live)
            )
        make_client = client_factory(settings.kubeconfig)
        driver = DraDriver(live, paths, settings, make_client)
        readiness.follow(driver.not_ready)
        admin = AdminServer(admin_socket, dra_ops(driver)) if admin_socket else None

        def reload() -> None:
            try:
                live.replace(load_inventory(inputs))
                driver.metrics.reloaded(ok=True)
                log.info("inventory reloaded")
            except SpecError as exc:
                driver.metrics.reloaded(ok=False)
                log.error("reload rejected, still serving the previous inventory: %s", exc)

        daemon.on_reload(reload)
        await daemon.serve(
            driver,
            admin=admin,
            endpoints=telemetry.endpoints(
                driver.metrics.registry,
                live,
                paths.root,
                annotations=lambda: PodAnnotations(make_client),
                dra_device_uuid=driver.prepared_device_uuid,
                fallback=driver.prepared_claim_holders(),
            ),
        )
        await daemon.wait()
    return 0
