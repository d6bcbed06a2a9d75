"""A ComputeDomain's status as NVIDIA's controller computes it (driver 25.12, gate ComputeDomainCliques on;
``kubernetes-sigs/dra-driver-nvidia-gpu`` ``cmd/compute-domain-controller/cdstatus.go`` and
``computedomain.go`` ``calculateGlobalStatus``): the daemons of the domain's cliques become ``status.nodes``,
and the domain is Ready once at least ``numNodes`` nodes joined and none is NotReady.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fakegpu.dra.compute_domain.resources import NOT_READY, READY

Node = dict[str, Any]


def clique_nodes(cliques: Iterable[Mapping[str, Any]]) -> list[Node]:
    """The ``status.nodes`` entries of the daemons the cliques list, cliques in name order."""
    nodes: list[Node] = []
    for clique in sorted(cliques, key=lambda c: str(c["metadata"]["name"])):
        for daemon in clique.get("daemons") or []:
            nodes.append(
                {
                    "name": daemon["nodeName"],
                    "ipAddress": daemon["ipAddress"],
                    "cliqueID": daemon["cliqueID"],
                    "index": daemon.get("index", 0),
                    "status": daemon.get("status") or NOT_READY,
                }
            )
    return nodes


def merged_nodes(from_cliques: Sequence[Node], current: Sequence[Mapping[str, Any]]) -> list[Node]:
    """The cliques' entries, then the current entries off the NVLink fabric (``cliqueID`` "", which the node
    plugin writes for a node without a clique), each node once: a clique's entry wins."""
    seen = {n["name"] for n in from_cliques}
    nodes = list(from_cliques)
    for entry in current:
        if entry.get("cliqueID") == "" and entry.get("name") not in seen:
            seen.add(entry["name"])
            nodes.append(dict(entry))
    return nodes


def global_status(nodes: Sequence[Mapping[str, Any]], num_nodes: int) -> str:
    """``calculateGlobalStatus``: NotReady while fewer than ``num_nodes`` nodes joined or any is NotReady."""
    if len(nodes) < num_nodes:
        return NOT_READY
    if any((n.get("status") or NOT_READY) == NOT_READY for n in nodes):
        return NOT_READY
    return READY


def desired_status(nodes: Sequence[Node], num_nodes: int, *, blocked: bool = False) -> dict[str, Any]:
    """The status to write: ``nodes`` omitted when empty (Go's omitempty); ``blocked`` (the workload template
    could not be made) keeps the domain NotReady."""
    status: dict[str, Any] = {"status": NOT_READY if blocked else global_status(nodes, num_nodes)}
    if nodes:
        status["nodes"] = list(nodes)
    return status


def describe_nodes(nodes: Sequence[Mapping[str, Any]], num_nodes: int) -> str:
    """``2 nodes joined (numNodes 2); ready: a, b; not ready: c``, for an Event's message."""
    ready = sorted(n["name"] for n in nodes if n.get("status") == READY)
    waiting = sorted(n["name"] for n in nodes if n.get("status") != READY)
    parts = [f"{len(nodes)} nodes joined (numNodes {num_nodes})"]
    parts.append(f"ready: {', '.join(ready) or 'none'}")
    if waiting:
        parts.append(f"not ready: {', '.join(waiting)}")
    return "; ".join(parts)
