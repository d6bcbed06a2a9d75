"""Every fault kind as the fake dcgm-exporter shows it, struck and recovered through the live inventory.

Names and types follow NVIDIA/dcgm-exporter etc/dcp-metrics-included.csv @ 99a774bb93604fbc5cc509e68c8bbb205dbfb16c
and etc/default-counters.csv @ b54068a9feef589e07fc36c22642ad4bb61f6420; the clocks event reason bits NVIDIA/go-nvml
pkg/nvml/const.go @ 25ba14e1dd60628343ead5e76f94a149c6ca5d09; blank fields are skipped as dcgm-exporter's
``skipDCGMValue`` does (internal/pkg/collector), so a GPU off the bus has no series.
"""

from __future__ import annotations

from pathlib import Path

from fakegpu.sharing.gpu_faults import GpuFault, parse_fault_text
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.dcgm.exporter import DcgmExporter
from tests.unit.test_dcgm_exporter import make, of


async def _values(exporter: DcgmExporter, name: str, live: LiveInventory, gpu: int = 0) -> list[str]:
    uuid = live.inventory.node.gpus[gpu].uuid
    return [value for _, value in of(await exporter.scrape(), name, UUID=uuid)]


def _strike(live: LiveInventory, gpu: int, text: str) -> None:
    live.strike_gpu(str(gpu), parse_fault_text(text, "test"))


async def test_every_xid_is_the_last_xid_even_one_the_plugin_ignores(tmp_path: Path) -> None:
    """DCGM watches NVML's XID events itself: XID 43 (in NVIDIA's device plugin's ignored list) leaves the
    device healthy and still shows, and a later XID replaces it; ``err_code``/``err_msg`` name it."""
    live, exporter = make(tmp_path)
    _strike(live, 0, "xid xid=43")
    assert live.unhealthy() == {}
    assert await _values(exporter, "DCGM_FI_DEV_XID_ERRORS", live) == ["43"]
    labels = dict(of(await exporter.scrape(), "DCGM_FI_DEV_XID_ERRORS", err_code="43")[0][0])
    assert labels["err_msg"] == "GPU stopped processing"
    _strike(live, 0, "nvlink")
    assert await _values(exporter, "DCGM_FI_DEV_XID_ERRORS", live) == ["74"]
    assert await _values(exporter, "DCGM_FI_DEV_XID_ERRORS", live, gpu=1) == ["0"]


async def test_uncorrectable_ecc_on_hopper_and_a_reset(tmp_path: Path) -> None:
    live, exporter = make(tmp_path)
    _strike(live, 0, "ecc-uncorrectable count=2")
    read = {
        name: await _values(exporter, f"DCGM_FI_DEV_{name}", live)
        for name in ("ECC_DBE_VOL_TOTAL", "ECC_DBE_AGG_TOTAL", "UNCORRECTABLE_REMAPPED_ROWS", "XID_ERRORS")
    }
    assert read == {
        "ECC_DBE_VOL_TOTAL": ["2"],
        "ECC_DBE_AGG_TOTAL": ["2"],
        "UNCORRECTABLE_REMAPPED_ROWS": ["2"],
        "XID_ERRORS": ["63"],  # 94, then the row remapping event
    }
    assert await _values(exporter, "DCGM_FI_DEV_RETIRED_DBE", live) == []  # Hopper remaps rows
    live.recover_gpu("0", "reset")
    assert await _values(exporter, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", live) == ["0"]
    assert await _values(exporter, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", live) == ["2"]
    assert await _values(exporter, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", live) == ["2"]
    assert await _values(exporter, "DCGM_FI_DEV_XID_ERRORS", live) == ["63"]  # DCGM keeps the last one


async def test_uncorrectable_ecc_before_ampere_retires_pages(tmp_path: Path) -> None:
    live, exporter = make(tmp_path, "1xv100-32gb")
    _strike(live, 0, "ecc-uncorrectable")
    assert await _values(exporter, "DCGM_FI_DEV_RETIRED_DBE", live) == ["1"]
    assert await _values(exporter, "DCGM_FI_DEV_RETIRED_PENDING", live) == ["1"]
    assert await _values(exporter, "DCGM_FI_DEV_XID_ERRORS", live) == ["63"]  # 48, then 63
    assert await _values(exporter, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", live) == []
    live.recover_gpu("0", "reset")
    assert await _values(exporter, "DCGM_FI_DEV_RETIRED_PENDING", live) == ["0"]
    assert await _values(exporter, "DCGM_FI_DEV_RETIRED_DBE", live) == ["1"]


async def test_a_correctable_storm(tmp_path: Path) -> None:
    live, exporter = make(tmp_path)
    _strike(live, 1, "ecc-correctable count=5000")
    assert await _values(exporter, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", live, 1) == ["5000"]
    assert await _values(exporter, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", live, 1) == ["1"]
    assert await _values(exporter, "DCGM_FI_DEV_XID_ERRORS", live, 1) == ["92"]
    live.recover_gpu("1", "reset")
    assert await _values(exporter, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", live, 1) == ["0"]
    assert await _values(exporter, "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", live, 1) == ["5000"]


async def test_thermal_and_power_excursions_slow_the_sm_clock(tmp_path: Path) -> None:
    """Masks: thermal = HwSlowdown 0x8 | SwThermal 0x20 | HwThermal 0x40 (104); power = SwPowerCap 0x4 |
    HwSlowdown 0x8 | HwPowerBrake 0x80 (140); idle and unthrottled = GpuIdle 0x1."""
    live, exporter = make(tmp_path)
    assert await _values(exporter, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", live) == ["1"]
    assert await _values(exporter, "DCGM_FI_DEV_SM_CLOCK", live) == ["1980"]
    _strike(live, 0, "thermal temperature=95")
    assert await _values(exporter, "DCGM_FI_DEV_GPU_TEMP", live) == ["95"]
    assert await _values(exporter, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", live) == ["104"]
    assert await _values(exporter, "DCGM_FI_DEV_SM_CLOCK", live) == ["1089"]
    _strike(live, 1, "power")
    assert await _values(exporter, "DCGM_FI_DEV_POWER_USAGE", live, 1) == ["700.000000"]
    assert await _values(exporter, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", live, 1) == ["140"]
    live.recover_gpu("0", "thermal")
    live.recover_gpu("1", "power")
    for gpu in (0, 1):
        assert await _values(exporter, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", live, gpu) == ["1"]
        assert await _values(exporter, "DCGM_FI_DEV_SM_CLOCK", live, gpu) == ["1980"]
    assert await _values(exporter, "DCGM_FI_DEV_GPU_TEMP", live) != ["95"]


async def test_nvlink_errors_count_and_stay_after_a_reset(tmp_path: Path) -> None:
    live, exporter = make(tmp_path)
    _strike(live, 0, "nvlink count=200 link=3")
    counters = ("CRC_FLIT_ERROR", "REPLAY_ERROR", "RECOVERY_ERROR")
    read = [await _values(exporter, f"DCGM_FI_DEV_NVLINK_{c}_COUNT_TOTAL", live) for c in counters]
    assert read == [["200"], ["20"], ["1"]]
    live.recover_gpu("0", "reset")
    assert [await _values(exporter, f"DCGM_FI_DEV_NVLINK_{c}_COUNT_TOTAL", live) for c in counters] == read
    _, t4 = make(tmp_path, "1xt4")
    assert b"NVLINK" not in await t4.scrape()  # a board without NVLink answers "not supported"


async def test_a_gpu_off_the_bus_or_lost_has_no_series(tmp_path: Path) -> None:
    live, exporter = make(tmp_path, "3xh100-80gb")
    live.strike_gpu("1", GpuFault(kind="off-bus"))
    live.strike_gpu("2", GpuFault(kind="gpu-lost"))
    text = await exporter.scrape()
    gpus = {dict(labels)["gpu"] for labels, _ in of(text, "DCGM_FI_DEV_GPU_TEMP")}
    assert gpus == {"0"}
    assert await _values(exporter, "DCGM_FI_DEV_XID_ERRORS", live, 1) == []


async def test_a_fabric_fault_shows_in_no_dcgm_exporter_field(tmp_path: Path) -> None:
    """dcgm-exporter's counter files list no fabric field: the fault shows in nvidia-smi and the IMEX readiness."""
    live, exporter = make(tmp_path)
    before = await exporter.scrape()
    _strike(live, 0, "fabric")
    assert await exporter.scrape() == before
