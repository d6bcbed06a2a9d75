"""The GPU fault model: what each kind leaves on a GPU and which XIDs the driver reports (NVIDIA's XID
catalog, https://docs.nvidia.com/deploy/xid-errors/ : 48 DBE, 63 row-remap/page-retirement event, 74 NVLink,
79 off the bus, 92 high SBE rate, 94/95 contained/uncontained ECC)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.sharing.catalog import CATALOG
from fakegpu.sharing.fault_record import decode_faults, encode_faults
from fakegpu.sharing.gpu_condition import HEALTHY_CONDITION, recover, strike
from fakegpu.sharing.gpu_faults import FAULT_KINDS, KINDS, GpuFault, parse_fault_text
from fakegpu.sharing.live_inventory import LiveInventory, UnknownDeviceError
from tests.inventory_builders import inventory

H100 = CATALOG["h100-80gb"]
V100 = next(m for m in CATALOG.values() if m.architecture == "Volta")


def test_every_kind_has_its_facts() -> None:
    assert set(FAULT_KINDS) == set(KINDS)


@pytest.mark.parametrize(
    ("text", "xids"),
    [
        ("xid xid=13", (13,)),
        ("off-bus", (79,)),
        ("gpu-lost", ()),
        ("ecc-uncorrectable", (94, 63)),
        ("ecc-uncorrectable contained=false", (95, 63)),
        ("ecc-correctable count=5000", (92,)),
        ("thermal", ()),
        ("power watts=800", ()),
        ("nvlink link=3", (74,)),
        ("fabric", ()),
    ],
)
def test_xids_of_each_kind_on_hopper(text: str, xids: tuple[int, ...]) -> None:
    _, got = strike(HEALTHY_CONDITION, parse_fault_text(text, "--fault"), H100)
    assert got == xids


def test_uncorrectable_ecc_remaps_rows_from_ampere_and_retires_pages_before() -> None:
    fault = parse_fault_text("ecc-uncorrectable count=2", "--fault")
    hopper, _ = strike(HEALTHY_CONDITION, fault, H100)
    assert (hopper.remapped_rows_uncorrectable, hopper.remapped_rows_pending, hopper.ecc_dbe_volatile) == (2, True, 2)
    volta, xids = strike(HEALTHY_CONDITION, fault, V100)
    assert (volta.retired_pages_dbe, volta.retired_pages_pending, xids) == (2, True, (48, 63))
    reset = recover(hopper, "reset")
    assert (reset.ecc_dbe_volatile, reset.ecc_dbe_aggregate, reset.remapped_rows_pending) == (0, 2, False)
    assert reset.remapped_rows_uncorrectable == 2


def test_thermal_and_power_slow_the_clocks_until_cleared() -> None:
    hot, _ = strike(HEALTHY_CONDITION, GpuFault(kind="thermal", temperature=95), H100)
    both, _ = strike(hot, GpuFault(kind="power"), H100)
    assert both.temperature_c == 95 and both.power_draw_w == H100.facts.power_limit_w
    assert {"hw_thermal_slowdown", "sw_power_cap", "hw_power_brake_slowdown"} <= both.clocks_event_reasons
    cooled = recover(both, "thermal")
    assert "hw_thermal_slowdown" not in cooled.clocks_event_reasons and "sw_power_cap" in cooled.clocks_event_reasons
    assert recover(cooled, "power") == HEALTHY_CONDITION


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("meltdown", "unknown fault kind 'meltdown'; expected one of: xid, off-bus"),
        ("xid", "an xid fault needs the XID"),
        ("thermal xid=3", "xid does not apply to a thermal fault (it takes: temperature)"),
        ("thermal temperature=500", "temperature: Input should be less than or equal to 120"),
        ("fabric status=OK", "unknown fabric status 'OK'"),
        ("nvlink link", "expected key=value after the kind, found 'link'"),
    ],
)
def test_bad_faults_are_one_line_errors(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=r"^--fault: ") as info:
        parse_fault_text(text, "--fault")
    assert error in str(info.value) and "\n" not in str(info.value)


def test_off_bus_and_lost_do_not_recover() -> None:
    off, _ = strike(HEALTHY_CONDITION, GpuFault(kind="off-bus"), H100)
    with pytest.raises(ValueError, match="does not recover: none without a reboot"):
        recover(off, "off-bus")
    with pytest.raises(ValueError, match="ends with a GPU reset"):
        recover(off, "ecc-uncorrectable")


def test_the_annotation_round_trips() -> None:
    faults = {3: (GpuFault(kind="nvlink", link=2), GpuFault(kind="ecc-uncorrectable", contained=False)), 0: ()}
    value = encode_faults(faults)
    assert value == '{"3":["nvlink link=2","ecc-uncorrectable contained=false"]}'
    assert decode_faults(value, "node a") == {3: faults[3]}
    assert encode_faults({0: ()}) is None
    with pytest.raises(ValueError, match=r"node a: annotation fakegpu.io/gpu-faults\[1\]: unknown fault kind"):
        decode_faults('{"1":["boom"]}', "node a")


def test_live_inventory_strikes_after_calls_and_marks_health(tmp_path: Path) -> None:
    live = LiveInventory(inventory(tmp_path, "2xh100-80gb"))
    gpu = live.inventory.node.gpus[1]
    assert live.strike_gpu(gpu.uuid, parse_fault_text("ecc-uncorrectable after_calls=2", "x")) == []
    assert live.note_call() == [] and live.condition(gpu.uuid) == HEALTHY_CONDITION
    changed = live.note_call()
    assert changed and live.unhealthy()[gpu.uuid] == 63
    assert live.condition(gpu.uuid).remapped_rows_pending
    assert live.strike_gpu("0", GpuFault(kind="thermal")) == []
    assert live.condition(live.inventory.node.gpus[0].uuid).temperature_c == 92
    with pytest.raises(UnknownDeviceError, match="no GPU with index or UUID '7': this node has GPUs 0-1"):
        live.strike_gpu("7", GpuFault(kind="thermal"))
