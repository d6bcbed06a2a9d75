"""What the compute-domain plugin reads of the API objects: the node's clique, the clique object's name, and
whether this node's daemon is Ready in the domain.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/compute-domain-kubelet-plugin/computedomain.go``
(``getCliqueID``; ``AssertComputeDomainReady``: the node's entry in its ComputeDomainClique on a fabric node,
in the domain's ``status.nodes`` on a node without a clique).
"""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.dra.compute_domain.domain_api import clique_object_name, ready_in_clique, ready_in_status
from fakegpu.dra.compute_domain.fabric_clique import node_clique_id
from fakegpu.sharing.live_inventory import LiveInventory
from tests.inventory_builders import inventory

CLUSTER = "1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10"
DOMAIN = "5e0c1a52-0000-4000-8000-00000000000a"
NODE = "node-a"


def clique(*daemons: tuple[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{DOMAIN}.{CLUSTER}.3"},
        "daemons": [
            {"nodeName": n, "ipAddress": "10.0.0.1", "cliqueID": f"{CLUSTER}.3", "status": s} for n, s in daemons
        ],
    }


def domain(*nodes: tuple[str, str]) -> dict[str, Any]:
    entries = [{"name": n, "ipAddress": "10.0.0.1", "cliqueID": "", "index": -1, "status": s} for n, s in nodes]
    return {"metadata": {"uid": DOMAIN}, "status": {"status": "NotReady", "nodes": entries}}


def test_the_clique_of_a_fabric_node_is_cluster_uuid_dot_clique_id(tmp_path):
    spec = {
        "version": "v1",
        "fabric": {"clusterUUID": CLUSTER, "cliqueID": 3},
        "gpus": [{"model": "gb200", "count": 4}],
    }
    assert node_clique_id(LiveInventory(inventory(tmp_path, node_spec=spec)).inventory.node) == f"{CLUSTER}.3"


def test_a_node_off_the_fabric_has_no_clique(tmp_path):
    assert node_clique_id(LiveInventory(inventory(tmp_path, "2xh100-80gb")).inventory.node) == ""


def test_one_clique_object_per_domain_and_clique():
    assert clique_object_name(DOMAIN, f"{CLUSTER}.3") == f"{DOMAIN}.{CLUSTER}.3"


@pytest.mark.parametrize(
    ("found", "ready"),
    [
        (None, False),  # no daemon of the domain wrote the clique yet
        (clique(), False),
        ({"metadata": {}, "daemons": None}, False),
        (clique(("node-b", "Ready")), False),  # another node's readiness is not this one's
        (clique((NODE, "NotReady"), ("node-b", "Ready")), False),
        (clique(("node-b", "NotReady"), (NODE, "Ready")), True),
    ],
)
def test_ready_in_the_clique(found, ready):
    assert ready_in_clique(found, NODE) is ready


@pytest.mark.parametrize(
    ("found", "ready"),
    [
        ({"metadata": {"uid": DOMAIN}}, False),  # no status yet
        ({"metadata": {"uid": DOMAIN}, "status": {"status": "Ready"}}, False),  # numNodes 0: Ready without nodes
        (domain(("node-b", "Ready")), False),
        (domain((NODE, "NotReady")), False),
        (domain((NODE, "Ready")), True),
    ],
)
def test_ready_in_the_domain_status(found, ready):
    """The domain's own status does not count: only this node's entry does."""
    assert ready_in_status(found, NODE) is ready
