"""The node's IMEX daemon, emulated: what NVIDIA's ``compute-domain-daemon`` pod writes to the API server.

Upstream, a channel claim labels the node ``resource.nvidia.com/computeDomain=<domain UID>``, the domain's
DaemonSet (that label is its nodeSelector) starts a daemon pod on the node, and the daemon announces the node
(``cmd/compute-domain-daemon`` of kubernetes-sigs/dra-driver-nvidia-gpu at commit 3fe9487): on a node of an
NVLink clique it upserts its entry ``{nodeName, ipAddress, cliqueID, index, status}`` in the
ComputeDomainClique ``<domain UID>.<clique>`` of the driver's namespace (the lowest free index, ``NotReady``
first, ``Ready`` once its pod is Ready, back to ``NotReady`` when its readiness probe fails) and removes it
when the pod goes away; on a node without a clique it does nothing and the controller writes the node into the
domain's ``status.nodes`` from the pod (``cliqueID: ""``, ``index: -1``, Ready with the pod).

fakegpu runs no such pod: while the node carries the label, this object is the daemon. It becomes Ready
``start_delay`` seconds after it joined (the pod's start and first probe), is NotReady while any GPU of the
node is in the way (unhealthy, lost, off the bus, or off the NVLink fabric by a ``fabric`` fault:
``fakegpu.dra.compute_domain.imex_readiness``; a real ``nvidia-imex-ctl -q`` stops answering READY), Ready again
once that clears (a ``fabric`` fault recovered), and leaves when the label goes. On a node without a clique it
writes the controller's ``status.nodes`` entry itself (status subresource), Ready after the same delay (the
daemon's probe is a no-op there, so health does not matter).
API failures are logged and retried with backoff; nothing here ever stops the plugin.

Gates, as NVIDIA's daemon reads them (``cmd/compute-domain-daemon/controller.go`` ``NewController``,
``cdstatus.go``; commit 3fe9487, unchanged at v0.4.x): with ``ComputeDomainCliques`` off the daemon of a
fabric node writes its entry into the domain's ``status.nodes`` itself (``syncNodeInfoToCD``: its clique
ID, the lowest index its clique leaves free, NotReady first) instead of a ComputeDomainClique. The clique is
the one the node had when the daemon started (its ``CLIQUE_ID``), kept until it leaves, whatever a later
refresh reads. ``IMEXDaemonsWithDNSNames`` picks the nodes config it writes
(``fakegpu.dra.compute_domain.imex_nodes_config``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from fakegpu.dra.compute_domain.domain_api import DomainApi, clique_object_name
from fakegpu.dra.compute_domain.imex_nodes_config import MAX_NODES_PER_IMEX_DOMAIN, clique_members, write_imex_config
from fakegpu.dra.compute_domain.imex_readiness import imex_blockers
from fakegpu.dra.compute_domain.resources import (
    API_VERSION,
    CLIQUE_LABEL,
    COMPUTE_DOMAIN_LABEL,
    NOT_READY,
    READY,
    ComputeDomain,
    ComputeDomainClique,
)
from fakegpu.kube.backoff import jittered_pause
from fakegpu.kube.event_wait import wait_event
from fakegpu.kube.node_watch import NodeWatch
from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.sharing.live_inventory import LiveInventory

log = logging.getLogger(__name__)

DEFAULT_START_DELAY: Final = 1.0
RESYNC_INTERVAL: Final = 10.0
"""How often the entry is checked even when nothing changed (the controller prunes entries it deems stale)."""
LOCALHOST: Final = "127.0.0.1"
MAX_CONFLICT_RETRIES: Final = 5


def internal_ip(node: Node | None) -> str:
    """The node's InternalIP (the daemon pod's IP stands for it), else 127.0.0.1."""
    addresses = (node.status.addresses if node is not None and node.status else None) or []
    for address in addresses:
        if address.type == "InternalIP" and address.address:
            return address.address
    return LOCALHOST


def lowest_free_index(entries: list[dict[str, Any]]) -> int:
    """NVIDIA's gap-filling index of a new clique member."""
    taken = {e.get("index") for e in entries}
    index = 0
    while index in taken:
        index += 1
    return index


def with_entry(daemons: Sequence[Mapping[str, Any]], entry: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The clique's daemons with ``entry`` as its node's one entry, or None when it is already exactly that. The
    node keeps the index it holds; a node joining takes the lowest index the others leave free (``entry``'s own
    ``index`` is ignored)."""
    node = entry["nodeName"]
    mine = [dict(e) for e in daemons if e.get("nodeName") == node]
    others = [dict(e) for e in daemons if e.get("nodeName") != node]
    placed = {**entry, "index": mine[0].get("index", 0) if mine else lowest_free_index(others)}
    if mine == [placed]:
        return None
    return [*others, placed]


def daemon_status(remaining: float, clique: str, blockers: Collection[str]) -> tuple[str, str]:
    """The status the daemon reports and why: NotReady for ``remaining`` seconds of its start, then on a clique
    NotReady while a GPU is in the way (``blockers``, ``fakegpu.dra.compute_domain.imex_readiness``:
    ``nvidia-imex-ctl -q`` stops answering READY), Ready otherwise; off the fabric Ready whatever the GPUs'
    state (the probe is a no-op there)."""
    if remaining > 0:
        where = f"clique {clique}" if clique else "no clique"
        return NOT_READY, f"started, {where}"
    if clique and blockers:
        return NOT_READY, f"IMEX daemon not ready: {'; '.join(blockers)}"
    if clique:
        return READY, "nvidia-imex-ctl -q answers READY"
    return READY, "check succeeded (noop, clique ID is empty)"


def lowest_free_index_in_clique(nodes: Sequence[Mapping[str, Any]], clique: str) -> int:
    """``getNextAvailableIndex``: the lowest index no ``status.nodes`` entry of the same clique holds."""
    taken = {n.get("index") for n in nodes if n.get("cliqueID") == clique}
    index = 0
    while index in taken:
        index += 1
    return index


@dataclass(frozen=True)
class DaemonGates:
    """The daemon's gates and where it writes its IMEX config (None: nowhere)."""

    cliques: bool = True
    dns_names: bool = True
    domains_dir: Path | None = None
    max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN


class ImexDaemonEmulation:
    """Follows the node's label and keeps this node's daemon entry in the API server as a daemon would."""

    def __init__(
        self,
        client: AsyncClient,
        api: DomainApi,
        live: LiveInventory,
        *,
        clique: Callable[[], str] = lambda: "",
        gates: DaemonGates = DaemonGates(),
        start_delay: float = DEFAULT_START_DELAY,
        resync_interval: float = RESYNC_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clique`` is the plugin's current clique ID, read when the daemon starts."""
        self.client = client
        self.api = api
        self.live = live
        self.current_clique = clique
        self.gates = gates
        self.start_delay = start_delay
        self.resync_interval = resync_interval
        self.clock = clock
        self.label: str | None = None
        """The domain the node's label names (None: no label, or not read yet)."""
        self.ip = LOCALHOST
        self.joined: str | None = None
        """The domain whose entry this node wrote, and when (for the start delay)."""
        self.joined_at = 0.0
        self.clique = ""
        """The clique the daemon started with (its ``CLIQUE_ID``), kept until it leaves."""
        self._seen: tuple[list[dict[str, Any]], int] = ([], 0)
        """The entries of the object the daemon last wrote (its clique's, or ``status.nodes``) and the domain's
        ``numNodes`` when it read them (0 when it did not)."""
        self.status: str | None = None
        self.failures = 0
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._unsubscribe: Callable[[], None] = lambda: None

    @property
    def node(self) -> str:
        return self.live.inventory.node.name

    @property
    def running(self) -> bool:
        """Started and not stopped: it follows the node's label (never in host-managed mode, whose daemon is the
        admin's)."""
        return bool(self._tasks)

    def wake(self) -> None:
        """Reconcile soon (the label, health or something else changed)."""
        self._wake.set()

    def start(self) -> None:
        watch = NodeWatch(self.client, self.node, self._node_changed)
        self._unsubscribe = self.live.subscribe(self.wake)
        self._tasks = [
            asyncio.create_task(watch.run(), name="imex-daemon-node-watch"),
            asyncio.create_task(self._loop(), name="imex-daemon-emulation"),
        ]

    async def stop(self) -> None:
        """Stop following; the entry stays, as a killed daemon's does (the label, not this process, decides)."""
        self._unsubscribe()
        await cancel_and_wait(self._tasks)
        self._tasks = []

    def _node_changed(self, node: Node | None) -> None:
        labels = (node.metadata.labels if node is not None and node.metadata else None) or {}
        self.label = labels.get(COMPUTE_DOMAIN_LABEL) or None
        self.ip = internal_ip(node)
        self.wake()

    async def _loop(self) -> None:
        while True:
            timeout = self.resync_interval
            self._wake.clear()  # before the pass: a change during it wakes the next one
            try:
                timeout = min(timeout, await self.reconcile())
                self.failures = 0
            except Exception as exc:  # an API hiccup: the daemon retries, the plugin goes on
                self.failures += 1
                timeout = jittered_pause(self.failures)
                log.warning(
                    "IMEX daemon emulation on node %s: API call failed (%s); retrying in %.1fs", self.node, exc, timeout
                )
            await wait_event(self._wake, max(timeout, 0.01))

    async def reconcile(self) -> float:
        """One pass; returns when the next one is due without a change (the end of the start delay)."""
        if self.joined is not None and self.joined != self.label:
            await self._leave(self.joined)
            log.info("IMEX daemon of ComputeDomain %s on node %s stopped (node label removed)", self.joined, self.node)
            self.joined, self.status = None, None
        if self.label is None:
            return self.resync_interval
        if self.joined is None:
            self.joined, self.joined_at, self.clique = self.label, self.clock(), self.current_clique()
        remaining = self.start_delay - (self.clock() - self.joined_at)
        wanted, why = self._wanted(remaining)
        if await self._upsert(self.joined, wanted):
            if wanted != self.status:
                log.info("IMEX daemon of ComputeDomain %s on node %s: %s (%s)", self.joined, self.node, wanted, why)
            self.status = wanted
            await self._write_config(self.joined)
        return remaining if remaining > 0 else self.resync_interval

    def _wanted(self, remaining: float) -> tuple[str, str]:
        return daemon_status(remaining, self.clique, imex_blockers(self.live))

    # -- fabric node: the ComputeDomainClique ----------------------------------------------------------

    async def _upsert(self, domain_uid: str, status: str) -> bool:
        """Write this node's entry with ``status``; False when the domain is gone (nothing written)."""
        if self.clique and self.gates.cliques:
            await self._upsert_clique(domain_uid, status)
            return True
        return await self._upsert_status(domain_uid, status)

    async def _write_config(self, domain_uid: str) -> None:
        """The nodes config (and hosts lines) of the clique's members, on a fabric node only: off the fabric
        NVIDIA's daemon runs no IMEX daemon."""
        if not self.clique or self.gates.domains_dir is None:
            return
        entries, num_nodes = self._seen
        written = write_imex_config(
            self.gates.domains_dir / domain_uid,
            clique_members(entries, self.clique),
            dns_names=self.gates.dns_names,
            joined=len(entries),
            num_nodes=num_nodes,
            max_nodes=self.gates.max_nodes,
        )
        if not written:
            log.debug("IMEX daemon on node %s: numNodes %d, nodes seen: %d", self.node, num_nodes, len(entries))

    def _entry(self, index: int, status: str) -> dict[str, Any]:
        return {"nodeName": self.node, "ipAddress": self.ip, "cliqueID": self.clique, "index": index, "status": status}

    async def _upsert_clique(self, domain_uid: str, status: str) -> None:
        name = clique_object_name(domain_uid, self.clique)
        for _ in range(MAX_CONFLICT_RETRIES):
            found = await self.api.clique(domain_uid, self.clique)
            if found is None:
                obj = {
                    "apiVersion": API_VERSION,
                    "kind": "ComputeDomainClique",
                    "metadata": {
                        "name": name,
                        "namespace": self.api.namespace,
                        "labels": {COMPUTE_DOMAIN_LABEL: domain_uid, CLIQUE_LABEL: self.clique},
                    },
                    "daemons": [self._entry(0, status)],
                }
                try:
                    await self.client.create(ComputeDomainClique.from_dict(obj))
                    self._seen = ([self._entry(0, status)], 0)
                    return
                except ApiError as exc:
                    if exc.status.code == 409:
                        continue  # another node's daemon created it first: join it
                    raise
            daemons = with_entry(found.get("daemons") or [], self._entry(0, status))
            if daemons is None or await self._patch_clique(found, daemons):
                self._seen = (daemons if daemons is not None else [dict(d) for d in found.get("daemons") or []], 0)
                return
        raise RuntimeError(f"too many conflicting writes to ComputeDomainClique {self.api.namespace}/{name}")

    async def _patch_clique(self, found: dict[str, Any], daemons: list[dict[str, Any]]) -> bool:
        meta = found["metadata"]
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "daemons": daemons}
        try:
            await self.client.patch(
                ComputeDomainClique, meta["name"], patch, namespace=self.api.namespace, patch_type=PatchType.MERGE
            )
        except ApiError as exc:
            if exc.status.code in (404, 409):
                return False
            raise
        return True

    async def _leave_clique(self, domain_uid: str) -> None:
        for _ in range(MAX_CONFLICT_RETRIES):
            found = await self.api.clique(domain_uid, self.clique)
            daemons = (found or {}).get("daemons") or []
            if found is None or not any(e.get("nodeName") == self.node for e in daemons):
                return
            if await self._patch_clique(found, [e for e in daemons if e.get("nodeName") != self.node]):
                return
        raise RuntimeError(f"too many conflicting writes to the ComputeDomainClique of ComputeDomain {domain_uid}")

    # -- node without a clique: the domain's status.nodes, as the controller writes it from the pod ------

    async def _upsert_status(self, domain_uid: str, status: str) -> bool:
        if self.gates.cliques:  # the controller's entry for a node without a clique
            entry = {"name": self.node, "ipAddress": self.ip, "cliqueID": "", "index": -1, "status": status}
            return await self._edit_status(domain_uid, lambda nodes: [*self._without_me(nodes), entry])
        return await self._edit_status(domain_uid, lambda nodes: self._with_my_node(nodes, status))

    def _with_my_node(self, nodes: list[dict[str, Any]], status: str) -> list[dict[str, Any]]:
        """``syncNodeInfoToCD``: this node's entry keeps its index; a node joining takes its clique's lowest
        free one."""
        mine = [n for n in nodes if n.get("name") == self.node]
        others = self._without_me(nodes)
        index = mine[0].get("index", 0) if mine else lowest_free_index_in_clique(others, self.clique)
        entry = {"name": self.node, "ipAddress": self.ip, "cliqueID": self.clique, "index": index, "status": status}
        return [*others, entry]

    def _without_me(self, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [n for n in nodes if n.get("name") != self.node]

    async def _edit_status(self, domain_uid: str, edit: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> bool:
        for _ in range(MAX_CONFLICT_RETRIES):
            domain = await self.api.domain(domain_uid)
            if domain is None:
                return False
            meta = domain["metadata"]
            status = dict(domain.get("status") or {})
            nodes = [dict(n) for n in status.get("nodes") or []]
            new = edit(nodes)
            self._seen = (new, int((domain.get("spec") or {}).get("numNodes") or 0))
            if sorted(map(repr, new)) == sorted(map(repr, nodes)):
                return True
            body: dict[str, Any] = {"nodes": new}
            if not status.get("status"):
                body["status"] = NOT_READY  # the schema's default; the controller computes the real one
            patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": body}
            try:
                await self.client.patch(
                    ComputeDomain.Status, meta["name"], patch, namespace=meta["namespace"], patch_type=PatchType.MERGE
                )
                return True
            except ApiError as exc:
                if exc.status.code not in (404, 409):
                    raise
        raise RuntimeError(f"too many conflicting writes to the status of ComputeDomain {domain_uid}")

    async def _leave(self, domain_uid: str) -> None:
        if self.clique and self.gates.cliques:
            await self._leave_clique(domain_uid)
        else:
            await self._edit_status(domain_uid, self._without_me)
