"""The fault plan (validation, firing order, scoping and exhaustion) and each face's faultable RPCs."""

from __future__ import annotations

import pytest

from fakegpu.control.fault_ops import FaultableRpcs
from fakegpu.control.protocol import AdminError
from fakegpu.dra.admin_ops import DRA_FAULTS
from fakegpu.fakeplugin.admin_ops import DEVICE_PLUGIN_FAULTS
from fakegpu.kubeletapi.dra.v1beta1 import api_pb2 as dra_v1beta1
from fakegpu.sharing.faults import FaultError, FaultPlan


def test_faults_fire_oldest_first_and_run_out():
    plan = FaultPlan()
    plan.inject("Allocate", times=2, code="INTERNAL")
    plan.inject("Allocate", delay=0.5)
    for _ in range(2):
        fault = plan.take("Allocate")
        assert fault is not None and fault.code == "INTERNAL"
    delayed = plan.take("Allocate")
    assert delayed is not None and delayed.code is None and delayed.delay == 0.5
    assert plan.take("Allocate") is None
    assert plan.fired == [("Allocate", "failed with INTERNAL")] * 2 + [("Allocate", "delayed 0.5s")]


def test_scoped_faults_only_hit_their_resource():
    plan = FaultPlan()
    plan.inject("Allocate", code="UNAVAILABLE", resource="nvidia.com/mig-1g.10gb")
    assert plan.take("Allocate", "nvidia.com/gpu") is None
    assert plan.take("Allocate", "nvidia.com/mig-1g.10gb") is not None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "Allocate", "code": "BROKEN"}, "unknown gRPC status code 'BROKEN'"),
        ({"method": "Allocate"}, "needs a status code to fail with or a delay"),
        ({"method": "Allocate", "code": "INTERNAL", "times": 0}, "times must be at least 1"),
        ({"method": "Allocate", "delay": 9999}, "delay must be between 0 and 3600"),
    ],
)
def test_bad_faults_are_refused(kwargs, message):
    method = kwargs.pop("method")
    with pytest.raises(FaultError, match=message):
        FaultPlan().inject(method, **kwargs)


def test_clear():
    plan = FaultPlan()
    plan.inject("Allocate", code="INTERNAL")
    plan.inject("PreStartContainer", code="INTERNAL")
    assert plan.clear("Allocate") == 1
    assert [f.method for f in plan.faults] == ["PreStartContainer"]
    assert plan.clear() == 1 and plan.faults == []


def test_negative_delay_names_the_range():
    with pytest.raises(FaultError, match="delay must be between 0 and 3600 seconds, found -5"):
        FaultPlan().inject("Allocate", delay=-5)


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
