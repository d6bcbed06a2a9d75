"""The Events the compute-domain controller records on a ComputeDomain (what ``kubectl describe computedomain``
shows), and the texts of the status change and of a template name taken by another.

Events are named and stamped as client-go's ``record.EventRecorder`` does (``<object name>.<hex>``, one
``firstTimestamp``/``lastTimestamp``, ``count`` 1).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from fakegpu.dra.compute_domain.controller import collision_message, status_event
from fakegpu.dra.compute_domain.domain_events import domain_event

UID = "5e0c1a52-0000-4000-8000-00000000000a"


def domain(resource_version: str | None = "41") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "cd", "namespace": "team", "uid": UID}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain", "metadata": meta, "spec": {}}


def node(name: str, status: str) -> dict[str, Any]:
    return {"name": name, "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0, "status": status}


def test_an_event_points_at_its_domain_and_names_its_reporter():
    event = domain_event(domain(), "SomeReason", "some text")
    assert event["apiVersion"] == "v1" and event["kind"] == "Event"
    assert event["metadata"]["namespace"] == "team"
    assert event["involvedObject"] == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "name": "cd",
        "namespace": "team",
        "uid": UID,
        "resourceVersion": "41",
    }
    assert (event["reason"], event["message"], event["type"]) == ("SomeReason", "some text", "Normal")
    assert event["source"] == {"component": "compute-domain-controller"}
    assert event["reportingComponent"] == event["reportingInstance"] == "compute-domain-controller"
    assert event["count"] == 1


def test_a_warning_is_typed_so():
    assert domain_event(domain(), "R", "m", warning=True)["type"] == "Warning"


def test_a_domain_read_without_resource_version_gives_an_empty_one():
    assert domain_event(domain(None), "R", "m")["involvedObject"]["resourceVersion"] == ""


def test_each_event_gets_its_own_name_after_the_domain():
    names = {domain_event(domain(), "R", "m")["metadata"]["name"] for _ in range(20)}
    assert len(names) == 20
    assert all(re.fullmatch(r"cd\.[0-9a-f]{16}", name) for name in names)


def test_an_event_is_stamped_now_in_utc_to_the_second():
    before = datetime.now(UTC).replace(microsecond=0)
    event = domain_event(domain(), "R", "m")
    after = datetime.now(UTC)
    assert event["firstTimestamp"] == event["lastTimestamp"]
    stamped = datetime.strptime(event["firstTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert before <= stamped <= after


# --- the status change ------------------------------------------------------------------------------------


def test_turning_ready_is_a_normal_event_naming_the_nodes():
    event = status_event(domain(), "Ready", [node("n2", "Ready"), node("n1", "Ready")], 2)
    assert (event["reason"], event["type"]) == ("ComputeDomainReady", "Normal")
    assert event["message"] == "ComputeDomain is Ready: 2 nodes joined (numNodes 2); ready: n1, n2"


def test_turning_not_ready_is_a_warning_naming_the_waiting_nodes():
    event = status_event(domain(), "NotReady", [node("n1", "Ready"), node("n2", "NotReady")], 3)
    assert (event["reason"], event["type"]) == ("ComputeDomainNotReady", "Warning")
    assert event["message"] == "ComputeDomain is NotReady: 2 nodes joined (numNodes 3); ready: n1; not ready: n2"


def test_a_domain_not_ready_with_no_node_says_so():
    event = status_event(domain(), "NotReady", [], 1)
    assert event["message"] == "ComputeDomain is NotReady: 0 nodes joined (numNodes 1); ready: none"


# --- a template name taken by another ----------------------------------------------------------------------


def test_a_template_of_no_domain_in_the_way():
    assert collision_message("team", "cd-channel", None) == (
        "ResourceClaimTemplate 'team/cd-channel' already exists and belongs to no ComputeDomain; the domain "
        "stays NotReady until it is gone"
    )
    assert collision_message("team", "cd-channel", "") == collision_message("team", "cd-channel", None)


def test_a_template_of_another_domain_in_the_way_names_that_domain():
    other = "5e0c1a52-0000-4000-8000-00000000000b"
    assert collision_message("team", "cd-channel", other) == (
        f"ResourceClaimTemplate 'team/cd-channel' already exists and belongs to ComputeDomain {other}; the domain "
        "stays NotReady until it is gone"
    )
