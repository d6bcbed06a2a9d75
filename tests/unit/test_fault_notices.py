"""What fakegpu tells the Node about a GPU fault: the notices two snapshots of the live inventory give.

Reasons follow NVIDIA NVSentinel's platform connector (platform-connectors/pkg/connectors/kubernetes/
process_node_events.go @ 033cd49, ``updateHealthEventReason``: the check's name + ``IsNotHealthy`` /
``IsHealthy``), with its check names (``GpuXidError``, ``GpuMemWatch``, ``GpuThermalWatch``, ``GpuPowerWatch``,
``GpuNvlinkWatch``) where it has one."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.sharing.fault_notices import EMPTY_SNAPSHOT, FaultSnapshot, fault_notices
from fakegpu.sharing.gpu_faults import GpuFault, parse_fault_text
from fakegpu.sharing.live_inventory import LiveInventory
from tests.inventory_builders import inventory


def snap(live: LiveInventory) -> FaultSnapshot:
    return FaultSnapshot(live.conditions(), live.health_events())


class Follow:
    """The notices of what changed since the last look, as the Event recorder computes them (once per turn of
    the event loop, so one fault reporting several XIDs is one notice)."""

    def __init__(self, live: LiveInventory) -> None:
        self.live = live
        self.last = snap(live)

    def take(self) -> list[tuple[str, str]]:
        now = snap(self.live)
        notices = fault_notices(self.live.inventory.node, self.last, now)
        self.last = now
        return [(n.reason, n.message) for n in notices]


@pytest.fixture
def live(tmp_path: Path) -> LiveInventory:
    return LiveInventory(inventory(tmp_path, "2xh100-80gb"))


@pytest.mark.parametrize(
    ("text", "reason", "detail"),
    [
        ("xid xid=48", "GpuXidErrorIsNotHealthy", "xid, XID 48: an XID event"),
        ("off-bus", "GpuFallenOffBusIsNotHealthy", "off-bus, XID 79: the GPU has fallen off the bus"),
        ("ecc-uncorrectable", "GpuMemWatchIsNotHealthy", "XIDs 94, 63: 1 uncorrectable ECC error(s), a row remap"),
        ("ecc-correctable count=500", "GpuMemWatchIsNotHealthy", "XID 92: 500 correctable ECC errors"),
        ("thermal temperature=95", "GpuThermalWatchIsNotHealthy", "thermal: temperature 95 C, clocks cut to 55%"),
        ("power watts=800", "GpuPowerWatchIsNotHealthy", "power: power draw 800 W, clocks cut to 70%"),
        ("nvlink link=3 count=10", "GpuNvlinkWatchIsNotHealthy", "XID 74: NVLink 10 CRC errors; link(s) down: 3"),
        ("fabric", "GpuFabricWatchIsNotHealthy", "fabric: NVLink fabric registration failed (ERROR_UNKNOWN)"),
    ],
)
def test_each_kind_struck_is_one_warning_naming_the_gpu_and_its_xids(live, text, reason, detail):
    follow = Follow(live)
    gpu = live.inventory.node.gpus[1]
    live.strike_gpu("1", parse_fault_text(text, "--fault"))
    ((got_reason, message),) = follow.take()
    assert got_reason == reason
    assert message.startswith(f"GPU 1 ({gpu.uuid}): ")
    assert detail in message


def test_the_same_fault_again_reads_the_same_so_the_event_is_counted(live):
    follow = Follow(live)
    live.strike_gpu("0", GpuFault(kind="ecc-correctable", count=7))
    (first,) = follow.take()
    live.strike_gpu("0", GpuFault(kind="ecc-correctable", count=7))
    assert follow.take() == [first]


def test_recoveries_are_normal_and_a_reset_ends_every_kind_it_ends(live):
    follow = Follow(live)
    live.strike_gpu("0", GpuFault(kind="thermal"))
    live.strike_gpu("0", GpuFault(kind="nvlink"))
    live.strike_gpu("0", GpuFault(kind="xid", xid=31))
    follow.take()
    live.recover_gpu("0", "thermal")
    assert [r for r, _ in follow.take()] == ["GpuThermalWatchIsHealthy"]
    live.recover_gpu("0", "reset")
    got = follow.take()
    assert [r for r, _ in got] == ["GpuNvlinkWatchIsHealthy", "GpuXidErrorIsHealthy"]
    assert "a GPU reset ended it" in got[0][1] and "nvlink recovered" in got[0][1]


def test_a_second_xid_is_its_own_notice_and_gpu_lost_reaches_every_gpu(live):
    follow = Follow(live)
    live.strike_gpu("0", GpuFault(kind="xid", xid=48))
    assert [m.split(": ")[1] for _, m in follow.take()] == ["xid, XID 48"]
    live.inject_xid("0", 79)
    live.inject_xid("0", 13)
    assert [m.split(": ")[1] for _, m in follow.take()] == ["xid, XIDs 79, 13"]
    live.strike_gpu("0", GpuFault(kind="xid", xid=48))
    assert [m.split(": ")[1] for _, m in follow.take()] == ["xid, XID 48"]
    live.strike_gpu("1", GpuFault(kind="gpu-lost"))
    got = follow.take()
    lost = "GpuLostIsNotHealthy"
    assert [(r, m.split(" (")[0]) for r, m in got] == [(lost, "GPU 0"), (lost, "GPU 1")]
    assert "ERROR_GPU_IS_LOST while waiting for events" in got[0][1]
    assert "the GPU is lost" not in got[0][1] and "reports the GPU is lost" in got[1][1]


def test_faults_from_any_path_are_seen_an_armed_one_when_it_strikes(live):
    follow = Follow(live)
    live.strike_gpu("1", GpuFault(kind="fabric", after_calls=2))
    live.note_call()
    assert follow.take() == []
    live.note_call()
    assert [r for r, _ in follow.take()] == ["GpuFabricWatchIsNotHealthy"]
    live.set_health("0", False)
    assert [(r, m.split(": ", 1)[1]) for r, m in follow.take()] == [
        ("GpuXidErrorIsNotHealthy", "xid: marked unhealthy (fakegpu ctl health)")
    ]


def test_a_gpu_faulted_before_the_daemon_started_is_told_once(tmp_path):
    live = LiveInventory(inventory(tmp_path, "2xh100-80gb"))
    live.strike_gpu("0", GpuFault(kind="power"))
    notices = fault_notices(live.inventory.node, EMPTY_SNAPSHOT, snap(live))
    assert [n.reason for n in notices] == ["GpuPowerWatchIsNotHealthy"]
    assert fault_notices(live.inventory.node, snap(live), snap(live)) == []


def test_a_hotter_gpu_is_told_again_a_same_reading_is_not(live):
    follow = Follow(live)
    live.strike_gpu("0", GpuFault(kind="thermal", temperature=90))
    follow.take()
    live.strike_gpu("0", GpuFault(kind="thermal", temperature=90))
    assert follow.take() == []
    live.strike_gpu("0", GpuFault(kind="thermal", temperature=99))
    assert [m.split(": ", 1)[1][:24] for _, m in follow.take()] == ["thermal: temperature 99 "]


def test_an_xid_fault_naming_an_ecc_xid_is_told_as_an_xid(live):
    follow = Follow(live)
    live.strike_gpu("0", GpuFault(kind="ecc-uncorrectable"))
    follow.take()
    live.strike_gpu("0", GpuFault(kind="xid", xid=94))
    assert [(r, m.split(": ")[1]) for r, m in follow.take()] == [("GpuXidErrorIsNotHealthy", "xid, XID 94")]
    live.inject_xid("0", 94)  # the same XID again, no new kind: the ECC fault's XID
    assert [r for r, _ in follow.take()] == ["GpuMemWatchIsNotHealthy"]
