"""The compute-domain kubelet plugin (``compute-domain.nvidia.com``), run next to the GPU plugin.

NVIDIA ships two kubelet plugins in one DaemonSet pod (``gpu-kubelet-plugin`` and
``compute-domain-kubelet-plugin``); fakegpu runs the second in the GPU driver's process
(``fakegpu dra --compute-domains``) so both read one inventory and one health state. Like the GPU plugin
it has its own DRA socket and registration socket, its own ResourceSlice (one pool named after the node,
``channel-0`` and ``daemon``, ``fakegpu.dra.compute_domain.devices``), its own checkpoint in
``<plugins dir>/compute-domain.nvidia.com/``, and it serves DRAPlugin v1 and v1beta1 (no health stream:
NVIDIA's compute-domain plugin has none). It also stands in for the node's IMEX daemon
(``fakegpu.dra.compute_domain.daemon_emulation``).

Like NVIDIA's plugin it reads the node's clique when it starts and refuses to start on an NVLink fabric
error (gate CrashOnNVLinkFabricErrors, ``fakegpu.dra.compute_domain.fabric_clique``): the ``FabricError``
ends ``fakegpu dra`` with NVIDIA's ``error creating driver: ...`` text.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import grpc
from lightkube import AsyncClient

from fakegpu.dra.claim_reader import LightkubeClaimReader
from fakegpu.dra.compute_domain.cdi_edits import write_base_spec
from fakegpu.dra.compute_domain.daemon_emulation import DEFAULT_START_DELAY, DaemonGates, ImexDaemonEmulation
from fakegpu.dra.compute_domain.devices import COMPUTE_DOMAIN_DRIVER, compute_domain_slice_spec
from fakegpu.dra.compute_domain.domain_api import DomainApi
from fakegpu.dra.compute_domain.domain_prepare import DOMAINS_DIR, ComputeDomainPreparer
from fakegpu.dra.compute_domain.fabric_clique import FabricError, FabricGates
from fakegpu.dra.compute_domain.host_imex import (
    DEFAULT_HOST_SOCKET,
    DRIVER_MANAGED,
    HOST_MANAGED,
    ISOLATION_DOMAIN,
    HostImexDaemon,
    validate_imex_config,
)
from fakegpu.dra.compute_domain.node_clique import REFRESH_INTERVAL, NodeClique
from fakegpu.dra.compute_domain.resources import DRIVER_NAMESPACE
from fakegpu.dra.feature_gates import FeatureGates
from fakegpu.dra.kubelet_plugin import DraKubeletPlugin
from fakegpu.dra.plugin_service import DraPluginV1, DraPluginV1beta1
from fakegpu.dra.prepared_claims import PreparedClaims
from fakegpu.dra.resource_slices import SliceOptions
from fakegpu.dra.slice_publisher import SlicePublisher, start_when_reachable
from fakegpu.kubeletapi.dra.v1 import api_pb2_grpc as v1_grpc
from fakegpu.kubeletapi.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.runtime.directories import ensure_dir
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.sharing.node import Node

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = DRIVER_NAMESPACE
SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


@dataclass(frozen=True)
class ComputeDomainSettings:
    namespace: str = DEFAULT_NAMESPACE
    """The driver's namespace (``--namespace``): where the daemons' ComputeDomainCliques are."""
    start_delay: float = DEFAULT_START_DELAY
    """``--imex-daemon-start-delay``: seconds from the node's label to its emulated daemon being Ready."""
    gpu_clique_label: bool = False
    """``--gpu-clique-label-enabled`` (NVIDIA's flag, off by default): write ``nvidia.com/gpu.clique``."""
    clique_refresh_interval: float = REFRESH_INTERVAL
    """Seconds between two reads of the node's clique (NVIDIA's 10 minutes)."""
    imex_mode: str = DRIVER_MANAGED
    """``--imex-mode``: ``driverManaged`` (daemons per domain) or ``hostManaged`` (gate HostManagedIMEXDaemon)."""
    imex_isolation: str = ISOLATION_DOMAIN
    """``--imex-isolation``: ``domain`` (``channel`` is refused, as NVIDIA refuses it)."""
    imex_host_socket: Path = DEFAULT_HOST_SOCKET
    """``--imex-host-socket-path``: the host nvidia-imex command socket the readiness check queries."""
    serve_host_imex: bool = True
    """In host-managed mode, also serve the emulated host daemon's socket (off: something else serves it)."""

    @property
    def host_managed(self) -> bool:
        return self.imex_mode == HOST_MANAGED


def compute_domain_specs(
    node: Node, opts: SliceOptions, _unhealthy: Mapping[str, int | None], *, host_managed: bool = False
) -> list[dict[str, Any]]:
    """The pool's one slice; health does not change it (NVIDIA taints no channel)."""
    return [compute_domain_slice_spec(node.name, opts.api_version, generation=0, host_managed=host_managed)]


class ComputeDomainPlugin:
    """Publisher, kubelet plugin, preparer and emulated IMEX daemon of the compute-domain driver."""

    def __init__(
        self,
        live: LiveInventory,
        paths: KubeletPaths,
        client: AsyncClient,
        *,
        cdi_root: Path,
        settings: ComputeDomainSettings,
        gates: FeatureGates | None = None,
        api_version: str | None = None,
        server_minor: int | None = None,
        resync_interval: float = 30.0,
    ) -> None:
        """``FabricError`` when the node's NVLink fabric is in error and NVIDIA's plugin would not start."""
        gates = gates or FeatureGates()
        validate_imex_config(settings.imex_mode, settings.imex_isolation, gates.enabled("HostManagedIMEXDaemon"))
        self.settings = settings
        host_managed = settings.host_managed
        self.live = live
        self.paths = paths
        self.cdi_root = cdi_root
        self.plugin_dir = paths.dra_plugin_dir(COMPUTE_DOMAIN_DRIVER)
        options = SliceOptions(
            driver=COMPUTE_DOMAIN_DRIVER,
            mig_mode="static",
            server_minor=server_minor or 36,
            api_version=api_version or "resource.k8s.io/v1",
        )
        self.publisher = SlicePublisher(
            client,
            live,
            options,
            auto_api_version=api_version is None,
            auto_server_version=server_minor is None,
            resync_interval=resync_interval,
            build_specs=partial(compute_domain_specs, host_managed=host_managed),
        )
        try:
            self.clique = NodeClique(
                live,
                client,
                gates=FabricGates(
                    crash_on_errors=gates.enabled("CrashOnNVLinkFabricErrors"),
                    fm_partitioning=gates.enabled("FabricManagerPartitioning"),
                ),
                label_enabled=settings.gpu_clique_label,
                refresh_interval=settings.clique_refresh_interval,
            )
        except FabricError as exc:
            raise FabricError(f"error creating driver: {exc}") from None
        cliques = gates.enabled("ComputeDomainCliques")
        self.api = DomainApi(client, live.inventory.node.name, settings.namespace, cliques=cliques)
        daemon_gates = DaemonGates(
            cliques=cliques,
            dns_names=gates.enabled("IMEXDaemonsWithDNSNames"),
            domains_dir=self.plugin_dir / DOMAINS_DIR,
        )
        self.daemon = ImexDaemonEmulation(
            client,
            self.api,
            live,
            clique=lambda: self.clique.value,
            gates=daemon_gates,
            start_delay=settings.start_delay,
        )
        self.reader = LightkubeClaimReader(client, options.api_version)
        self.preparer = ComputeDomainPreparer(
            self.reader,
            live,
            self.api,
            cdi_root=cdi_root,
            plugin_dir=self.plugin_dir,
            checkpoint=PreparedClaims.in_dir(self.plugin_dir),
            clique=lambda: self.clique.value,
            on_label=self.daemon.wake,
            host_imex_socket=settings.imex_host_socket if host_managed else None,
        )
        self.host_imex = (
            HostImexDaemon(settings.imex_host_socket, live) if host_managed and settings.serve_host_imex else None
        )
        self.plugin = DraKubeletPlugin(COMPUTE_DOMAIN_DRIVER, paths, self._add_services, services=SERVICES)
        self.publish_error = ""
        self._publish_task: asyncio.Task[None] | None = None

    def _add_services(self, server: grpc.aio.Server) -> None:
        v1_grpc.add_DRAPluginServicer_to_server(DraPluginV1(self.preparer), server)
        v1beta1_grpc.add_DRAPluginServicer_to_server(DraPluginV1beta1(self.preparer), server)

    async def start(self) -> None:
        ensure_dir(self.plugin_dir)
        write_base_spec(self.cdi_root)
        self.preparer.recover()
        await self.clique.start()
        if self.host_imex is not None:
            await self.host_imex.start()
        await self.plugin.start()
        if not self.settings.host_managed:  # host-managed: the admin's host daemon, no driver-managed ones
            self.daemon.start()
        self._publish_task = asyncio.create_task(self._start_publishing(), name="compute-domain-publish")

    async def _start_publishing(self) -> None:
        await start_when_reachable(self.publisher, self._publish_failed)
        self.reader.api_version = self.publisher.options.api_version

    def _publish_failed(self, error: str) -> None:
        self.publish_error = error

    def not_ready(self) -> list[str]:
        """Why the scheduler cannot use this driver's devices yet (``DraDriver.not_ready`` joins them)."""
        missing: list[str] = []
        task = self._publish_task
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            error = f" (last error: {self.publish_error})" if self.publish_error else ""
            missing.append(f"the {COMPUTE_DOMAIN_DRIVER} ResourceSlice is not published yet{error}")
        registered = self.plugin.registration_service.registered
        if registered is None:
            missing.append(f"the kubelet has not registered {COMPUTE_DOMAIN_DRIVER} yet (no NotifyRegistrationStatus)")
        elif not registered:
            error = self.plugin.registration_service.error
            missing.append(f"the kubelet refused to register {COMPUTE_DOMAIN_DRIVER}: {error}")
        return missing

    async def wait_published(self, timeout: float = 10.0) -> None:
        if self._publish_task is not None:
            await asyncio.wait_for(asyncio.shield(self._publish_task), timeout)

    async def stop(self) -> None:
        await cancel_and_wait([self._publish_task])
        await self.publisher.stop()
        await self.daemon.stop()
        await self.plugin.stop()
        if self.host_imex is not None:
            await self.host_imex.stop()
        await self.clique.stop()
