"""``--dcgm-address``: the fake dcgm-exporter a daemon serves next to its own metrics.

Both daemons serve it the same way: pods and containers come from the kubelet's PodResources socket,
as real dcgm-exporter reads them; the DRA daemon adds a resolver from its prepared claims so the
``dynamic_resources`` the kubelet lists map to GPU and MIG UUIDs, and a fallback that attributes prepared
claims the kubelet's answer does not cover to the pods in the claim's ``status.reservedFor``.

``--dcgm-seed`` seeds the activity model: the same seed, inventory, holders and time step give the same
bytes, another seed other values (two fake nodes need not read alike).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.dcgm.attribution import (
    Attribution,
    DraDeviceResolver,
    FallbackAttribution,
    HolderFallback,
    PodResourcesAttribution,
    pod_resources_socket,
)
from fakegpu.telemetry.dcgm.exporter import CONTENT_TYPE, DEFAULT_SEED, DcgmExporter
from fakegpu.telemetry.http_endpoint import ListenAddress, MetricsServer, parse_listen_address

log = logging.getLogger(__name__)
FLAG = "--dcgm-address"


def add_dcgm_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("fake dcgm-exporter")
    group.add_argument(
        FLAG,
        default=None,
        metavar="HOST:PORT",
        help="serve dcgm-exporter's metrics (DCGM_FI_DEV_GPU_UTIL, ...) at http://HOST:PORT/metrics, off unless "
        "given; dcgm-exporter's port is 9400, and in a pod give 0.0.0.0:9400 for Prometheus to scrape it",
    )
    group.add_argument(
        "--dcgm-kubernetes-virtual-gpus",
        action="store_true",
        help="one series per (GPU, container) for shared GPUs, as dcgm-exporter's --kubernetes-virtual-gpus",
    )
    group.add_argument(
        "--dcgm-seed",
        default=DEFAULT_SEED,
        metavar="SEED",
        help=f"seed of the modelled GPU activity (default {DEFAULT_SEED!r}): the same seed gives the same values, "
        "another seed other values",
    )


def dcgm_address(args: argparse.Namespace) -> ListenAddress | None:
    value: str | None = args.dcgm_address
    return None if value is None else parse_listen_address(value, FLAG)


class PodAnnotationSource(Protocol):
    """Annotations looked up ahead of each render (the PodResources API does not carry them)."""

    def __call__(self, namespace: str, name: str) -> Mapping[str, str]: ...

    async def prefetch(self, pods: Iterable[tuple[str, str]]) -> None: ...

    async def close(self) -> None: ...


class DcgmEndpoint:
    """The exporter, its PodResources client and its HTTP server, started and stopped together."""

    def __init__(
        self,
        live: LiveInventory,
        kubelet_root: Path,
        address: ListenAddress,
        *,
        virtual_gpus: bool = False,
        dra_device_uuid: DraDeviceResolver | None = None,
        fallback: HolderFallback | None = None,
        annotations: PodAnnotationSource | None = None,
        seed: str | int = DEFAULT_SEED,
    ) -> None:
        self.attribution = PodResourcesAttribution(pod_resources_socket(kubelet_root), dra_device_uuid=dra_device_uuid)
        self.annotations = annotations
        source: Attribution = self.attribution if fallback is None else FallbackAttribution(self.attribution, fallback)
        self.exporter = DcgmExporter(live, source, virtual_gpus=virtual_gpus, annotations=annotations, seed=seed)
        self.server = MetricsServer(address, render=self.scrape, content_type=CONTENT_TYPE, flag=FLAG)

    async def scrape(self) -> bytes:
        """Who holds what (PodResources), their pods' annotations, then dcgm-exporter's text."""
        holders = await self.exporter.refresh()
        if self.annotations is not None:
            await self.annotations.prefetch({(h.namespace, h.pod) for h in holders if h.pod})
        return self.exporter.render()

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()
        await self.attribution.close()
        if self.annotations is not None:
            await self.annotations.close()
