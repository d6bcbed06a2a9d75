"""The fault spec (validation, texts), the plan (firing order, scoping and exhaustion) and each face's
faultable RPCs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fakegpu.control.fault_ops import FaultableRpcs
from fakegpu.control.protocol import AdminError
from fakegpu.dra.admin_ops import DRA_FAULTS
from fakegpu.fakeplugin.admin_ops import DEVICE_PLUGIN_FAULTS
from fakegpu.kubeletapi.dra.v1beta1 import api_pb2 as dra_v1beta1
from fakegpu.sharing.errors import error_message
from fakegpu.sharing.faults import FaultPlan, FaultSpec


def test_faults_fire_oldest_first_and_run_out():
    plan = FaultPlan()
    plan.inject("Allocate", FaultSpec(times=2, code="INTERNAL"))
    plan.inject("Allocate", FaultSpec(delay=0.5))
    for _ in range(2):
        fault = plan.take("Allocate")
        assert fault is not None and fault.spec.code == "INTERNAL"
    delayed = plan.take("Allocate")
    assert delayed is not None and delayed.spec.code is None and delayed.spec.delay == 0.5
    assert plan.take("Allocate") is None
    assert plan.fired == [("Allocate", "failed with INTERNAL")] * 2 + [("Allocate", "delayed 0.5s")]


def test_scoped_faults_only_hit_their_resource():
    plan = FaultPlan()
    plan.inject("Allocate", FaultSpec(code="UNAVAILABLE", resource="nvidia.com/mig-1g.10gb"))
    assert plan.take("Allocate", "nvidia.com/gpu") is None
    assert plan.take("Allocate", "nvidia.com/mig-1g.10gb") is not None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"code": "BROKEN"}, "unknown gRPC status code 'BROKEN'; expected one of: CANCELLED, UNKNOWN, "),
        ({}, "a fault needs a 'code' to fail with or a 'delay' in seconds"),
        ({"code": "INTERNAL", "times": 0}, "times must be at least 1, found 0"),
        ({"delay": 9999}, "delay must be between 0 and 3600 seconds, found 9999.0"),
        ({"delay": -5}, "delay must be between 0 and 3600 seconds, found -5.0"),
        ({"delay": float("nan")}, "delay must be between 0 and 3600 seconds, found nan"),
    ],
)
def test_bad_faults_are_refused_in_the_specs_words(kwargs, message):
    with pytest.raises(ValidationError) as refused:
        FaultSpec(**kwargs)
    [error] = refused.value.errors(include_url=False)
    assert error_message(error).startswith(message)


def test_a_spec_takes_only_its_own_fields_strictly():
    with pytest.raises(ValidationError, match="colour"):
        FaultSpec.model_validate({"code": "INTERNAL", "colour": "red"})
    with pytest.raises(ValidationError, match="times"):
        FaultSpec.model_validate({"code": "INTERNAL", "times": "2"})


def test_clear():
    plan = FaultPlan()
    plan.inject("Allocate", FaultSpec(code="INTERNAL"))
    plan.inject("PreStartContainer", FaultSpec(code="INTERNAL"))
    assert plan.clear("Allocate") == 1
    assert [f.method for f in plan.faults] == ["PreStartContainer"]
    assert plan.clear() == 1 and plan.faults == []


@pytest.mark.parametrize(
    ("spec", "effect", "step", "fired"),
    [
        (
            FaultSpec(code="INTERNAL", message="boom"),
            "fail with INTERNAL: boom",
            "fail with INTERNAL",
            "failed with INTERNAL",
        ),
        (FaultSpec(delay=0.5), "take 0.5s", "take 0.5 s", "delayed 0.5s"),
        (
            FaultSpec(delay=2, code="UNAVAILABLE"),
            "take 2s then fail with UNAVAILABLE: injected fault: Allocate fails with UNAVAILABLE",
            "take 2 s then fail with UNAVAILABLE",
            "delayed 2.0s then failed with UNAVAILABLE",
        ),
    ],
)
def test_a_specs_texts(spec: FaultSpec, effect: str, step: str, fired: str):
    assert spec.effect(spec.status_message("Allocate")) == effect
    assert spec.effect(seconds=" s") == step
    assert spec.fired() == fired


def test_a_planned_fault_is_described_by_its_fields_and_read_back_for_its_texts():
    fault = FaultPlan().inject("Allocate", FaultSpec(times=3, code="INTERNAL", resource="nvidia.com/gpu"))
    answer = fault.described("times")
    assert answer == {
        "method": "Allocate",
        "times": 3,
        "code": "INTERNAL",
        "message": "injected fault: Allocate fails with INTERNAL",
        "delay": 0.0,
        "resource": "nvidia.com/gpu",
        "after": 0,
    }
    assert list(answer) == ["method", "times", "code", "message", "delay", "resource", "after"]
    assert list(fault.described("remaining"))[1] == "remaining"
    assert FaultSpec.shown(answer).effect(answer["message"]) == (
        "fail with INTERNAL: injected fault: Allocate fails with INTERNAL"
    )
    delayed = FaultPlan().inject("Allocate", FaultSpec(delay=1, message="unused")).described("remaining")
    assert delayed["message"] == "", "a fault that does not fail has no message to show"


def test_each_face_faults_exactly_the_rpcs_it_serves():
    assert DEVICE_PLUGIN_FAULTS.rpcs == (
        "GetDevicePluginOptions",
        "ListAndWatch",
        "GetPreferredAllocation",
        "Allocate",
        "PreStartContainer",
    )
    assert DRA_FAULTS.rpcs == ("NodePrepareResources", "NodeUnprepareResources")
    v1beta1 = dra_v1beta1.DESCRIPTOR.services_by_name["DRAPlugin"].methods
    assert tuple(m.name for m in v1beta1) == DRA_FAULTS.rpcs, "the DRA driver serves v1beta1 too"
    assert (DEVICE_PLUGIN_FAULTS.kind, DRA_FAULTS.kind) == ("device-plugin", "dra")


@pytest.mark.parametrize(
    ("face", "method"),
    [
        (DEVICE_PLUGIN_FAULTS, "Alocate"),
        (DEVICE_PLUGIN_FAULTS, "NodePrepareResources"),
        (DEVICE_PLUGIN_FAULTS, "NodeUnprepareResources"),
        (DRA_FAULTS, "Allocate"),
        (DRA_FAULTS, "ListAndWatch"),
    ],
)
def test_a_fault_for_an_rpc_the_face_does_not_serve_is_refused(face: FaultableRpcs, method: str):
    with pytest.raises(AdminError) as refused:
        face.check(method)
    assert str(refused.value) == (
        f"this daemon does not serve {method!r}; faults can be injected into: {', '.join(face.rpcs)}"
    )


def test_every_rpc_a_face_serves_can_be_faulted():
    for face in (DEVICE_PLUGIN_FAULTS, DRA_FAULTS):
        for method in face.rpcs:
            face.check(method)


def test_a_fault_with_after_lets_that_many_calls_pass_then_hits_times_calls():
    """ "Fail after N calls" for RPCs, as NVIDIA's mock NVML's ``after_calls`` trigger counts calls before it
    trips (NVIDIA/k8s-test-infra pkg/gpu/mocknvml/engine/failure_injector.go @ 08a563f): ``after`` calls of
    the RPC pass untouched, the next ``times`` fail, the ones after pass again."""
    plan = FaultPlan()
    plan.inject("Allocate", FaultSpec(after=2, times=2, code="INTERNAL"))
    hits = [plan.take("Allocate", "nvidia.com/gpu") is not None for _ in range(5)]
    assert hits == [False, False, True, True, False]
    assert plan.faults == []


def test_calls_of_another_rpc_or_resource_do_not_count_and_a_waiting_fault_counts_calls_others_hit():
    plan = FaultPlan()
    waiting = plan.inject("Allocate", FaultSpec(after=1, code="INTERNAL", resource="nvidia.com/gpu"))
    first = plan.inject("Allocate", FaultSpec(code="UNAVAILABLE"))
    assert plan.take("ListAndWatch", "nvidia.com/gpu") is None
    assert plan.take("Allocate", "nvidia.com/mig-1g.10gb") is first, "another resource's call: the open fault"
    assert waiting.passing == 1
    assert plan.take("Allocate", "nvidia.com/gpu") is None, "the call that counts passes"
    assert plan.take("Allocate", "nvidia.com/gpu") is waiting
    assert plan.fired == [("Allocate", "failed with UNAVAILABLE"), ("Allocate", "failed with INTERNAL")]


@pytest.mark.parametrize(
    ("after", "text"),
    [(0, "the next 2 Allocate call(s)"), (3, "2 Allocate call(s) after the next 3")],
)
def test_which_calls_a_fault_hits_is_said_with_its_after(after: int, text: str):
    spec = FaultSpec(times=2, after=after, code="INTERNAL")
    assert spec.calls("Allocate", spec.times, spec.after) == text
    assert FaultPlan().inject("Allocate", spec).described("remaining")["after"] == after


@pytest.mark.parametrize("after", [-1, 10**6 + 1])
def test_after_out_of_range_is_refused_naming_the_bounds(after: int):
    with pytest.raises(ValidationError, match="after must be between 0 and 1000000 calls"):
        FaultSpec(after=after, code="INTERNAL")
