"""The emulated IMEX daemon's rules: the address it announces, its index in the clique, and when it says Ready.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/compute-domain-daemon`` (driver 25.12): a daemon upserts
its entry ``{nodeName, ipAddress, cliqueID, index, status}`` in its ComputeDomainClique, taking the lowest
free index; it is Ready once ``nvidia-imex-ctl -q`` answers READY, which stops while the node's GPUs fail,
and on a node without a clique its check is a no-op. Writing the entries to the API server is covered by
tests/integration/test_compute_domain_plugin.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lightkube.models.core_v1 import NodeAddress, NodeStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node

from fakegpu.dra.compute_domain.daemon_emulation import daemon_status, internal_ip, lowest_free_index, with_entry

CLIQUE = "cluster-a.1"


def k8s_node(*addresses: tuple[str, str]) -> Node:
    return Node(
        metadata=ObjectMeta(name="n1"),
        status=NodeStatus(addresses=[NodeAddress(type=t, address=a) for t, a in addresses]),
    )


def entry(node: str, index: int = 0, status: str = "NotReady") -> dict[str, Any]:
    return {"nodeName": node, "ipAddress": "10.0.0.1", "cliqueID": CLIQUE, "index": index, "status": status}


# --- the announced address ----------------------------------------------------------------------------------


def test_the_daemon_announces_the_node_internal_ip():
    assert (
        internal_ip(k8s_node(("Hostname", "n1"), ("ExternalIP", "1.2.3.4"), ("InternalIP", "10.1.0.7"))) == "10.1.0.7"
    )


@pytest.mark.parametrize(
    "node",
    [None, Node(metadata=ObjectMeta(name="n1")), k8s_node(), k8s_node(("Hostname", "n1"))],
    ids=["no node", "no status", "no addresses", "no InternalIP"],
)
def test_without_an_internal_ip_the_daemon_announces_localhost(node):
    assert internal_ip(node) == "127.0.0.1"


def test_an_empty_internal_ip_is_passed_over():
    assert internal_ip(k8s_node(("InternalIP", ""), ("InternalIP", "10.1.0.8"))) == "10.1.0.8"


# --- the index in the clique ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("indexes", "expected"), [([], 0), ([0], 1), ([1], 0), ([0, 1, 3], 2), ([2, 0, 1], 3), ([None, 0], 1)]
)
def test_lowest_free_index_fills_the_first_gap(indexes, expected):
    entries = [{"nodeName": f"n{i}"} | ({"index": x} if x is not None else {}) for i, x in enumerate(indexes)]
    assert lowest_free_index(entries) == expected


@given(st.sets(st.integers(0, 40), max_size=30))
def test_lowest_free_index_is_free_and_every_smaller_one_is_taken(taken):
    index = lowest_free_index([{"index": i} for i in taken])
    assert index not in taken
    assert set(range(index)) <= taken


def test_a_node_joining_takes_the_lowest_free_index_and_goes_last():
    daemons = [entry("n0", 0), entry("n2", 2)]
    assert with_entry(daemons, entry("n3", 99, "NotReady")) == [entry("n0", 0), entry("n2", 2), entry("n3", 1)]


def test_a_member_keeps_its_index_when_its_status_changes():
    """Even with a lower index free: a daemon's index is its identity in the IMEX config."""
    daemons = [entry("n5", 5), entry("n1", 1)]
    assert with_entry(daemons, entry("n5", 0, "Ready")) == [entry("n1", 1), entry("n5", 5, "Ready")]


def test_an_entry_already_as_wanted_needs_no_write():
    assert with_entry([entry("n0", 0), entry("n1", 1, "Ready")], entry("n1", 0, "Ready")) is None


def test_a_changed_address_is_written():
    moved = {**entry("n1", 1), "ipAddress": "10.0.0.2"}
    assert with_entry([entry("n0", 0), entry("n1", 1)], moved) == [entry("n0", 0), moved]


def test_a_node_listed_twice_is_written_once_with_its_first_index():
    daemons = [entry("n1", 3), entry("n0", 0), entry("n1", 4)]
    assert with_entry(daemons, entry("n1", 0)) == [entry("n0", 0), entry("n1", 3)]


def test_the_clique_read_is_left_untouched():
    daemons = [entry("n0", 0)]
    with_entry(daemons, entry("n1"))
    assert daemons == [entry("n0", 0)]


# --- Ready or not ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("remaining", "clique", "unhealthy", "expected"),
    [
        (0.5, CLIQUE, set(), ("NotReady", f"started, clique {CLIQUE}")),
        (0.5, "", set(), ("NotReady", "started, no clique")),
        (0.5, CLIQUE, {"GPU-b"}, ("NotReady", f"started, clique {CLIQUE}")),
        (0.0, CLIQUE, set(), ("Ready", "nvidia-imex-ctl -q answers READY")),
        (
            -3.0,
            CLIQUE,
            ["GPU 0 lost", "GPU 1 unhealthy"],
            ("NotReady", "IMEX daemon not ready: GPU 0 lost; GPU 1 unhealthy"),
        ),
        (0.0, "", set(), ("Ready", "check succeeded (noop, clique ID is empty)")),
        (0.0, "", {"GPU-a"}, ("Ready", "check succeeded (noop, clique ID is empty)")),
    ],
    ids=[
        "starting",
        "starting off the fabric",
        "starting with a bad GPU",
        "started",
        "a GPU unhealthy",
        "off the fabric",
        "off the fabric health does not matter",
    ],
)
def test_daemon_status(remaining, clique, unhealthy, expected):
    assert daemon_status(remaining, clique, unhealthy) == expected
