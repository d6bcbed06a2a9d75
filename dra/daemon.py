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
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import grpc
from lightkube import AsyncClient

from dra.admin_ops import dra_ops
from dra.claim_preparer import ClaimPreparer, LightkubeClaimReader
from dra.health_service import HealthService
from dra.kubelet_plugin import DraKubeletPlugin
from dra.metrics import DraMetrics
from dra.plugin_service import DraPluginV1, DraPluginV1beta1
from dra.prepared_claims import PreparedClaims
from dra.published_health import device_health
from dra.resource_slices import SliceOptions
from dra.slice_publisher import SlicePublisher
from kubeapi.client import client_factory
from kubeapi.pod_annotations import PodAnnotations
from kubeletapi.admin_socket import AdminServer
from kubeletapi.background_tasks import cancel_and_wait
from kubeletapi.dra.v1 import api_pb2_grpc as v1_grpc
from kubeletapi.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from kubeletapi.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from kubeletapi.kubelet_paths import KubeletPaths
from sharing.errors import SpecError
from sharing.health import XidPolicy
from sharing.inputs import InventoryInputs, load_inventory
from sharing.live_inventory import LiveInventory
from telemetry.dcgm.endpoint import DcgmEndpoint
from telemetry.http_endpoint import ListenAddress, MetricsServer
from telemetry.nvidia_smi_files import NvidiaSmiFiles

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DraSettings:
    driver: str = "gpu.nvidia.com"
    mig_mode: Literal["static", "dynamic"] = "static"
    cdi_root: Path = Path("/var/run/cdi")
    kubeconfig: str | None = None
    server_minor: int | None = None
    api_version: str | None = None
    resync_interval: float = 30.0


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
            device_health=lambda: (ok for _, _, ok, _ in device_health(live, settings.driver, settings.mig_mode)),
            prepared_claims=lambda: sum(1 for c in self.preparer.checkpoint.claims() if c.completed),
        )
        options = SliceOptions(
            driver=settings.driver,
            mig_mode=settings.mig_mode,
            server_minor=settings.server_minor or 36,
            api_version=settings.api_version or "resource.k8s.io/v1",
        )
        self.publisher = SlicePublisher(
            self.client,
            live,
            options,
            auto_api_version=settings.api_version is None,
            auto_server_version=settings.server_minor is None,
            resync_interval=settings.resync_interval,
            metrics=self.metrics,
        )
        self.reader = LightkubeClaimReader(self.client, options.api_version)
        self.preparer = ClaimPreparer(
            self.reader,
            live,
            driver=settings.driver,
            mig_mode=settings.mig_mode,
            cdi_root=settings.cdi_root,
            checkpoint=PreparedClaims.in_dir(paths.dra_plugin_dir(settings.driver)),
            metrics=self.metrics,
        )
        self.health = HealthService(live, lambda: device_health(live, settings.driver, settings.mig_mode))
        self.plugin = DraKubeletPlugin(settings.driver, paths, self._add_services)
        self._publish_task: asyncio.Task[None] | None = None

    def _add_services(self, server: grpc.aio.Server) -> None:
        v1_grpc.add_DRAPluginServicer_to_server(DraPluginV1(self.preparer), server)
        v1beta1_grpc.add_DRAPluginServicer_to_server(DraPluginV1beta1(self.preparer), server)
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

    async def start(self) -> None:
        self.settings.cdi_root.mkdir(parents=True, exist_ok=True)
        self.paths.dra_plugin_dir(self.settings.driver).mkdir(parents=True, exist_ok=True)
        self.preparer.recover()
        await self.plugin.start()
        self._publish_task = asyncio.create_task(self._start_publishing(), name="dra-publish")

    async def _start_publishing(self) -> None:
        delay = 0.5
        while True:
            try:
                await self.publisher.start()
                self.reader.api_version = self.publisher.options.api_version
                return
            except Exception as exc:  # the API server may be unreachable or refuse for a while
                log.error("cannot publish ResourceSlices yet: %s; retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    async def wait_published(self, timeout: float = 10.0) -> None:
        if self._publish_task is not None:
            await asyncio.wait_for(asyncio.shield(self._publish_task), timeout)

    async def stop(self) -> None:
        await cancel_and_wait([self._publish_task])
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
    metrics_address: ListenAddress | None = None,
    dcgm_address: ListenAddress | None = None,
    dcgm_virtual_gpus: bool = False,
) -> int:
    """Serve until a stop signal; with ``admin_socket``, also the owner-only admin socket of ``fakegpu ctl``;
    with ``metrics_address``, Prometheus metrics at ``http://ADDRESS/metrics``; with ``dcgm_address``, the
    fake dcgm-exporter, attributing claims through the kubelet's PodResources ``dynamic_resources``."""
    inventory = load_inventory(inputs)
    for warning in inventory.warnings:
        log.warning("%s", warning)
    live = LiveInventory(inventory, XidPolicy.from_env(inputs.env))
    # The fake nvidia-smi the CDI specs mount, written before any claim is prepared and on every change.
    smi_unsubscribe = NvidiaSmiFiles(Path(inputs.nvidia_smi_dir)).follow(live) if inputs.nvidia_smi_dir else None
    driver = DraDriver(live, paths, settings, client_factory(settings.kubeconfig))
    admin = AdminServer(admin_socket, dra_ops(driver)) if admin_socket else None
    metrics_server = MetricsServer(metrics_address, driver.metrics.registry) if metrics_address else None
    dcgm = (
        DcgmEndpoint(
            live,
            paths.root,
            dcgm_address,
            virtual_gpus=dcgm_virtual_gpus,
            dra_device_uuid=driver.prepared_device_uuid,
            annotations=PodAnnotations(client_factory(settings.kubeconfig)),
        )
        if dcgm_address
        else None
    )
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()

    def reload() -> None:
        try:
            live.replace(load_inventory(inputs))
            driver.metrics.reloaded(ok=True)
            log.info("inventory reloaded")
        except SpecError as exc:
            driver.metrics.reloaded(ok=False)
            log.error("reload rejected, still serving the previous inventory: %s", exc)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload)
    try:
        if metrics_server is not None:
            await metrics_server.start()
        if dcgm is not None:
            await dcgm.start()
        if admin is not None:
            await admin.start()
        await driver.start()
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        await driver.stop()
        if admin is not None:
            await admin.stop()
        if metrics_server is not None:
            await metrics_server.stop()
        if dcgm is not None:
            await dcgm.stop()
        if smi_unsubscribe is not None:
            smi_unsubscribe()
    return 0
