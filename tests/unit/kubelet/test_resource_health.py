"""The kubelet's DRA health info cache and a container's DRA ``allocatedResourcesStatus`` entries.

Follows kubernetes pkg/kubelet/cm/dra/healthinfo.go (getHealthInfo, updateHealthInfo, clearDriver) at commit
0062353 and ``UpdateAllocatedResourcesStatus`` in pkg/kubelet/cm/dra/manager.go (v1.36).
"""

from __future__ import annotations

from fakegpu.kubelet.container_claims import ContainerClaim
from fakegpu.kubelet.dra_health import DEFAULT_HEALTH_TIMEOUT, HealthInfoCache
from fakegpu.kubelet.dra_plugins import PreparedDevice
from fakegpu.kubelet.dra_state import ClaimInfo
from fakegpu.kubelet.pod_records import PodRecord, read_records, write_record
from fakegpu.kubelet.resource_health import dra_status
from fakegpu.kubeletapi.drahealth.v1alpha1 import api_pb2

DRIVER = "gpu.nvidia.com"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def report(*devices: tuple[str, api_pb2.HealthStatus.ValueType, str, int]) -> api_pb2.NodeWatchResourcesResponse:
    return api_pb2.NodeWatchResourcesResponse(
        devices=[
            api_pb2.DeviceHealth(
                device=api_pb2.DeviceIdentifier(pool_name="node-a", device_name=name),
                health=health,
                message=message,
                health_check_timeout_seconds=timeout,
            )
            for name, health, message, timeout in devices
        ]
    )


def test_health_is_unknown_until_reported_and_again_once_too_old():
    clock = Clock()
    cache = HealthInfoCache(clock)
    assert cache.get(DRIVER, "node-a", "gpu-0") == ("Unknown", "")
    changed = cache.update(
        DRIVER, report(("gpu-0", api_pb2.UNHEALTHY, "XID 79", 60), ("gpu-1", api_pb2.HEALTHY, "", 0))
    )
    assert changed == ["node-a/gpu-0", "node-a/gpu-1"]
    assert cache.get(DRIVER, "node-a", "gpu-0") == ("Unhealthy", "XID 79")
    assert cache.get(DRIVER, "node-a", "gpu-1") == ("Healthy", "")
    assert (
        cache.update(DRIVER, report(("gpu-0", api_pb2.UNHEALTHY, "XID 79", 60), ("gpu-1", api_pb2.HEALTHY, "", 0)))
        == []
    )
    clock.now += DEFAULT_HEALTH_TIMEOUT + 1  # a timeout of 0 is the default 30 s
    assert cache.get(DRIVER, "node-a", "gpu-1") == ("Unknown", "")
    assert cache.get(DRIVER, "node-a", "gpu-0") == ("Unhealthy", "XID 79")  # its own 60 s
    clock.now += 30
    assert cache.get(DRIVER, "node-a", "gpu-0") == ("Unknown", "")


def test_a_device_left_out_of_a_report_turns_unknown_after_its_timeout_and_an_ended_stream_forgets_all():
    clock = Clock()
    cache = HealthInfoCache(clock)
    cache.update(DRIVER, report(("gpu-0", api_pb2.HEALTHY, "", 10), ("gpu-1", api_pb2.HEALTHY, "", 10)))
    clock.now += 5
    assert cache.update(DRIVER, report(("gpu-0", api_pb2.HEALTHY, "", 10))) == []  # gpu-1 not stale yet
    clock.now += 6
    assert cache.update(DRIVER, report(("gpu-0", api_pb2.HEALTHY, "", 10))) == ["node-a/gpu-1"]
    assert cache.drivers[DRIVER]["node-a/gpu-1"].health == "Unknown"
    assert cache.next_expiry() == clock.now + 10
    assert cache.clear_driver(DRIVER)
    assert cache.get(DRIVER, "node-a", "gpu-0") == ("Unknown", "")
    assert not cache.clear_driver(DRIVER)


def claim(name: str, cdi: bool = True) -> ClaimInfo:
    devices = [
        PreparedDevice("node-a", "gpu-0", ("gpu",), (f"k8s.gpu.nvidia.com/claim=uid-{name}-gpu-0",) if cdi else ()),
        PreparedDevice("node-a", "gpu-1", ("other",), ()),
    ]
    return ClaimInfo(f"uid-{name}", name, "default", (DRIVER,), {"p"}, {DRIVER: devices}, prepared=True)


def test_entries_are_named_for_the_pod_claim_and_list_every_device_of_the_claim():
    clock = Clock()
    cache = HealthInfoCache(clock)
    cache.update(DRIVER, report(("gpu-0", api_pb2.UNHEALTHY, "XID 79", 0)))
    claims = {"trainer-g-x1": claim("trainer-g-x1"), "direct": claim("direct")}
    refs = [ContainerClaim("trainer-g-x1", "gpu"), ContainerClaim("direct")]
    entries = {"g": "trainer-g-x1"}  # status.resourceClaimStatuses: only the claim made from a template
    assert dra_status(refs, entries, claims, cache) == [
        {
            "name": "claim:g/gpu",
            "resources": [
                {
                    "health": "Unhealthy",
                    "message": "XID 79",
                    "resourceID": "k8s.gpu.nvidia.com/claim=uid-trainer-g-x1-gpu-0",
                },
                {"health": "Unknown", "resourceID": "gpu.nvidia.com/node-a/gpu-1"},
            ],
        }
    ]


def test_a_claim_not_prepared_has_no_entry():
    cache = HealthInfoCache(Clock())
    info = claim("c")
    info.prepared = False
    assert dra_status([ContainerClaim("c")], {"c": "c"}, {"c": info}, cache) == []


def test_a_pods_claim_entries_survive_in_its_record(tmp_path):
    """A restarted emulator still names the entries ``claim:<pod claim name>`` (the API server's pod status would
    tell a restarted kubelet)."""
    record = PodRecord("u1", "trainer", "default", (), "Running", claims=(), claim_entries={"g": "trainer-g-x1"})
    write_record(tmp_path, record)
    (back,) = read_records(tmp_path)
    assert back.claim_entries == {"g": "trainer-g-x1"}
    write_record(tmp_path, PodRecord("u2", "plain", "default", (), "Running", order=1))
    assert [r.claim_entries for r in read_records(tmp_path)] == [{"g": "trainer-g-x1"}, None]
