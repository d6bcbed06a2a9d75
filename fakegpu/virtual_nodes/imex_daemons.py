"""``--watch`` on a fleet with NVLink cliques: the virtual nodes play their IMEX daemons.

On a real node two of NVIDIA's programs make a ComputeDomain Ready (kubernetes-sigs/dra-driver-nvidia-gpu at
commit 0807eed): the compute-domain kubelet plugin, preparing a pod's channel claim, labels the node
``resource.nvidia.com/computeDomain=<domain UID>`` (``cmd/compute-domain-kubelet-plugin/computedomain.go``
``AddNodeLabel``), so the domain's DaemonSet starts an IMEX daemon there; the daemon keeps its entry
``{nodeName, ipAddress, cliqueID, index, status}`` in the ComputeDomainClique ``<domain UID>.<clique>`` of the
driver's namespace (``cmd/compute-domain-daemon/cdclique.go``), Ready while its pod's probe passes
(``main.go`` ``check``), and the controller folds the cliques into the domain's status. fakegpu's emulated
daemon does this on a real node (``fakegpu.dra.compute_domain.daemon_emulation``); a KWOK node runs neither
program, so this does it for every virtual node of the fleet at once:

- it follows three kinds: this tool's Nodes (their fault annotation ``fakegpu.io/gpu-faults``, their
  InternalIP), ResourceClaims (the compute-domain results on a virtual node, ``fakegpu.virtual_nodes.imex_claims``)
  and Pods (which node each is bound to). Each is one list, then one watch: nothing is polled;
- a node holds a domain while a claim allocated there is reserved for a pod bound to it; a channel claim
  labels the node, and the node's daemon entry is Ready, or NotReady while a fault on its GPUs breaks the
  IMEX domain (``fakegpu.dra.compute_domain.imex_readiness``);
- what it wants is compared with what it last wrote (or, the first time, read): a clique is read and
  written only when one of its virtual nodes' entries changes, with one patch for all of them, and a fault
  on a node that holds no domain writes nothing. The entries keep NVIDIA's indices (``with_entry``: a node
  keeps its index, a joining node takes the lowest free one); entries of other nodes are left as they are.

It differs from a real daemon where a fleet asks it to: an entry is written Ready at once (no NotReady
first, no start delay: one write instead of two), and with ``ComputeDomainCliques`` off nothing is written (the
daemons' ``status.nodes`` path is the real node's only). Like NVIDIA's programs it never evicts anything.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from fakegpu.dra.claim_reader import CLAIM_KINDS
from fakegpu.dra.compute_domain.daemon_emulation import LOCALHOST, MAX_CONFLICT_RETRIES, with_entry
from fakegpu.dra.compute_domain.domain_api import clique_object_name
from fakegpu.dra.compute_domain.fabric_clique import FabricError, node_clique_id
from fakegpu.dra.compute_domain.imex_readiness import imex_not_ready_reason
from fakegpu.dra.compute_domain.resources import (
    API_VERSION,
    CLIQUE_LABEL,
    COMPUTE_DOMAIN_LABEL,
    NOT_READY,
    READY,
    ComputeDomainClique,
)
from fakegpu.kube.backoff import jittered_pause
from fakegpu.kube.watch_loop import collect, list_then_watch
from fakegpu.sharing.fault_record import FAULTS_ANNOTATION, decode_faults
from fakegpu.virtual_nodes.api import Api, ApiCallError, KubeconfigError
from fakegpu.virtual_nodes.controller import OWNED, VirtualNodeController
from fakegpu.virtual_nodes.imex_claims import DomainHold, claim_key, safe_domain_hold
from fakegpu.virtual_nodes.pools import VirtualNode

log = logging.getLogger(__name__)

JSON = dict[str, Any]
CliqueKey = tuple[str, str]
"""(domain UID, clique ID): one ComputeDomainClique."""
Wanted = dict[str, tuple[str, str]]
"""Per virtual node of a clique: (ipAddress, status)."""
LIST_CHUNK: Final = 500


@dataclass(frozen=True)
class NodeSeen:
    """What the node watch keeps of a virtual Node."""

    ip: str
    not_ready: str | None
    """Why its IMEX daemon is not READY (its faults), or None."""
    label: str | None


def fabric_cliques(nodes: Sequence[VirtualNode]) -> dict[str, str]:
    """The clique of every virtual node that publishes slices and sits in one (a fabric node whose
    registration is in error has none: NVIDIA's plugin would not start there)."""
    out: dict[str, str] = {}
    for node in nodes:
        if not node.publishes_slices:
            continue
        try:
            clique = node_clique_id(node.inventory.node)
        except FabricError:
            continue
        if clique:
            out[node.name] = clique
    return out


def node_ip(obj: Mapping[str, Any]) -> str:
    """The Node's InternalIP (KWOK gives one), else 127.0.0.1 as the emulated daemon of a real node uses."""
    for address in (obj.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP" and address.get("address"):
            return str(address["address"])
    return LOCALHOST


class ImexDaemons:
    """Keeps the IMEX daemon entries and node labels of the virtual nodes as their plugins and daemons would."""

    def __init__(
        self,
        api: Api,
        nodes: Sequence[VirtualNode],
        *,
        api_version: str,
        namespace: str,
        node_labels: Mapping[str, str] = OWNED,
        say: Callable[[str], None] = log.info,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.claim_kind = CLAIM_KINDS[api_version]
        self.node_labels = dict(node_labels)
        self.say = say
        self.cliques = fabric_cliques(nodes)
        self.gpus = {v.name: v.inventory.node.gpus for v in nodes if v.name in self.cliques}
        self.seen: dict[str, NodeSeen] = {}
        self.holds: dict[str, DomainHold] = {}
        """Per claim (``namespace/name``): what it holds on a virtual node."""
        self.bound: dict[str, str] = {}
        """Pod UID -> the virtual node it is bound to."""
        self.written: dict[CliqueKey, Wanted] = {}
        """Per clique object: our nodes' entries as last written or found."""
        self.labels_written: dict[str, str | None] = {}
        self.stats: collections.Counter[str] = collections.Counter()
        """Writes made: ``clique writes``, ``label writes``; and ``passes`` (reconciles run)."""
        self._listed: set[str] = set()
        self._refused: dict[str, str] = {}
        self._wake = asyncio.Event()

    @classmethod
    def wanted(cls, nodes: Sequence[VirtualNode]) -> bool:
        """Whether a fleet has anything to play: a node that publishes slices in a clique."""
        return bool(fabric_cliques(nodes))

    def loops(self) -> list[Callable[[], Any]]:
        """The coroutines to run for good: three list-then-watch loops and the reconciler."""
        return [self._follow_nodes, self._follow_claims, self._follow_pods, self._reconcile_forever]

    # -- following ---------------------------------------------------------------------------------------
    def _failed(self, what: str) -> Callable[[Exception, float], None]:
        return lambda exc, pause: log.warning("IMEX daemons: %s watch ended (%s); again in %.0f s", what, exc, pause)

    def _listed_kind(self, kind: str) -> None:
        self._listed.add(kind)
        self._wake.set()

    async def _follow_nodes(self) -> None:
        def on_list(nodes: Sequence[JSON]) -> None:
            self.seen = {}
            for obj in nodes:
                self._node(obj)
            self._listed_kind("nodes")

        def on_event(event: str, obj: JSON) -> None:
            if event == "DELETED":
                self.seen.pop(str(obj["metadata"]["name"]), None)
            else:
                self._node(obj)
            self._wake.set()

        await list_then_watch(
            lambda: self.api.list_nodes(labels=self.node_labels),
            lambda version: self.api.watch_nodes(labels=self.node_labels, resource_version=version),
            on_list=on_list,
            on_event=on_event,
            on_failure=self._failed("node"),
        )

    def _node(self, obj: JSON) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        if name not in self.cliques:
            return
        value = (meta.get("annotations") or {}).get(FAULTS_ANNOTATION)
        try:
            reason = imex_not_ready_reason(decode_faults(value, f"node {name}"), self.gpus[name])
        except ValueError as exc:
            log.warning("IMEX daemons: %s; the node's daemon is taken as READY", exc)
            reason = None
        label = (meta.get("labels") or {}).get(COMPUTE_DOMAIN_LABEL) or None
        self.seen[name] = NodeSeen(node_ip(obj), reason, label)
        self.labels_written.setdefault(name, label)

    async def _follow_claims(self) -> None:
        def on_list(claims: Sequence[Any]) -> None:
            self.holds = {}
            for claim in claims:
                self._claim("ADDED", claim.to_dict())
            self._listed_kind("claims")

        def on_event(event: str, claim: Any) -> None:
            self._claim(event, claim.to_dict())
            self._wake.set()

        await list_then_watch(
            lambda: self._list(self.claim_kind, "listing ResourceClaims"),
            lambda version: self._watch(self.claim_kind, version),
            on_list=on_list,
            on_event=on_event,
            on_failure=self._failed("ResourceClaim"),
        )

    def _claim(self, event: str, obj: JSON) -> None:
        key = claim_key(obj)
        hold, refused = (None, None) if event == "DELETED" else safe_domain_hold(obj, self.cliques)
        if hold is None:
            self.holds.pop(key, None)
        else:
            self.holds[key] = hold
        if refused is not None and self._refused.get(key) != refused:
            self.say(f"warning: IMEX daemons: claim {key} would not be prepared: {refused}")
        if refused is None:
            self._refused.pop(key, None)
        else:
            self._refused[key] = refused

    async def _follow_pods(self) -> None:
        def on_list(pods: Sequence[Any]) -> None:
            self.bound = {}
            for pod in pods:
                self._pod("ADDED", pod)
            self._listed_kind("pods")

        def on_event(event: str, pod: Any) -> None:
            self._pod(event, pod)
            self._wake.set()

        await list_then_watch(
            lambda: self._list(Pod, "listing pods"),
            lambda version: self._watch(Pod, version),
            on_list=on_list,
            on_event=on_event,
            on_failure=self._failed("pod"),
        )

    def _pod(self, event: str, pod: Any) -> None:
        uid = str(pod.metadata.uid) if pod.metadata is not None else ""
        node = pod.spec.nodeName if pod.spec is not None else None
        if event != "DELETED" and node in self.cliques and pod.spec.resourceClaims:
            self.bound[uid] = node
        else:
            self.bound.pop(uid, None)

    async def _list(self, kind: Any, what: str) -> tuple[list[Any], str]:
        return await self.api.call(
            "list", what, lambda: collect(self.api.client.list(kind, namespace="*", chunk_size=LIST_CHUNK)), long=True
        )

    def _watch(self, kind: Any, version: str) -> Any:
        self.api.calls["watch"] += 1
        return self.api.client.watch(kind, namespace="*", resource_version=version)

    # -- what is wanted ----------------------------------------------------------------------------------
    def _active(self) -> list[DomainHold]:
        """The holds a kubelet would have prepared: reserved for a pod bound to their node."""
        return [h for h in self.holds.values() if any(self.bound.get(uid) == h.node for uid in h.pods)]

    def wanted_entries(self) -> dict[CliqueKey, Wanted]:
        out: dict[CliqueKey, Wanted] = collections.defaultdict(dict)
        for hold in self._active():
            seen = self.seen.get(hold.node)
            if seen is None:
                continue
            status = READY if seen.not_ready is None else NOT_READY
            for domain in hold.domains:
                out[(domain, self.cliques[hold.node])][hold.node] = (seen.ip, status)
        return dict(out)

    def wanted_labels(self) -> dict[str, str]:
        """Per node, the domain of its channel claim (NVIDIA prepares one channel claim per node; of several,
        the first domain in name order)."""
        out: dict[str, str] = {}
        for hold in sorted(self._active(), key=lambda h: sorted(h.channels)):
            for domain in sorted(hold.channels):
                out.setdefault(hold.node, domain)
        return out

    # -- writing -----------------------------------------------------------------------------------------
    async def _reconcile_forever(self) -> None:
        failures = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            if len(self._listed) < 3:
                continue  # not until every kind was listed once: a half-read cluster would remove entries
            try:
                await self.reconcile()
                failures = 0
            except Exception as exc:  # an API failure, or a bug: the daemons go on, as the watcher's workers do
                failures += 1
                pause = jittered_pause(failures)
                if not isinstance(exc, (ApiCallError, KubeconfigError, RuntimeError)):
                    log.exception("IMEX daemons: reconcile failed")
                self.say(f"warning: IMEX daemons: {exc}; trying again in {pause:.1f} s")
                await asyncio.sleep(pause)
                self._wake.set()

    async def reconcile(self) -> None:
        """Write what differs from what was last written: node labels first (the plugin labels the node before
        the daemon starts), then each clique whose virtual nodes' entries changed."""
        self.stats["passes"] += 1
        labels = self.wanted_labels()
        for node in sorted(set(labels) | {n for n, v in self.labels_written.items() if v}):
            value = labels.get(node)
            if self.labels_written.get(node) != value and node in self.seen:
                await self.api.patch_node(node, {"metadata": {"labels": {COMPUTE_DOMAIN_LABEL: value}}})
                self.labels_written[node] = value
                self.stats["label writes"] += 1
        entries = self.wanted_entries()
        for key in sorted(set(entries) | set(self.written)):
            want = entries.get(key, {})
            if self.written.get(key) == want:
                continue
            await self._write_clique(key, want)
            if want:
                self.written[key] = want
            else:
                self.written.pop(key, None)

    async def _write_clique(self, key: CliqueKey, want: Wanted) -> None:
        domain, clique = key
        name = clique_object_name(domain, clique)
        where = f"ComputeDomainClique {self.namespace}/{name}"
        for _ in range(MAX_CONFLICT_RETRIES):
            found = await self._get(name, where)
            before = [dict(e) for e in (found or {}).get("daemons") or []]
            daemons = [e for e in before if e.get("nodeName") not in self.cliques or e.get("nodeName") in want]
            for node, (ip, status) in sorted(want.items()):
                entry = {"nodeName": node, "ipAddress": ip, "cliqueID": clique, "index": 0, "status": status}
                daemons = with_entry(daemons, entry) or daemons
            if daemons == before:
                return
            try:
                if found is None:
                    await self._create(name, domain, clique, daemons, where)
                else:
                    await self._patch(found, daemons, where)
            except ApiCallError as exc:
                if exc.code in (404, 409):
                    continue  # someone else wrote it first: read it again
                raise
            self.stats["clique writes"] += 1
            self._log_changes(where, before, daemons)
            return
        raise RuntimeError(f"too many conflicting writes to {where}")

    def _log_changes(self, where: str, before: Sequence[JSON], after: Sequence[JSON]) -> None:
        old = {e.get("nodeName"): e.get("status") for e in before}
        new = {e.get("nodeName"): e.get("status") for e in after}
        for node in sorted(set(old) | set(new), key=str):
            if old.get(node) != new.get(node):
                reason = self.seen[node].not_ready if node in self.seen else None
                what = new.get(node) or "left"
                self.say(f"IMEX daemon on node {node}: {what}" + (f" ({reason})" if reason and node in new else ""))
        log.debug("%s: %d daemons", where, len(after))

    async def _get(self, name: str, where: str) -> JSON | None:
        try:
            obj: Any = await self.api.call(
                "get",
                f"reading {where}",
                lambda: self.api.client.get(ComputeDomainClique, name, namespace=self.namespace),
            )
        except ApiCallError as exc:
            if exc.code == 404:
                return None
            raise
        return dict(obj.to_dict())

    async def _create(self, name: str, domain: str, clique: str, daemons: list[JSON], where: str) -> None:
        body = {
            "apiVersion": API_VERSION,
            "kind": "ComputeDomainClique",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {COMPUTE_DOMAIN_LABEL: domain, CLIQUE_LABEL: clique},
            },
            "daemons": daemons,
        }
        await self.api.call(
            "create", f"creating {where}", lambda: self.api.client.create(ComputeDomainClique.from_dict(body))
        )

    async def _patch(self, found: JSON, daemons: list[JSON], where: str) -> None:
        meta = found["metadata"]
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "daemons": daemons}
        await self.api.call(
            "patch",
            f"patching {where}",
            lambda: self.api.client.patch(
                ComputeDomainClique, meta["name"], patch, namespace=self.namespace, patch_type=PatchType.MERGE
            ),
        )


def imex_daemons_for(controller: VirtualNodeController) -> ImexDaemons | None:
    """The IMEX daemons of the controller's managed nodes, or None when none publishes slices in a clique (or
    with ``ComputeDomainCliques`` off, said once)."""
    if controller.options is None:
        return None
    nodes = [v for name, v in controller.nodes.items() if controller.managed(name)]
    if not ImexDaemons.wanted(nodes):
        return None
    if not controller.settings.feature_gates.enabled("ComputeDomainCliques"):
        controller.say(
            "warning: ComputeDomainCliques is off: the virtual nodes do not play their IMEX daemons "
            "(their daemons would write the domains' status.nodes)"
        )
        return None
    return ImexDaemons(
        controller.api,
        nodes,
        api_version=controller.options.api_version,
        namespace=controller.settings.compute_domain_namespace,
        node_labels=OWNED,
        say=controller.say,
    )
