"""Every fault kind as nvidia-smi shows it (table, ``-q``, ``--query-gpu``), struck and recovered through the
live inventory, as an operator on the node would read it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fakegpu.sharing.gpu_faults import GpuFault, parse_fault_text
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.fault_readings import GPU_LOST_STATUS
from fakegpu.telemetry.nvidia_smi.devices import SmiNode, from_inventory, from_json, from_node, to_json
from tests.inventory_builders import inventory
from tests.unit.nvidia_smi.helpers import out, smi, spec_node, struck


def _live(tmp_path: Path, gpus: str = "2xh100-80gb") -> LiveInventory:
    return LiveInventory(inventory(tmp_path, gpus))


def _smi(live: LiveInventory) -> SmiNode:
    node = from_inventory(live.inventory, conditions=live.conditions())
    assert from_json(to_json(node)) == node  # what the injected script and --devices-file read
    return node


def _query(live: LiveInventory, fields: str, gpu: str = "0") -> list[str]:
    return out(_smi(live), "-i", gpu, f"--query-gpu={fields}", "--format=csv,noheader").strip().split(", ")


def _full(live: LiveInventory, key: str, gpu: str = "0") -> list[str]:
    """The values of every ``-q`` line whose key is ``key`` (stripped), in order."""
    text = out(_smi(live), "-i", gpu, "-q")
    return [m.group(1) for m in re.finditer(rf"^ *{re.escape(key)} *: (.*)$", text, re.MULTILINE)]


def _strike(live: LiveInventory, gpu: int, text: str) -> None:
    live.strike_gpu(str(gpu), parse_fault_text(text, "test"))


ECC_FIELDS = (
    "ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,"
    "ecc.errors.corrected.volatile.dram,ecc.errors.corrected.aggregate.dram,"
    "remapped_rows.uncorrectable,remapped_rows.correctable,remapped_rows.pending,remapped_rows.failure,"
    "retired_pages.double_bit.count,retired_pages.pending"
)


def test_uncorrectable_ecc_on_hopper_remaps_a_row_and_a_reset_applies_it(tmp_path: Path) -> None:
    """Remapped Rows (Ampere and later) as real ``nvidia-smi -q`` reports print it (an A100 SXM4 80GB on driver
    510, an RTX 4060 Ti on 550: Correctable Error, Uncorrectable Error, Pending, Remapping Failure Occurred);
    the table's ``Volatile Uncorr. ECC`` is the volatile DRAM uncorrectable count. A reset (NVIDIA's A100 GPU
    memory error management guide: the remap is applied at the next reset) clears the volatile counters and
    the pending flag, keeps the aggregate counters and the remapped row."""
    live = _live(tmp_path)
    assert _query(live, ECC_FIELDS) == ["0", "0", "0", "0", "0", "0", "No", "No", "[N/A]", "[N/A]"]
    _strike(live, 0, "ecc-uncorrectable count=3")
    _strike(live, 0, "ecc-correctable count=50")
    assert _query(live, ECC_FIELDS) == ["3", "3", "50", "50", "3", "1", "Yes", "No", "[N/A]", "[N/A]"]
    assert "|                    3 |" in out(_smi(live), "-i", "0")
    assert "|                    0 |" in out(_smi(live), "-i", "1")  # the other GPU is untouched
    assert _full(live, "DRAM Uncorrectable") == ["3", "3"]  # volatile, aggregate
    assert _full(live, "Pending")[-1] == "Yes"  # MIG mode, driver model, ECC mode, then remapped rows
    assert _full(live, "Pending Page Blacklist") == ["N/A"]
    live.recover_gpu("0", "reset")
    assert _query(live, ECC_FIELDS) == ["0", "3", "0", "50", "3", "1", "No", "No", "[N/A]", "[N/A]"]
    assert "|                    0 |" in out(_smi(live), "-i", "0")


def test_uncorrectable_ecc_before_ampere_retires_a_page(tmp_path: Path) -> None:
    """Retired Pages (Single Bit ECC, Double Bit ECC, Pending Page Blacklist) on a V100; Remapped Rows ``N/A``."""
    live = _live(tmp_path, "1xv100-32gb")
    _strike(live, 0, "ecc-uncorrectable")
    assert _query(live, ECC_FIELDS) == ["1", "1", "0", "0", "[N/A]", "[N/A]", "[N/A]", "[N/A]", "1", "Yes"]
    assert _full(live, "Double Bit ECC") == ["1"] and _full(live, "Remapped Rows") == ["N/A"]
    live.recover_gpu("0", "reset")
    assert _query(live, "retired_pages.double_bit.count,retired_pages.pending") == ["1", "No"]


REASONS = (
    "clocks_event_reasons.active,clocks_event_reasons.gpu_idle,clocks_event_reasons.sw_power_cap,"
    "clocks_event_reasons.hw_slowdown,clocks_event_reasons.hw_thermal_slowdown,"
    "clocks_event_reasons.hw_power_brake_slowdown,clocks_event_reasons.sw_thermal_slowdown"
)


def test_thermal_slows_the_clocks_until_it_cools(tmp_path: Path) -> None:
    """Clocks event reasons are NVML's ``nvmlClocksEventReason*`` bits (NVIDIA/go-nvml pkg/nvml/const.go @
    25ba14e1dd60628343ead5e76f94a149c6ca5d09: SwPowerCap 0x4, HwSlowdown 0x8, SwThermalSlowdown 0x20,
    HwThermalSlowdown 0x40, HwPowerBrakeSlowdown 0x80, GpuIdle 0x1); ``-q`` prints Active / Not Active."""
    live = _live(tmp_path)
    healthy = _query(live, f"temperature.gpu,clocks.sm,{REASONS}")
    assert healthy[1:] == ["1980 MHz", "0x0000000000000001", "Active", *["Not Active"] * 5]
    _strike(live, 0, "thermal temperature=97")
    hot = ["97", "1089 MHz", "0x0000000000000068", "Not Active", "Not Active", "Active", "Active", "Not Active"]
    assert _query(live, f"temperature.gpu,clocks.sm,{REASONS}") == [*hot, "Active"]
    assert "97C" in out(_smi(live), "-i", "0")
    assert _full(live, "HW Thermal Slowdown") == ["Active"] and _full(live, "GPU Current Temp") == ["97 C"]
    assert _full(live, "SM") == ["1089 MHz", "1980 MHz"]  # Clocks, Max Clocks
    live.recover_gpu("0", "thermal")
    assert _query(live, f"temperature.gpu,clocks.sm,{REASONS}") == healthy


def test_a_power_excursion_caps_power_and_brakes(tmp_path: Path) -> None:
    live = _live(tmp_path)
    _strike(live, 1, "power watts=712.5")
    fields = f"power.draw,clocks.sm,{REASONS}"
    braked = ["712.50 W", "1386 MHz", "0x000000000000008C", "Not Active", "Active", "Active", "Not Active", "Active"]
    assert _query(live, fields, "1") == [*braked, "Not Active"]
    assert "712W /  700W" in out(_smi(live), "-i", "1")
    live.recover_gpu("1", "power")
    assert _query(live, fields, "1")[2] == "0x0000000000000001"


def test_a_fabric_fault_shows_in_the_fabric_section(tmp_path: Path) -> None:
    """Fabric State / Status as ``-q`` prints them (``nvmlErrorString`` of the registration's result)."""
    live = _live(tmp_path)
    assert _full(live, "State") == ["N/A"]  # off any NVLink fabric
    _strike(live, 0, "fabric status=ERROR_TIMEOUT")
    assert _query(live, "fabric.state,fabric.status") == ["Completed", "Timeout"]
    assert _full(live, "Status") == ["Timeout"]
    live.recover_gpu("0", "fabric")
    assert _query(live, "fabric.state,fabric.status") == ["[N/A]", "[N/A]"]


@pytest.mark.parametrize("kind", ["off-bus", "gpu-lost"])
def test_a_gpu_off_the_bus_is_an_error_line_and_never_recovers(tmp_path: Path, kind: str) -> None:
    """nvidia-smi's line for a GPU NVML has no handle for ("Unable to determine the device handle for
    GPU0000:65:00.0: ..." in NVIDIA/nvidia-container-toolkit#69; "GPU is lost.  Reboot the system to recover
    this GPU" in JosephKJ/OWOD#81) and its return value 15 (the manual page: fallen off the bus or otherwise
    inaccessible); the other GPU still answers when selected alone. The error line is the whole output, the
    GPUs NVML still reaches not reported: on multi-GPU hosts the default table is that line alone
    (NVIDIA/open-gpu-kernel-modules#387, four RTX 2080 Ti with GPU 1 off the bus; meta-llama/llama-models#200,
    four A30 with the other three still usable), and ``-a -i`` of the lost GPU too (NVIDIA/nvidia-docker#1553).
    No reading shows ``-L`` or ``--query-gpu`` on such a host; fakegpu answers them the same (README says so)."""
    live = _live(tmp_path)
    live.strike_gpu("1", GpuFault(kind=kind))  # type: ignore[arg-type]
    lost = "Unable to determine the device handle for GPU0000:28:00.0: GPU is lost.  Reboot the system to recover"
    for argv in ([], ["-q"], ["-L"], ["--query-gpu=name", "--format=csv"]):
        result = smi(_smi(live), *argv)
        assert (result.stdout, result.status) == (f"{lost} this GPU\n", GPU_LOST_STATUS)
    assert "NVIDIA H100" in out(_smi(live), "-i", "0")
    with pytest.raises(ValueError, match="does not recover"):
        live.recover_gpu("1", kind)


@pytest.mark.parametrize("text", ["xid xid=13", "xid xid=43", "nvlink"])
def test_kinds_nvidia_smi_does_not_show_leave_its_output_alone(tmp_path: Path, text: str) -> None:
    """An XID reaches the kernel log and NVML's event set, not nvidia-smi's report; fakegpu has no ``nvidia-smi
    nvlink`` subcommand, so an NVLink fault shows only through its XID 74 (README, Differences from NVIDIA)."""
    live = _live(tmp_path)
    before = [out(_smi(live), *argv) for argv in ([], ["-q"])]
    _strike(live, 0, text)
    assert live.conditions()  # the fault struck
    assert [out(_smi(live), *argv) for argv in ([], ["-q"])] == before


def test_a_fabric_fault_on_an_nvl72_node_and_its_recovery() -> None:
    """A GB200 node on a multi-node NVLink fabric reads State Completed / Status Success (NVML's
    ``nvmlGpuFabricInfo_t``, what go-nvlib's ``IsFabricAttached`` checks); a fabric fault keeps the registration
    completed with an error status, and clearing it brings Success back."""
    cluster = "1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10"
    node_ = spec_node({"model": "gb200", "count": 2}, fabric={"clusterUUID": cluster, "cliqueID": 2})
    fields = "--query-gpu=fabric.state,fabric.status"
    assert out(from_node(node_), "-i", "1", fields, "--format=csv,noheader") == "Completed, Success\n"
    faulted = struck(node_, (1, "fabric status=ERROR_NOT_READY"))
    assert out(faulted, "-i", "1", fields, "--format=csv,noheader") == "Completed, Not Ready\n"
    assert out(faulted, "-i", "0", fields, "--format=csv,noheader") == "Completed, Success\n"


SECTIONS = (
    "Performance State",
    "Clocks Event Reasons",
    "FB Memory Usage",
    "ECC Mode",
    "ECC Errors",
    "Retired Pages",
    "Remapped Rows",
    "Temperature",
    "GPU Power Readings",
    "Clocks",
    "Max Clocks",
    "Fabric",
    "Processes",
)
"""Top-level sections of a real ``nvidia-smi -q`` GPU, in its order (driver 550 and 570 reports)."""


def test_the_fault_sections_sit_where_real_reports_print_them(tmp_path: Path) -> None:
    text = out(_smi(_live(tmp_path, "1xa100-80gb")), "-q")
    keys = [line[4:].split(":")[0].strip() for line in text.splitlines() if re.match(r"^    \S", line)]
    assert [k for k in keys if k in SECTIONS] == list(SECTIONS)


def test_a_fault_armed_for_later_calls_shows_only_when_it_strikes(tmp_path: Path) -> None:
    """``after_calls`` (NVIDIA's mock NVML's "fail after N calls"): nothing shows until the call that strikes."""
    live = _live(tmp_path)
    _strike(live, 0, "ecc-uncorrectable after_calls=2")
    fields = "ecc.errors.uncorrected.volatile.total,remapped_rows.pending"
    live.note_call()
    assert _query(live, fields) == ["0", "No"]
    live.note_call()
    assert _query(live, fields) == ["1", "Yes"]
