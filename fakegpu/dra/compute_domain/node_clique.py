"""The compute-domain plugin's view of the node's clique: read at start, refreshed, and (optionally) written as
the ``nvidia.com/gpu.clique`` node label.

Follows ``cmd/compute-domain-kubelet-plugin/computedomain.go`` (``NewComputeDomainManager``, ``CliqueID``,
``SetGPUCliqueLabel``, ``RemoveGPUCliqueLabel``, ``refreshGPUCliqueID``) and ``main.go``
(``--gpu-clique-label-enabled``, env ``GPU_CLIQUE_LABEL_ENABLED``, default false) of
kubernetes-sigs/dra-driver-nvidia-gpu at commit 024a2c1 (main, after v0.4.1):

* the clique ID is read once when the plugin starts; an NVLink fabric error there stops the plugin
  (``fakegpu.dra.compute_domain.fabric_clique``);
* every ``gpuCliqueLabelRefreshInterval`` (10 minutes) it is read again: a new non-empty value replaces the
  old one (a FabricManager repartition moves the node to another clique) and an error is only logged;
* with the flag on, the label ``nvidia.com/gpu.clique=<clusterUUID>.<cliqueID>`` is merge-patched onto the
  node at start and at every refresh (never when the node has no clique), and removed when the plugin
  stops. GPU Feature Discovery wrote the same label; the plugin takes it over where GFD is retired.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from fakegpu.dra.compute_domain.fabric_clique import FabricError, FabricGates, node_clique_id
from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.sharing.live_inventory import LiveInventory

log = logging.getLogger(__name__)

GPU_CLIQUE_LABEL: Final = "nvidia.com/gpu.clique"
REFRESH_INTERVAL: Final = 600.0
"""``gpuCliqueLabelRefreshInterval``: seconds between two reads of the clique ID."""
REMOVE_TIMEOUT: Final = 5.0
"""NVIDIA gives the label's removal at shutdown five seconds."""


class NodeClique:
    """The clique ID the plugin works with, and the node label that shows it."""

    def __init__(
        self,
        live: LiveInventory,
        client: AsyncClient,
        *,
        gates: FabricGates | None = None,
        label_enabled: bool = False,
        refresh_interval: float = REFRESH_INTERVAL,
    ) -> None:
        """Reads the clique at once: ``FabricError`` (NVIDIA's text, wrapped as its manager wraps it) when the
        fabric is in error and the plugin must not start."""
        self.live = live
        self.client = client
        self.gates = gates or FabricGates()
        self.label_enabled = label_enabled
        self.refresh_interval = refresh_interval
        self._read: Callable[[], str] = lambda: node_clique_id(self.live.inventory.node, self.gates, self._faults())
        try:
            self.value = self._read()
        except FabricError as exc:
            raise FabricError(f"failed to create ComputeDomain manager: error getting cliqueID: {exc}") from None
        log.info("Discovered GPU clique ID: %r", self.value)
        self._task: asyncio.Task[None] | None = None

    @property
    def node(self) -> str:
        return self.live.inventory.node.name

    def _faults(self) -> dict[str, str]:
        """The GPUs a ``fabric`` fault struck, with the NVML status their registration now reports."""
        return {u: c.fabric_status for u, c in self.live.conditions().items() if c.fabric_status is not None}

    async def start(self) -> None:
        """Set the label (a failure stops the plugin's start, as NVIDIA's ``Start``), then refresh for good."""
        if self.label_enabled:
            try:
                await self.set_label()
            except Exception as exc:
                raise RuntimeError(
                    f"error starting ComputeDomain manager: error setting {GPU_CLIQUE_LABEL} node label: {exc}"
                ) from exc
        self._task = asyncio.create_task(self._refresh_forever(), name="gpu-clique-refresh")

    async def stop(self) -> None:
        await cancel_and_wait([self._task])
        self._task = None
        if self.label_enabled:
            try:
                await asyncio.wait_for(self.remove_label(), REMOVE_TIMEOUT)
            except Exception as exc:  # the plugin stops anyway, as NVIDIA's does
                log.error("error removing %s node label: %s", GPU_CLIQUE_LABEL, exc)

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval)
            try:
                await self.refresh()
            except Exception as exc:
                log.error("error refreshing %s node label: %s", GPU_CLIQUE_LABEL, exc)

    async def refresh(self) -> None:
        """``refreshGPUCliqueID``: read the clique again; a new non-empty one replaces the old one."""
        try:
            new = self._read()
        except FabricError as exc:
            raise RuntimeError(f"error getting cliqueID: {exc}") from None
        if new and new != self.value:
            log.info("GPU clique ID changed from %r to %r, updating %s node label", self.value, new, GPU_CLIQUE_LABEL)
            self.value = new
        if self.label_enabled:
            try:
                await self.set_label()
            except Exception as exc:
                raise RuntimeError(f"error updating {GPU_CLIQUE_LABEL} node label: {exc}") from exc

    async def set_label(self) -> None:
        """``SetGPUCliqueLabel``: merge-patch the label; left unset on a node without a clique."""
        if self.value:
            await self._patch(self.value)

    async def remove_label(self) -> None:
        await self._patch(None)

    async def _patch(self, value: str | None) -> None:
        patch: dict[str, Any] = {"metadata": {"labels": {GPU_CLIQUE_LABEL: value}}}
        await self.client.patch(Node, self.node, patch, patch_type=PatchType.MERGE)
