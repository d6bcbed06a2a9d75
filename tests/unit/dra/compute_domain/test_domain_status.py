"""A ComputeDomain's status from its cliques: ``status.nodes``, the Ready/NotReady rule and the Events' text.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/compute-domain-controller/cdstatus.go`` and
``computedomain.go`` ``calculateGlobalStatus`` (driver 25.12, gate ComputeDomainCliques on): Ready once at
least ``numNodes`` nodes joined and none of them is NotReady.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakegpu.dra.compute_domain.domain_status import (
    clique_nodes,
    describe_nodes,
    desired_status,
    global_status,
    merged_nodes,
)

CLIQUE = "cluster-a.1"


def daemon(node: str, status: str | None = "Ready", index: int | None = 0, clique: str = CLIQUE) -> dict[str, Any]:
    """A clique's daemon entry; ``status``/``index`` None leave the field out."""
    entry: dict[str, Any] = {"nodeName": node, "ipAddress": f"10.0.0.{len(node)}", "cliqueID": clique}
    if index is not None:
        entry["index"] = index
    if status is not None:
        entry["status"] = status
    return entry


def clique(name: str, *daemons: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "daemons": list(daemons)}


def node(name: str, status: str = "Ready", clique_id: str = CLIQUE, index: int = 0) -> dict[str, Any]:
    """A ``status.nodes`` entry."""
    return {"name": name, "ipAddress": "10.0.0.9", "cliqueID": clique_id, "index": index, "status": status}


# --- status.nodes from the cliques ------------------------------------------------------------------------


def test_each_daemon_becomes_a_status_node_under_the_crd_field_names():
    (entry,) = clique_nodes([clique(f"uid.{CLIQUE}", daemon("n1", "Ready", 3))])
    assert entry == {"name": "n1", "ipAddress": "10.0.0.2", "cliqueID": CLIQUE, "index": 3, "status": "Ready"}


def test_a_daemon_without_index_or_status_is_index_0_and_not_ready():
    """The clique CRD defaults ``status`` to NotReady; an entry written without it is not counted as Ready."""
    entries = clique_nodes([clique("c", daemon("n1", None, None), daemon("n2", "", 1))])
    assert [(e["index"], e["status"]) for e in entries] == [(0, "NotReady"), (1, "NotReady")]


def test_cliques_are_read_in_name_order_and_their_daemons_in_list_order():
    cliques = [
        clique("uid.b.1", daemon("b1"), daemon("b0")),
        clique("uid.a.1", daemon("a0")),
    ]
    assert [e["name"] for e in clique_nodes(cliques)] == ["a0", "b1", "b0"]


def test_no_cliques_or_empty_cliques_give_no_nodes():
    assert clique_nodes([]) == []
    assert clique_nodes([clique("c"), {"metadata": {"name": "d"}, "daemons": None}, {"metadata": {"name": "e"}}]) == []


# --- merging with the entries written off the fabric -------------------------------------------------------


def test_entries_of_nodes_without_a_clique_are_kept_after_the_cliques_entries():
    """The node plugin of a node off the NVLink fabric writes its own entry (``cliqueID`` "")."""
    off = node("cpu-1", clique_id="", index=-1)
    assert merged_nodes([node("n1")], [off]) == [node("n1"), off]


def test_a_node_that_left_its_clique_leaves_the_status():
    """Entries with a clique are rebuilt from the cliques on every sync: one the cliques no longer list goes."""
    before = [node("n1"), node("n2", index=1)]
    after = merged_nodes(clique_nodes([clique("c", daemon("n1"))]), before)
    assert [n["name"] for n in after] == ["n1"]
    assert global_status(after, 2) == "NotReady"


def test_a_clique_entry_wins_over_an_off_fabric_entry_of_the_same_node():
    merged = merged_nodes([node("n1", "NotReady")], [node("n1", "Ready", clique_id="", index=-1)])
    assert merged == [node("n1", "NotReady")]


def test_an_off_fabric_node_listed_twice_is_kept_once_and_entries_without_clique_id_are_dropped():
    first, second = node("cpu-1", "Ready", ""), node("cpu-1", "NotReady", "")
    no_field = {k: v for k, v in node("cpu-2").items() if k != "cliqueID"}
    assert merged_nodes([], [first, second, no_field]) == [first]


def test_merging_copies_the_current_entries():
    off = node("cpu-1", clique_id="")
    merged = merged_nodes([], [off])
    merged[0]["status"] = "NotReady"
    assert off["status"] == "Ready"


# --- Ready or NotReady ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statuses", "num_nodes", "expected"),
    [
        ([], 0, "Ready"),  # numNodes 0 (NVIDIA's README example): Ready with no node at all
        ([], 1, "NotReady"),
        (["Ready"], 0, "Ready"),
        (["NotReady"], 0, "NotReady"),  # numNodes met, but a joined node is not ready
        (["Ready", "Ready"], 2, "Ready"),
        (["Ready"], 2, "NotReady"),
        (["Ready", "NotReady"], 1, "NotReady"),  # more nodes than needed do not hide a NotReady one
        (["Ready", "Ready", "Ready"], 2, "Ready"),
        (["Ready", ""], 1, "NotReady"),  # no status is NotReady
    ],
)
def test_global_status(statuses, num_nodes, expected):
    nodes = [node(f"n{i}", s) for i, s in enumerate(statuses)]
    assert global_status(nodes, num_nodes) == expected


def test_an_entry_without_status_counts_as_not_ready():
    assert global_status([{"name": "n1"}], 1) == "NotReady"


def test_desired_status_leaves_out_empty_nodes():
    """Go's ``omitempty`` on ``status.nodes``: the status written for no node is ``{status}`` alone."""
    assert desired_status([], 0) == {"status": "Ready"}
    assert desired_status([], 3) == {"status": "NotReady"}


def test_desired_status_lists_the_nodes_in_a_new_list():
    nodes = [node("n1")]
    status = desired_status(nodes, 1)
    assert status == {"status": "Ready", "nodes": [node("n1")]}
    assert status["nodes"] is not nodes


def test_a_blocked_domain_stays_not_ready_with_every_node_ready():
    """The workload template could not be made (its name is another's): the domain is not usable."""
    assert desired_status([node("n1")], 1, blocked=True) == {"status": "NotReady", "nodes": [node("n1")]}
    assert desired_status([], 0, blocked=True) == {"status": "NotReady"}


# --- the Events' summary ------------------------------------------------------------------------------------


def test_describe_nodes_names_ready_and_waiting_nodes_sorted():
    nodes = [node("n3", "NotReady"), node("n2"), node("n1"), node("n0", "NotReady")]
    assert describe_nodes(nodes, 4) == "4 nodes joined (numNodes 4); ready: n1, n2; not ready: n0, n3"


def test_describe_nodes_without_nodes_or_without_waiting_ones():
    assert describe_nodes([], 0) == "0 nodes joined (numNodes 0); ready: none"
    assert describe_nodes([node("n1", "NotReady")], 2) == "1 nodes joined (numNodes 2); ready: none; not ready: n1"
    assert describe_nodes([node("n1")], 1) == "1 nodes joined (numNodes 1); ready: n1"


# --- properties -------------------------------------------------------------------------------------------

STATUS = st.sampled_from(["Ready", "NotReady"])
NODES = st.dictionaries(st.from_regex(r"n[0-9]{1,3}", fullmatch=True), STATUS, max_size=8).map(
    lambda statuses: [node(name, status) for name, status in statuses.items()]
)


@given(NODES.flatmap(lambda nodes: st.tuples(st.just(nodes), st.permutations(nodes))), st.integers(0, 10))
def test_status_and_summary_do_not_depend_on_node_order(pair, num_nodes):
    nodes, shuffled = pair
    assert global_status(shuffled, num_nodes) == global_status(nodes, num_nodes)
    assert describe_nodes(shuffled, num_nodes) == describe_nodes(nodes, num_nodes)


@given(NODES, st.integers(0, 10))
def test_ready_exactly_when_enough_nodes_joined_and_all_are_ready(nodes, num_nodes):
    ready = len(nodes) >= num_nodes and all(n["status"] == "Ready" for n in nodes)
    assert (global_status(nodes, num_nodes) == "Ready") == ready


CLIQUES = st.dictionaries(
    st.from_regex(r"uid\.c[0-9]{1,2}\.[0-9]", fullmatch=True),
    st.lists(st.tuples(st.from_regex(r"n[0-9]{1,3}", fullmatch=True), STATUS), max_size=3),
    max_size=5,
).map(lambda by_name: [clique(name, *(daemon(n, s) for n, s in members)) for name, members in by_name.items()])


@given(CLIQUES.flatmap(lambda cliques: st.tuples(st.just(cliques), st.permutations(cliques))))
def test_status_nodes_do_not_depend_on_the_order_cliques_are_listed_in(pair):
    cliques, shuffled = pair
    assert clique_nodes(shuffled) == clique_nodes(cliques)
