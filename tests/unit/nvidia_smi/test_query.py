"""``--query-gpu``: headers with units, values with and without them, and nvidia-smi's errors."""

from __future__ import annotations

import pytest

from sharing.nvidia_smi.query import FIELDS
from tests.unit.nvidia_smi.helpers import mixed, out, smi, smi_node

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
