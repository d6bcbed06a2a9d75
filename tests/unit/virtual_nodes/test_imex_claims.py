"""What a compute-domain claim holds on a virtual node, read as NVIDIA's compute-domain plugin reads it
(kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/compute-domain-kubelet-plugin/device_state.go`` at commit
0807eed: the driver's results on the node, the domain each result's config names)."""

from __future__ import annotations

from typing import Any

from fakegpu.virtual_nodes.imex_claims import domain_hold, safe_domain_hold
from tests.claim_builders import allocated_claim, channel_claim, daemon_claim

NODES = {"vn-0", "vn-1"}


def stored(claim: dict[str, Any]) -> dict[str, Any]:
    """As the API server hands it out: with a UID."""
    claim["metadata"]["uid"] = f"uid-{claim['metadata']['name']}"
    return claim


def reserved(claim: dict[str, Any], *uids: str) -> dict[str, Any]:
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": f"pod-{u}", "uid": u} for u in uids]
    return claim


def test_a_channel_claim_holds_its_domain_on_its_node_for_its_pods():
    hold = domain_hold(reserved(stored(channel_claim("c", "vn-1", "dom-a", namespace="team")), "p1"), NODES)
    assert hold is not None
    assert (hold.node, hold.pods, hold.channels) == ("vn-1", frozenset({"p1"}), frozenset({"dom-a"}))
    assert hold.daemons == frozenset()


def test_a_daemon_claim_holds_the_domain_without_a_channel():
    hold = domain_hold(stored(daemon_claim("d", "vn-0", "dom-b", namespace="fakegpu")), NODES)
    assert hold is not None and hold.daemons == {"dom-b"} and hold.channels == frozenset()
    assert hold.domains == {"dom-b"}


def test_claims_elsewhere_or_unallocated_hold_nothing():
    assert domain_hold(channel_claim("c", "real-node", "dom-a"), NODES) is None
    assert domain_hold(allocated_claim("g", "vn-0"), NODES) is None  # the GPU driver's claim
    claim = channel_claim("c", "vn-0", "dom-a")
    del claim["status"]["allocation"]
    assert domain_hold(claim, NODES) is None


def test_a_claim_the_plugin_would_refuse_holds_nothing_and_says_why():
    hold, why = safe_domain_hold(stored(channel_claim("c", "vn-0", None)), NODES)
    assert hold is None
    assert why is not None and "domainID cannot be empty" in why
