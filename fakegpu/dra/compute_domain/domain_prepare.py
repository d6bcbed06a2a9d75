"""NodePrepareResources / NodeUnprepareResources of the compute-domain driver (``compute-domain.nvidia.com``).

Follows NVIDIA's ``cmd/compute-domain-kubelet-plugin/device_state.go`` (kubernetes-sigs/dra-driver-nvidia-gpu at
commit 0807eed):

* a **channel** claim (``channel-0``, config ``ComputeDomainChannelConfig``): at most one per node (the
  checkpoint says which claim holds channel 0); its ComputeDomain must exist and live in the claim's
  namespace; the node is labelled ``resource.nvidia.com/computeDomain=<domain UID>`` (so the domain's IMEX
  daemon lands here) *before* the node's readiness in the domain is asserted, and until the node's daemon
  is Ready the claim fails with NVIDIA's retryable ``current node not ready in ComputeDomain`` (the kubelet
  retries; the pod waits in ContainerCreating). Then a CDI spec with the IMEX channel device nodes (all
  channels of the node with ``allocationMode: All``), or nothing at all on a node without a clique.
* a **daemon** claim (``daemon``, config ``ComputeDomainDaemonConfig``): the daemon's environment and its
  ``/imexd`` directory ``<plugin dir>/domains/<domain UID>``; it never waits.

Error texts are NVIDIA's, wrapped as NVIDIA wraps them: ``error preparing devices for claim
'<ns>/<name>:<uid>': prepare devices failed: error applying config: <cause>``. NVIDIA retries non-permanent
errors inside the plugin for 45 s; fakegpu answers at once and the kubelet's own retry does the waiting.

The checkpoint is the GPU driver's (``fakegpu.dra.prepared_claims``), in this driver's plugin directory; a
prepared device's ``uuid`` field holds the ComputeDomain's UID (what unprepare needs to clear the label).
As NVIDIA's ``Prepare`` does, the claim is recorded ``PrepareStarted`` (with the devices it is to get) before
any side effect, so the node label of a claim still waiting for its daemon is cleared by its unprepare, which
then leaves the entry ``PrepareAborted`` (``checkpointv.go``, ``device_state.go`` and ``cleanup.go`` at commit
0807eed, main after v0.4.1).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakegpu.dra.claim_cdi_specs import CLAIM_CLASS, check_claim_uid, claim_device_name, remove_spec, write_spec
from fakegpu.dra.claim_error import ClaimError
from fakegpu.dra.claim_reader import ClaimReader, read_claim
from fakegpu.dra.compute_domain.cdi_edits import (
    BASE_CLASS,
    BASE_DEVICE,
    VENDOR,
    channel_edits,
    claim_spec,
    daemon_edits,
    daemon_env,
)
from fakegpu.dra.compute_domain.devices import CHANNEL_DEVICE, COMPUTE_DOMAIN_DRIVER, DAEMON_DEVICE
from fakegpu.dra.compute_domain.domain_api import DomainApi
from fakegpu.dra.compute_domain.domain_configs import DomainConfig, domain_configs, pick_config
from fakegpu.dra.compute_domain.host_imex import HostImexError, check_host_imex_ready
from fakegpu.dra.compute_domain.resources import CHANNEL_CONFIG_KIND, DAEMON_CONFIG_KIND
from fakegpu.dra.metrics import DraMetrics
from fakegpu.dra.prepare_plan import PreparedResult, PreparePlan
from fakegpu.dra.prepared_claims import CheckpointCorrupted, ClaimRef, PreparedClaim, PreparedClaims
from fakegpu.runtime.cdi_spec_model import qualified_name
from fakegpu.runtime.directories import ensure_dir
from fakegpu.sharing.live_inventory import LiveInventory

log = logging.getLogger(__name__)

PREPARE_ABORTED_TTL = 90.0
"""Seconds a ``PrepareAborted`` entry is kept: NVIDIA's ``PrepareAbortedClaimEntryTTL`` (twice its 45 s
``ErrorRetryMaxTimeout``, ``cmd/compute-domain-kubelet-plugin/cleanup.go``)."""
DOMAINS_DIR = "domains"
"""``<plugin dir>/domains/<domain UID>``: each domain's daemon directory, mounted at ``/imexd``."""


@dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of this driver on this node: its request, device and the config it gets."""

    request: str
    device: str
    config: DomainConfig


def allocated_devices(ref: ClaimRef, claim: Mapping[str, Any], *, driver: str, node: str) -> list[AllocatedDevice]:
    """The claim's results of ``driver``, each with its validated config, before anything is asked of the API
    server; a claim with more than one ``daemon`` result is refused (NVIDIA's one-daemon-per-claim check)."""
    try:
        check_claim_uid(ref.uid)
    except ValueError as exc:
        raise ClaimError(str(exc)) from None
    results = _allocated(ref, claim, driver, node)
    daemons = [r for r in results if r.device == DAEMON_DEVICE]
    if len(daemons) > 1:
        requests = sorted({r.request for r in daemons})
        raise ClaimError(f"only expected 1 device for requests '{requests}' in claim '{ref.uid}'")
    return results


def _allocated(ref: ClaimRef, claim: Mapping[str, Any], driver: str, node: str) -> list[AllocatedDevice]:
    allocation = (claim.get("status") or {}).get("allocation")
    if not isinstance(allocation, Mapping):
        raise ClaimError(f"no allocation set in ResourceClaim {ref.name} in namespace {ref.namespace}")
    raw = allocation.get("devices") or {}
    try:
        configs = domain_configs(raw.get("config"), driver, f"{ref.namespace}/{ref.name}")
    except ClaimError as exc:
        raise ClaimError(f"prepare devices failed: {exc}") from None
    out: list[AllocatedDevice] = []
    for r in raw.get("results") or []:
        if not isinstance(r, Mapping) or r.get("driver") != driver:
            continue
        device, request = str(r.get("device", "")), str(r.get("request", ""))
        if r.get("pool") != node or device not in (CHANNEL_DEVICE, DAEMON_DEVICE):
            raise ClaimError(f"prepare devices failed: requested device is not allocatable: {device}")
        kind = CHANNEL_CONFIG_KIND if device == CHANNEL_DEVICE else DAEMON_CONFIG_KIND
        try:
            config = pick_config(configs, request, kind)
            config.validate()
        except ClaimError as exc:
            raise ClaimError(f"prepare devices failed: {exc}") from None
        out.append(AllocatedDevice(request, device, config))
    return out


def channel_count(allocation_mode: str, node_channels: int) -> int:
    """How many IMEX channels a channel claim gets: channel 0 alone, or with ``allocationMode: All`` every
    channel of the node; a node with none refuses either (``applyComputeDomainChannelConfigDriverManaged``)."""
    wanted = node_channels if allocation_mode == "All" else 1
    if wanted > node_channels or wanted == 0:
        raise ClaimError(
            f"applyComputeDomainChannelConfigDriverManaged: requested {max(wanted, 1)} channels, but node has "
            f"{node_channels} IMEX channels"
        )
    return wanted


class ComputeDomainPreparer:
    """Prepares this node's compute-domain claims; ``on_label`` is called after the node label changed."""

    def __init__(
        self,
        reader: ClaimReader,
        live: LiveInventory,
        api: DomainApi,
        *,
        cdi_root: Path,
        plugin_dir: Path,
        checkpoint: PreparedClaims,
        clique: Callable[[], str] = lambda: "",
        on_label: Callable[[], None] = lambda: None,
        wall_clock: Callable[[], float] = time.time,
        host_imex_socket: Path | None = None,
    ) -> None:
        """``clique`` is the plugin's current clique ID (``fakegpu.dra.compute_domain.node_clique``)."""
        self.driver = COMPUTE_DOMAIN_DRIVER
        self.metrics = DraMetrics()
        self.reader = reader
        self.live = live
        self.api = api
        self.cdi_root = cdi_root
        self.plugin_dir = plugin_dir
        self.checkpoint = checkpoint
        self.on_label = on_label
        self._clique = clique
        self.wall_clock = wall_clock
        self.host_imex_socket = host_imex_socket
        """Set under host-managed IMEX: the host daemon's command socket (no labels, no driver daemons)."""
        self._lock = asyncio.Lock()

    @property
    def node(self) -> str:
        return self.live.inventory.node.name

    @property
    def clique(self) -> str:
        return self._clique()

    def recover(self) -> None:
        """Roll back claims a crash left half-prepared (the kubelet asks again): their specs and entries; the
        node label a started channel claim may have set is cleared by the next unprepare or prepare."""
        try:
            self.checkpoint.load()
            started = self.checkpoint.started_only()
        except (CheckpointCorrupted, OSError, ValueError) as exc:
            log.error("the compute-domain claim checkpoint cannot be used: %s", exc)
            return
        for claim in started:
            remove_spec(self.cdi_root, claim.uid, VENDOR)
            self.checkpoint.remove(claim.uid)
            log.warning("rolled back compute-domain claim %s/%s (%s)", claim.namespace, claim.name, claim.uid)

    async def prepare(self, ref: ClaimRef) -> tuple[PreparedResult, ...]:
        self._expire_aborted()
        stored = self.checkpoint.get(ref.uid)
        if stored is not None and stored.completed:
            return stored.devices
        claim = await read_claim(self.reader, ref)
        claim_id = f"{ref.namespace}/{ref.name}:{ref.uid}"
        try:
            return await self._prepare(ref, claim, stored)
        except ClaimError as exc:
            raise ClaimError(f"error preparing devices for claim '{claim_id}': {exc}") from None

    def _expire_aborted(self) -> None:
        for uid in self.checkpoint.expire_aborted(self.wall_clock(), PREPARE_ABORTED_TTL):
            log.info("dropped the PrepareAborted checkpoint entry of compute-domain claim %s", uid)

    async def _prepare(
        self, ref: ClaimRef, claim: Mapping[str, Any], stored: PreparedClaim | None
    ) -> tuple[PreparedResult, ...]:
        results = allocated_devices(ref, claim, driver=self.driver, node=self.node)
        planned = tuple(self._result(ref, r, ()) for r in results)
        if stored is not None and stored.aborted and same_allocation(stored.devices, planned):
            claim_id = f"{ref.namespace}/{ref.name}:{ref.uid}"
            raise ClaimError(f"stale prepare for claim {claim_id}: claim prepare was already aborted")
        async with self._lock:  # PrepareStarted before any side effect, as NVIDIA's Prepare
            stored = self.checkpoint.get(ref.uid)
            if stored is not None and stored.completed:
                return stored.devices
            self.checkpoint.start(ref, PreparePlan(ref.uid, ref.namespace, ref.name, self.driver, self.node, planned))
        prepared: list[PreparedResult] = []
        devices: list[dict[str, Any]] = []
        for result in results:
            try:
                if result.device == CHANNEL_DEVICE:
                    out, edits = await self._channel(ref, result)
                else:
                    out, edits = await self._daemon(ref, result)
            except ClaimError as exc:
                raise ClaimError(f"prepare devices failed: error applying config: {exc}") from None
            prepared.append(out)
            if edits is not None:
                devices.append({"name": out.cdi_device_name, "containerEdits": edits})
        prep = PreparePlan(ref.uid, ref.namespace, ref.name, self.driver, self.node, tuple(prepared))
        async with self._lock:
            stored = self.checkpoint.get(ref.uid)
            if stored is not None and stored.completed:
                return stored.devices
            if stored is None or stored.aborted:  # unprepared meanwhile: leave it so
                claim_id = f"{ref.namespace}/{ref.name}:{ref.uid}"
                raise ClaimError(f"stale prepare for claim {claim_id}: claim prepare was already aborted")
            if any(r.device == CHANNEL_DEVICE for r in prepared):
                try:  # again, under the lock: two claims prepared at once both passed the first check
                    self._assert_channel_free(ref)
                except ClaimError as exc:
                    raise ClaimError(f"prepare devices failed: error applying config: {exc}") from None
            self.checkpoint.start(ref, prep)
            if devices:
                write_spec(self.cdi_root, claim_spec(devices), ref.uid)
            self.checkpoint.complete(ref.uid)
        log.info(
            "prepared compute-domain claim %s/%s (%s): %s",
            ref.namespace,
            ref.name,
            ref.uid,
            ", ".join(f"{r.device} of ComputeDomain {r.uuid}" for r in prepared) or "no devices of this driver",
        )
        return tuple(prepared)

    def _result(
        self, ref: ClaimRef, result: AllocatedDevice, cdi_ids: tuple[str, ...], env: tuple[str, ...] = ()
    ) -> PreparedResult:
        return PreparedResult(
            request=result.request,
            pool=self.node,
            device=result.device,
            share_id=None,
            uuid=result.config.domain_id,
            cdi_device_name=claim_device_name(ref.uid, result.device),
            cdi_ids=cdi_ids,
            env=env,
        )

    async def _domain(self, domain_id: str, missing: str) -> dict[str, Any]:
        domain = await self.api.domain(domain_id)
        if domain is None:
            raise ClaimError(f"{missing}: {domain_id}")
        return domain

    def _assert_channel_free(self, ref: ClaimRef) -> None:
        """NVIDIA's ``assertImexChannelNotAllocated(0)``: one workload channel claim per node."""
        for other in self.checkpoint.claims():
            if other.uid != ref.uid and other.completed and any(d.device == CHANNEL_DEVICE for d in other.devices):
                raise ClaimError(
                    f"allocation failed: channel 0 already allocated by claim {other.uid} (according to checkpoint)"
                )

    async def _domain_in_namespace(self, ref: ClaimRef, domain_id: str) -> dict[str, Any]:
        domain = await self._domain(domain_id, "ComputeDomain not found")
        if (domain.get("metadata") or {}).get("namespace") != ref.namespace:
            raise ClaimError(
                "error asserting ComputeDomain's namespace: the ResourceClaim's namespace is different than the "
                "ComputeDomain's namespace"
            )
        return domain

    async def _channel_host_managed(
        self, ref: ClaimRef, result: AllocatedDevice, socket: Path
    ) -> tuple[PreparedResult, dict[str, Any] | None]:
        """NVIDIA's ``applyComputeDomainChannelConfigHostManaged``: no label and no daemon; on a fabric node the
        host daemon must answer READY, then channel 0 alone (domain isolation) is injected."""
        self._assert_channel_free(ref)
        await self._domain_in_namespace(ref, result.config.domain_id)
        if not self.clique:
            return self._result(ref, result, ()), None
        try:
            await check_host_imex_ready(socket)
        except HostImexError as exc:
            raise ClaimError(f"host nvidia-imex daemon readiness check failed: {exc}") from None
        name = claim_device_name(ref.uid, result.device)
        return self._result(ref, result, (qualified_name(VENDOR, CLAIM_CLASS, name),)), channel_edits(1)

    async def _channel(self, ref: ClaimRef, result: AllocatedDevice) -> tuple[PreparedResult, dict[str, Any] | None]:
        """NVIDIA's ``applyComputeDomainChannelConfigDriverManaged``, in its order."""
        if self.host_imex_socket is not None:
            return await self._channel_host_managed(ref, result, self.host_imex_socket)
        domain_id = result.config.domain_id
        self._assert_channel_free(ref)
        domain = await self._domain_in_namespace(ref, domain_id)
        await self.api.add_node_label(domain_id)
        self.on_label()
        if not await self.api.node_ready(domain, self.clique):
            raise ClaimError("error asserting ComputeDomain Ready: current node not ready in ComputeDomain")
        fabric = self.live.inventory.node.fabric
        if fabric is None or not self.clique:
            return self._result(ref, result, ()), None  # no clique: nothing to inject, as NVIDIA's prepare
        wanted = channel_count(result.config.allocation_mode, fabric.imex_channels)
        name = claim_device_name(ref.uid, result.device)
        return self._result(ref, result, (qualified_name(VENDOR, CLAIM_CLASS, name),)), channel_edits(wanted)

    async def _daemon(self, ref: ClaimRef, result: AllocatedDevice) -> tuple[PreparedResult, dict[str, Any]]:
        """NVIDIA's ``applyComputeDomainDaemonConfig``: environment and the domain's directory; never waits."""
        if self.host_imex_socket is not None:
            raise ClaimError("ComputeDomain daemon claims are not supported when imex.mode=hostManaged")
        domain_id = result.config.domain_id
        domain = await self._domain(domain_id, "compute domain not found")
        domain_dir = ensure_dir(self.plugin_dir / DOMAINS_DIR / domain_id)
        env = daemon_env(self.clique, domain)
        name = claim_device_name(ref.uid, result.device)
        ids = (qualified_name(VENDOR, BASE_CLASS, BASE_DEVICE), qualified_name(VENDOR, CLAIM_CLASS, name))
        return self._result(ref, result, ids, env), daemon_edits(env, domain_dir)

    async def unprepare(self, ref: ClaimRef) -> None:
        """NVIDIA's ``Unprepare``, crash-safe: clear the node label of a channel claim's domain (only if it still
        names that domain) first, then the spec, then the checkpoint entry, so a crash anywhere leaves the entry
        and the kubelet's retry redoes the rest. A completed claim's entry is dropped; a claim unprepared before
        its prepare completed becomes ``PrepareAborted`` for ``PREPARE_ABORTED_TTL`` seconds, so a stale retry of
        that prepare is refused; an aborted or unknown claim is a no-op. A daemon claim keeps its directory
        (NVIDIA's cleanup loop removes it)."""
        self._expire_aborted()
        stored = self.checkpoint.get(ref.uid)
        if stored is None or stored.aborted:
            log.info(
                "unprepared compute-domain claim %s/%s (%s): %s",
                ref.namespace,
                ref.name,
                ref.uid,
                "not prepared here" if stored is None else "its prepare was already aborted",
            )
            return
        for device in stored.devices:
            if self.host_imex_socket is not None:
                break  # host-managed mode never labels the node
            if device.device == CHANNEL_DEVICE and await self.api.remove_node_label(device.uuid):
                self.on_label()
        async with self._lock:
            remove_spec(self.cdi_root, ref.uid, VENDOR)
            current = self.checkpoint.get(ref.uid)
            if current is not None and current.completed:
                self.checkpoint.remove(ref.uid)
            elif current is not None and not current.aborted:
                self.checkpoint.abort(ref.uid, self.wall_clock())
        log.info(
            "unprepared compute-domain claim %s/%s (%s)%s",
            ref.namespace,
            ref.name,
            ref.uid,
            "" if stored.completed else ": its prepare had not completed (PrepareAborted)",
        )


def same_allocation(stored: tuple[PreparedResult, ...], planned: tuple[PreparedResult, ...]) -> bool:
    """NVIDIA's ``claimMatchesPreparedClaim``: the same claim version, here the same allocation results and
    domains (the fields a plan fixes before anything is prepared)."""

    def key(results: tuple[PreparedResult, ...]) -> list[tuple[str, str, str, str]]:
        return sorted((r.request, r.pool, r.device, r.uuid) for r in results)

    return key(stored) == key(planned)
