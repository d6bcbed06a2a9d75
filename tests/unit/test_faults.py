"""The fault plan: validation, firing order, scoping and exhaustion."""

from __future__ import annotations

import pytest

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
        ({"method": "Alocate", "code": "INTERNAL"}, "unknown RPC 'Alocate'"),
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
