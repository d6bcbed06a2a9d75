"""The telemetry both daemons serve, from the same five flags: ``--metrics-address``, ``--dcgm-address``,
``--dcgm-kubernetes-virtual-gpus``, ``--dcgm-seed`` and ``--health-address``. Nothing is served unless an
address is given."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.dcgm.attribution import DraDeviceResolver, HolderFallback
from fakegpu.telemetry.dcgm.endpoint import DcgmEndpoint, PodAnnotationSource
from fakegpu.telemetry.dcgm.exporter import DEFAULT_SEED
from fakegpu.telemetry.health_endpoint import Readiness, health_endpoint
from fakegpu.telemetry.http_endpoint import HttpEndpoint, ListenAddress, MetricsServer


@dataclass(frozen=True)
class TelemetrySettings:
    metrics_address: ListenAddress | None = None
    """Prometheus metrics of the daemon at ``http://ADDRESS/metrics``."""
    dcgm_address: ListenAddress | None = None
    """The fake dcgm-exporter, attributed through the kubelet's PodResources."""
    dcgm_virtual_gpus: bool = False
    dcgm_seed: str | int = DEFAULT_SEED
    health_address: ListenAddress | None = None
    """The kubelet's probes at ``http://ADDRESS/healthz`` and ``/readyz`` (``fakegpu.telemetry.health_endpoint``)."""

    def health(self, readiness: Readiness) -> HttpEndpoint | None:
        """The probes' endpoint answering from ``readiness``, if asked for; the daemon starts it first of all."""
        return None if self.health_address is None else health_endpoint(self.health_address, readiness)

    def endpoints(
        self,
        registry: CollectorRegistry,
        live: LiveInventory,
        kubelet_root: Path,
        *,
        annotations: Callable[[], PodAnnotationSource | None],
        dra_device_uuid: DraDeviceResolver | None = None,
        fallback: HolderFallback | None = None,
    ) -> Iterator[MetricsServer | DcgmEndpoint]:
        """The endpoints asked for, in the order they start, each made only when the one before is taken:
        ``registry``'s metrics, then the fake dcgm-exporter (pod annotations from ``annotations()``, and for
        the DRA daemon its prepared devices' UUIDs and the attribution fallback of its prepared claims)."""
        if self.metrics_address is not None:
            yield MetricsServer(self.metrics_address, registry)
        if self.dcgm_address is not None:
            yield DcgmEndpoint(
                live,
                kubelet_root,
                self.dcgm_address,
                virtual_gpus=self.dcgm_virtual_gpus,
                dra_device_uuid=dra_device_uuid,
                fallback=fallback,
                annotations=annotations(),
                seed=self.dcgm_seed,
            )
