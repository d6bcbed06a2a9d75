"""``--query-gpu``: headers with units, values with and without them, and nvidia-smi's errors."""

from __future__ import annotations

import re

import pytest

from fakegpu.telemetry.nvidia_smi import query
from fakegpu.telemetry.nvidia_smi.devices import from_node
from fakegpu.telemetry.nvidia_smi.query import FIELDS
from tests.unit.nvidia_smi.helpers import QTS, mixed, node, out, smi, smi_node

BRIEF = "index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu,temperature.gpu,power.draw"
MORE = "pci.bus_id,driver_version,mig.mode.current,compute_cap,count"


def test_csv_with_header_and_units():
    node = smi_node("2xh100-80gb")
    text = out(node, f"--query-gpu={BRIEF},{MORE}", "--format=csv")
    assert text.splitlines() == [
        "index, name, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB], utilization.gpu [%], "
        "temperature.gpu, power.draw [W], pci.bus_id, driver_version, mig.mode.current, compute_cap, count",
        f"0, NVIDIA H100 80GB HBM3, {node.gpus[0].uuid}, 81559 MiB, 0 MiB, 81231 MiB, 0 %, 30, 69.21 W, "
        "00000000:18:00.0, 570.172.08, Disabled, 9.0, 2",
        f"1, NVIDIA H100 80GB HBM3, {node.gpus[1].uuid}, 81559 MiB, 0 MiB, 81231 MiB, 0 %, 33, 70.08 W, "
        "00000000:28:00.0, 570.172.08, Disabled, 9.0, 2",
    ]


def test_nounits_keeps_units_in_the_header_only():
    text = out(smi_node("1xa100-40gb"), "--query-gpu=memory.total,utilization.gpu,power.draw", "--format=csv,nounits")
    assert text == "memory.total [MiB], utilization.gpu [%], power.draw [W]\n40960, 0, 44.31\n"


@pytest.mark.parametrize("fmt", ["csv,noheader", "noheader,csv"])
def test_noheader(fmt):
    assert out(smi_node("1xt4"), "--query-gpu", "name,memory.total", "--format", fmt) == "Tesla T4, 15360 MiB\n"


def test_noheader_nounits_as_scripts_use_it():
    text = out(smi_node("8xh100-80gb"), "--query-gpu=index,memory.total", "--format=csv,noheader,nounits")
    assert text == "".join(f"{i}, 81559\n" for i in range(8))


def test_not_available_values_are_bracketed():
    node = mixed()
    text = out(node, "--query-gpu=utilization.gpu,mig.mode.current,fan.speed,memory.used", "--format=csv,noheader")
    assert text == "[N/A], Enabled, [N/A], 74 MiB\n0 %, Disabled, [N/A], 0 MiB\n"
    assert out(smi_node("1xt4"), "--query-gpu=mig.mode.current", "--format=csv,noheader") == "[N/A]\n"
    assert out(smi_node("1xa10"), "--query-gpu=fan.speed", "--format=csv,noheader,nounits") == "0\n"


def test_aliases_print_the_canonical_header():
    node = smi_node("1xh100-80gb")
    assert out(node, "--query-gpu=gpu_name,gpu_bus_id", "--format=csv") == (
        "name, pci.bus_id\nNVIDIA H100 80GB HBM3, 00000000:18:00.0\n"
    )


def test_index_and_count_follow_the_container_and_id_filter():
    node = smi_node("8xh100-80gb")
    text = out(node, "--query-gpu=index,count,pci.bus_id", "--format=csv,noheader", "-i", "1", visible="6,3,7")
    assert text == "1, 3, 00000000:78:00.0\n"


def test_every_field_has_a_value_for_every_board():
    names = ",".join(f.name for f in FIELDS)
    for gpus in ("1xt4", "1xa30", "1xb200", "1xv100-32gb", "1xl40s", "1xh200"):
        line = out(smi_node(gpus), f"--query-gpu={names}", "--format=csv,noheader").rstrip("\n")
        assert len(line.split(", ")) == len(FIELDS), line


# The header line of ``nvidia-smi --query-gpu=<every field of --help-query-gpu> --format=csv`` on driver 590
# (an H100 capture; 570's list is a subset): names, order and units.
HELP_QUERY_GPU_HEADERS = (
    "timestamp, driver_version, vgpu_driver_capability.heterogenous_multivGPU, count, name, serial, uuid, "
    "pci.bus_id, pci.domain, pci.bus, pci.device, pci.baseClass, pci.subClass, pci.device_id, pci.sub_device_id, "
    "vgpu_device_capability.fractional_multiVgpu, vgpu_device_capability.heterogeneous_timeSlice_profile, "
    "vgpu_device_capability.heterogeneous_timeSlice_sizes, vgpu_device_capability.homogeneous_placements, "
    "vgpu_device_capability.mig_timeSlicing, vgpu_device_capability.mig_timeSlicing_mode, pcie.link.gen.current, "
    "pcie.link.gen.gpucurrent, pcie.link.gen.max, pcie.link.gen.gpumax, pcie.link.gen.hostmax, "
    "pcie.link.width.current, pcie.link.width.max, index, display_mode, display_attached, display_active, "
    "persistence_mode, addressing_mode, accounting.mode, accounting.buffer_size, driver_model.current, "
    "driver_model.pending, vbios_version, inforom.img, inforom.oem, inforom.ecc, inforom.pwr, "
    "inforom.checksum_validation, gpu_recovery_action, gom.current, gom.pending, fan.speed [%], pstate, "
    "clocks_event_reasons.supported, clocks_event_reasons.active, clocks_event_reasons.gpu_idle, "
    "clocks_event_reasons.applications_clocks_setting, clocks_event_reasons.sw_power_cap, "
    "clocks_event_reasons.hw_slowdown, clocks_event_reasons.hw_thermal_slowdown, "
    "clocks_event_reasons.hw_power_brake_slowdown, clocks_event_reasons.sw_thermal_slowdown, "
    "clocks_event_reasons.sync_boost, clocks_event_reasons_counters.sw_power_cap [us], "
    "clocks_event_reasons_counters.sync_boost [us], clocks_event_reasons_counters.sw_thermal_slowdown [us], "
    "clocks_event_reasons_counters.hw_thermal_slowdown [us], clocks_event_reasons_counters.hw_power_brake_slowdown "
    "[us], memory.total [MiB], memory.reserved [MiB], memory.used [MiB], memory.free [MiB], compute_mode, "
    "compute_cap, utilization.gpu [%], utilization.memory [%], utilization.encoder [%], utilization.decoder [%], "
    "utilization.jpeg [%], utilization.ofa [%], encoder.stats.sessionCount, encoder.stats.averageFps, "
    "encoder.stats.averageLatency, dramEncryption.mode.current, dramEncryption.mode.pending, ecc.mode.current, "
    "ecc.mode.pending, "
    + ", ".join(
        f"ecc.errors.{c}.{t}.{k}"
        for c in ("corrected", "uncorrected")
        for t in ("volatile", "aggregate")
        for k in (
            *("device_memory", "dram", "register_file", "l1_cache", "l2_cache", "texture_memory"),
            "cbu",
            "sram",
            "total",
        )
    )
    + ", ecc.errors.uncorrected.volatile.sram.parity, ecc.errors.uncorrected.volatile.sram.secded, "
    "ecc.errors.uncorrected.aggregate.sram.parity, ecc.errors.uncorrected.aggregate.sram.secded, "
    "ecc.errors.uncorrected.aggregate.sram.thresholdExceeded, ecc.errors.uncorrected.aggregate.sram.l2, "
    "ecc.errors.uncorrected.aggregate.sram.sm, ecc.errors.uncorrected.aggregate.sram.mcu, "
    "ecc.errors.uncorrected.aggregate.sram.pcie, ecc.errors.uncorrected.aggregate.sram.other, "
    "retired_pages.single_bit_ecc.count, retired_pages.double_bit.count, retired_pages.pending, "
    "remapped_rows.correctable, remapped_rows.uncorrectable, remapped_rows.pending, remapped_rows.failure, "
    "remapped_rows.histogram.max, remapped_rows.histogram.high, remapped_rows.histogram.partial, "
    "remapped_rows.histogram.low, remapped_rows.histogram.none, temperature.gpu, temperature.gpu.tlimit, "
    "temperature.memory, power.management, power.draw [W], power.draw.average [W], power.draw.instant [W], "
    "power.limit [W], enforced.power.limit [W], power.default_limit [W], power.min_limit [W], power.max_limit [W], "
    "module.power.draw.average [W], module.power.draw.instant [W], module.power.limit [W], "
    "module.enforced.power.limit [W], module.power.default_limit [W], module.power.min_limit [W], "
    "module.power.max_limit [W], power_smoothing.delayed_power_smoothing_supported, "
    "power_smoothing.primary_power_floor [W], power_smoothing.secondary_power_floor [W], "
    "power_smoothing.min_primary_floor_activation_offset [W], power_smoothing.min_primary_floor_activation_point "
    "[W], power_smoothing.window_multiplier [ms], power_smoothing.curr_profile.secondary_power_floor [W], "
    "power_smoothing.curr_profile.primary_floor_act_window_multiplier, "
    "power_smoothing.curr_profile.primary_floor_tar_window_multiplier, "
    "power_smoothing.curr_profile.primary_floor_act_offset [W], power_smoothing.admin_override.secondary_power_floor "
    "[W], power_smoothing.admin_override.primary_floor_act_window_multiplier, "
    "power_smoothing.admin_override.primary_floor_tar_window_multiplier, "
    "power_smoothing.admin_override.primary_floor_act_offset [W], edpp_multiplier [%], clocks.current.graphics "
    "[MHz], clocks.current.sm [MHz], clocks.current.memory [MHz], clocks.current.video [MHz], "
    "clocks.applications.graphics [MHz], clocks.applications.memory [MHz], clocks.default_applications.graphics "
    "[MHz], clocks.default_applications.memory [MHz], clocks.max.graphics [MHz], clocks.max.sm [MHz], "
    "clocks.max.memory [MHz], mig.mode.current, mig.mode.pending, gsp.mode.current, gsp.mode.default, c2c.mode, "
    "protected_memory.total [MiB], protected_memory.used [MiB], protected_memory.free [MiB], fabric.state, "
    "fabric.status, fabric.cliqueId, fabric.clusterUuid, fabric.health.summary, fabric.health.bandwidth, "
    "fabric.health.route_recovery_in_progress, fabric.health.route_unhealthy, "
    "fabric.health.access_timeout_recovery, fabric.health.incorrect_configuration, "
    "platform.chassis_serial_number, platform.slot_number, platform.tray_index, platform.host_id, "
    "platform.peer_type, platform.module_id, platform.gpu_fabric_guid, hostname"
)


def test_every_field_of_help_query_gpu_is_accepted_with_its_header():
    names = ",".join(h.split(" [")[0] for h in HELP_QUERY_GPU_HEADERS.split(", "))
    text = out(smi_node("1xh100-80gb"), f"--query-gpu={names}", "--format=csv")
    header, row = text.splitlines()
    assert header == HELP_QUERY_GPU_HEADERS
    values = row.split(", ")
    assert len(values) == len(FIELDS) == 212
    assert values[0] == QTS and values[3] == "1" and values[4] == "NVIDIA H100 80GB HBM3"
    assert values[header.split(", ").index("clocks_event_reasons.active")] == "0x0000000000000001"  # idle
    assert values[header.split(", ").index("clocks_event_reasons.sync_boost")] == "Not Active"
    assert values[header.split(", ").index("encoder.stats.averageFps")] == "0"
    assert values[header.split(", ").index("inforom.img")] == "[N/A]"  # not modelled


@pytest.mark.parametrize(
    ("alias", "header"),
    [
        ("clocks_throttle_reasons.active", "clocks_event_reasons.active"),
        ("clocks.sm", "clocks.current.sm [MHz]"),
        ("gpu.power.draw.instant", "power.draw.instant [W]"),
        ("retired_pages.dbe", "retired_pages.double_bit.count"),
        ("inforom.image", "inforom.img"),
    ],
)
def test_more_aliases(alias, header):
    assert out(smi_node("1xt4"), f"--query-gpu={alias}", "--format=csv").splitlines()[0] == header


TELEGRAF = (
    "fan.speed,memory.total,memory.used,memory.free,pstate,temperature.gpu,name,uuid,compute_mode,"
    "utilization.gpu,utilization.memory,index,power.draw,pcie.link.gen.current,pcie.link.width.current,"
    "encoder.stats.sessionCount,encoder.stats.averageFps,encoder.stats.averageLatency,clocks.current.graphics,"
    "clocks.current.sm,clocks.current.memory,clocks.current.video"
)
"""The CSV query of Telegraf's nvidia_smi input (before it moved to ``-q -x``)."""


def test_telegrafs_query_works():
    node_ = smi_node("2xl4")
    text = out(node_, f"--query-gpu={TELEGRAF}", "--format=noheader,nounits,csv")
    assert text.splitlines() == [
        f"[N/A], 23034, 0, 22600, P8, {29 + 3 * i}, NVIDIA L4, {g.uuid}, Default, 0, 0, {i}, {p}, 4, 16, 0, 0, 0, "
        "2040, 2040, [N/A], [N/A]"  # the L4's published boost clock; memory and video clocks not modelled
        for i, (g, p) in enumerate(zip(node_.gpus, ("11.27", "12.14"), strict=True))
    ]


def test_timestamp_field():
    assert out(smi_node("1xt4"), "--query-gpu=timestamp,index", "--format=csv") == f"timestamp, index\n{QTS}, 0\n"
    assert re.fullmatch(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}", query.timestamp_now())
    assert query.timestamp_now(1770200245.9996)[-6:] == "25.999"  # truncated, as date's %N is


def test_a_container_with_only_mig_devices_may_not_read_the_gpus_memory():
    """k8s-device-plugin#1683, ollama#932: ``[Insufficient Permissions]``, with or without units."""
    node_ = mixed()
    mig = node_.gpus[0].migs[0]
    fields = "--query-gpu=index,memory.total,memory.used,memory.free,memory.reserved,utilization.gpu,mig.mode.current"
    text = out(node_, fields, "--format=csv,noheader", visible=mig.uuid)
    denied = "[Insufficient Permissions]"
    assert text == f"0, {denied}, {denied}, {denied}, {denied}, [N/A], Enabled\n"
    assert out(node_, "--query-gpu=memory.free", "--format=csv,noheader,nounits", visible=mig.uuid) == denied + "\n"
    # The whole GPU, or a whole GPU next to it, still shows memory.
    assert out(node_, "--query-gpu=memory.total", "--format=csv,noheader", visible=f"1,{mig.uuid}") == (
        f"{denied}\n81559 MiB\n"
    )
    assert out(node_, "--query-gpu=memory.total", "--format=csv,noheader", visible="0") == "81559 MiB\n"


def test_a_dynamic_mig_device_reports_mig_mode_enabled():
    node_ = from_node(node("1xh100-80gb"), dynamic_mig=True)
    option = node_.gpus[0].mig_options[0]
    text = out(node_, "--query-gpu=mig.mode.current,memory.total", "--format=csv,noheader", visible=option.uuid)
    assert text == "Enabled, [Insufficient Permissions]\n"
    assert out(node_, "--query-gpu=mig.mode.current", "--format=csv,noheader", visible="0") == "Disabled\n"


def test_unknown_field_is_nvidia_smis_error_with_status_2():
    result = smi(smi_node(), "--query-gpu=name,foo,bar", "--format=csv")
    assert (result.stdout, result.status) == ('Field "foo" is not a valid field to query.\n\n', 2)
    assert smi(smi_node(), "--query-gpu=name,", "--format=csv").stdout == 'Field "" is not a valid field to query.\n\n'


INVALID = ("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n", 2)


@pytest.mark.parametrize(
    "argv",
    [
        ["--query-gpu=name"],
        ["--query-gpu=name", "--format=json"],
        ["--query-gpu=name", "--format=noheader"],
        ["--query-gpu=name", "--format=csv,"],
        ["--query-gpu=", "--format=csv"],
        ["--format=csv"],
        ["-L", "--format=csv"],
    ],
)
def test_format_misuse_is_an_invalid_combination(argv):
    result = smi(smi_node(), *argv)
    assert (result.stdout, result.status) == INVALID


def test_field_errors_come_before_device_lookup():
    result = smi(smi_node(), "--query-gpu=foo", "--format=csv", visible="none")
    assert result.status == 2
    result = smi(smi_node(), "--query-gpu=name", "--format=csv", visible="none")
    assert (result.stdout, result.status) == ("No devices were found\n", 6)
