"""The kubelet side of a node running fakegpu's DRA driver, for tests whose pods' status must reach the API
server: the kubelet emulator reading claims from the server, its ``PodStatusWriter``, and an applier in front.

Two fixtures (tests/integration/test_allocated_resources_status.py and test_cluster_scenarios.py) built the
same three pieces, waited for the same first health report and stopped them in the same order.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from fakegpu.kubelet.dra_manager import Backoff
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.kubelet.pod_status import PodStatusWriter
from fakegpu.testing.manifest_apply import ManifestApplier
from tests.apiserver import FakeApiServer
from tests.eventually import eventually

FAST = Backoff(initial=0.05, cap=0.2)
"""A prepare retried within a fraction of a second, so a test does not wait out the kubelet's real backoff."""


@dataclass
class KubeletSide:
    kubelet: KubeletEmulator
    writer: PodStatusWriter
    applier: ManifestApplier


@contextlib.asynccontextmanager
async def kubelet_side(apiserver: FakeApiServer, root: Path, node: str) -> AsyncIterator[KubeletSide]:
    """The kubelet emulator on ``root``'s kubelet directory and its status writer, entered once the kubelet has
    read the running driver's first health report (the driver serves the health stream)."""
    client = apiserver.client()
    kubelet = KubeletEmulator(root / "kubelet", prepare_backoff=FAST, api_client=client)
    writer = PodStatusWriter(client, kubelet)
    try:
        await kubelet.start()
        await writer.start()
        await eventually(lambda: kubelet.health_streams.reports > 0, "the kubelet to read the driver's health")
        yield KubeletSide(kubelet, writer, ManifestApplier(client, kubelet, node, writer))
    finally:
        await writer.stop()
        await kubelet.stop()
        await client.close()
