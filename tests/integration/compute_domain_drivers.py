"""Starting the DRA driver with its compute-domain plugin for the compute-domain integration tests.

Each test file used to build the same driver by hand (node spec file, live inventory, settings, driver, start,
wait); the files differ only in the spec, the feature gates and the ComputeDomainSettings they pass, so those
are the factory's arguments and each file keeps a thin fixture over it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fakegpu.dra.compute_domain.kubelet_plugin import ComputeDomainSettings
from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.dra.feature_gates import parse_feature_gates
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from tests.apiserver import FakeApiServer, serving
from tests.integration.started_dra_drivers import StartedDrivers

NODE = "node-a"
DRIVER_NS = "nvidia-dra-driver-gpu"


def serve_node() -> Iterator[FakeApiServer]:
    """The tests' API server with the node and NVIDIA's CRDs (ComputeDomain, cliques), for an ``apiserver``
    fixture to ``yield from``."""
    with serving(NODE, nvidia_crds=True) as server:
        yield server


class ComputeDomainDrivers:
    """Starts drivers with the compute-domain plugin for the one fake node under ``root`` and stops every one
    it started."""

    def __init__(self, root: Path, apiserver: FakeApiServer, *, boot_id_file: Path | None = None) -> None:
        self.root = root
        self.apiserver = apiserver
        self.boot_id_file = boot_id_file
        self.started = StartedDrivers(root)

    async def start(self, node_spec: str, gates: str = "", **compute_domains: Any) -> DraDriver:
        """Write ``node_spec`` to a fresh file, start a driver over it with ``gates`` and the given
        ComputeDomainSettings fields (namespace defaults to NVIDIA's driver namespace), and return it once both
        its GPU and its compute-domain ResourceSlices are published."""
        spec = self.root / f"node-{len(self.started)}.yaml"
        spec.write_text(node_spec)
        live = LiveInventory(load_inventory(InventoryInputs(node_name=NODE, node_spec=str(spec))))
        compute_domains.setdefault("namespace", DRIVER_NS)
        settings = DraSettings(
            cdi_root=self.root / "cdi",
            feature_gates=parse_feature_gates(gates),
            compute_domains=ComputeDomainSettings(**compute_domains),
        )
        if self.boot_id_file is not None:
            settings = dataclasses.replace(settings, boot_id_file=self.boot_id_file)
        driver = await self.started.start(live, settings, self.apiserver)
        assert driver.compute_domains is not None
        await driver.compute_domains.wait_published()
        return driver

    async def stop_all(self) -> None:
        await self.started.stop_all()


def socket_of(driver: DraDriver) -> Path:
    """The compute-domain plugin's DRA socket (the one the kubelet calls for channel and daemon claims)."""
    assert driver.compute_domains is not None
    return driver.compute_domains.plugin.dra_socket
