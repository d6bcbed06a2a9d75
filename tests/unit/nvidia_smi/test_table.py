"""The classic table: 570's column layout for whole GPUs, MIG devices and what a container sees."""

from __future__ import annotations

import dataclasses

import pytest

from fakegpu.telemetry.nvidia_smi import table
from fakegpu.telemetry.nvidia_smi.devices import SmiNode, from_node
from tests.unit.nvidia_smi.helpers import TS, mixed, out, smi_node, spec_node

# One H100 exactly as driver 570 lays it out (widths checked against real 570 readings of an H100 80GB
# HBM3, an L4 and an A100 80GB PCIe in MIG mode); the numbers are the fake node's idle ones.
ONE_H100 = "".join(
    line + "\n"
    for line in [
        TS + " " * 7,
        "+-----------------------------------------------------------------------------------------+",
        "| NVIDIA-SMI 570.172.08             Driver Version: 570.172.08     CUDA Version: 12.8     |",
        "|-----------------------------------------+------------------------+----------------------+",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
        "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |",
        "| N/A   30C    P0             69W /  700W |       0MiB /  81559MiB |      0%      Default |",
        "|                                         |                        |             Disabled |",
        "+-----------------------------------------+------------------------+----------------------+",
        " " * 89,
        "+-----------------------------------------------------------------------------------------+",
        "| Processes:                                                                              |",
        "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
        "|        ID   ID                                                               Usage      |",
        "|=========================================================================================|",
        "|  No running processes found                                                             |",
        "+-----------------------------------------------------------------------------------------+",
    ]
)

MIG_BOX_HEAD = """\

+-----------------------------------------------------------------------------------------+
| MIG devices:                                                                            |
+------------------+----------------------------------+-----------+-----------------------+
| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |
|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |
|                  |                                  |        ECC|                       |
|==================+==================================+===========+=======================|
"""
MIG_SEP = "+------------------+----------------------------------+-----------+-----------------------+"


def gpu_rows(text: str) -> list[str]:
    """The first line of every GPU block (the one with the index and the name)."""
    return [line for line in text.splitlines() if line.startswith("|") and " Off |" in line]


def test_one_h100_is_laid_out_as_driver_570():
    assert out(smi_node("1xh100-80gb")) == ONE_H100


@pytest.mark.parametrize("gpus", ["8xh100-80gb", "2xa100-40gb", "1xt4", "2xh100-80gb"])
def test_every_box_line_is_91_columns(gpus):
    lines = out(smi_node(gpus)).splitlines()
    assert lines[0] == f"{TS}       "
    assert all(len(line) == 91 for line in lines[1:] if line.strip()), [line for line in lines if len(line) != 91]


def test_eight_h100s_one_block_each_in_index_order():
    text = out(smi_node("8xh100-80gb"))
    rows = gpu_rows(text)
    assert [row[:6] for row in rows] == [f"|{i:>4} " for i in range(8)]
    assert rows[7] == "|   7  NVIDIA H100 80GB HBM3          On  |   00000000:88:00.0 Off |                    0 |"
    assert text.count("|       0MiB /  81559MiB |      0%      Default |") == 8
    assert "MIG devices" not in text


def test_a100_40gb_numbers():
    text = out(smi_node("2xa100-40gb"))
    assert gpu_rows(text)[1] == (
        "|   1  NVIDIA A100-SXM4-40GB          On  |   00000000:28:00.0 Off |                    0 |"
    )
    assert "W /  400W |       0MiB /  40960MiB |      0%      Default |" in text
    assert text.count("|             Disabled |") == 2


def test_t4_is_not_mig_capable_and_idles_at_p8():
    lines = out(smi_node("1xt4")).splitlines()
    assert lines[8] == "|   0  Tesla T4                       On  |   00000000:18:00.0 Off |                    0 |"
    assert lines[9] == "| N/A   35C    P8              9W /   70W |       0MiB /  15360MiB |      0%      Default |"
    assert lines[10].endswith("|                  N/A |")


def test_all_1g_10gb_h100_lists_seven_mig_devices_as_real_nvidia_smi():
    text = out(smi_node("1xh100-80gb", "all-1g.10gb"))
    assert "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                   On |" in text
    assert "|      84MiB /  81559MiB |     N/A      Default |" in text
    assert "|              Enabled |" in text
    box = text[text.index(MIG_BOX_HEAD) + len(MIG_BOX_HEAD) :].splitlines()
    expected: list[str] = []
    for dev in range(7):
        expected += [
            f"|  0 {7 + dev:>4}   0 {dev:>3}  |              12MiB /  9984MiB    | 16      0 |  1   0    1    0    1 |",
            "|                  |                 0MiB / 16383MiB  |           |                       |",
            MIG_SEP,
        ]
    assert box[: len(expected)] == expected
    assert box[len(expected)] == " " * 89


def test_mixed_layout_rows_carry_gi_ids_profiles_and_engines():
    text = out(mixed())
    assert text.count(MIG_BOX_HEAD) == 1
    rows = [line for line in text.splitlines() if line.startswith("|  0 ") and "MiB /" in line]
    assert rows == [
        "|  0    1   0   0  |              37MiB / 40448MiB    | 60      0 |  3   0    3    0    3 |",
        "|  0    5   0   1  |              25MiB / 20096MiB    | 32      0 |  2   0    2    0    2 |",
        "|  0   13   0   2  |              12MiB /  9984MiB    | 16      0 |  1   0    1    0    1 |",
    ]
    assert "|                 0MiB / 65535MiB  |" in text
    assert "|                 0MiB / 32767MiB  |" in text
    # GPU 1 is a whole GPU next to the MIG one: its own block, no MIG rows.
    assert gpu_rows(text)[1].startswith("|   1  NVIDIA H100 80GB HBM3")


def test_mig_enabled_without_instances_says_so():
    text = out(from_node(spec_node({"model": "a100-40gb", "migEnabled": True})))
    assert "|  No MIG devices found" + " " * 67 + "|\n+" + "-" * 89 + "+\n" in text


def test_a_container_with_one_mig_device_sees_gpu_0_and_mig_device_0():
    node = smi_node("4xh100-80gb", "all-balanced")
    gpu3 = node.gpus[3]
    mig = gpu3.migs[-1]
    text = out(node, visible=mig.uuid)
    lines = text.splitlines()
    assert gpu_rows(text) == [
        f"|   0  NVIDIA H100 80GB HBM3          On  |   {gpu3.bus_id} Off |                   On |"
    ]
    # NVML refuses the parent GPU's memory to a container given only MIG devices: N/A, as real readings show.
    row = lines.index(gpu_rows(text)[0])
    assert (
        lines[row + 1] == "| N/A   34C    P0             69W /  700W |                    N/A |     N/A      Default |"
    )
    assert lines[row + 2].endswith("|              Enabled |")
    rows = [line for line in text.splitlines() if "MiB /" in line and line.startswith("|  0 ")]
    assert rows == [
        f"|  0 {mig.gi_id:>4}   0   0  |              37MiB / 40448MiB    | 60      0 |  3   0    3    0    3 |"
    ]


def test_a_replica_id_shows_its_physical_gpu():
    node = smi_node("8xh100-80gb")
    text = out(node, visible=f"{node.gpus[5].uuid}::3")
    assert gpu_rows(text) == [
        "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:68:00.0 Off |                    0 |"
    ]


def test_id_filter_keeps_container_indices():
    node: SmiNode = smi_node("8xh100-80gb")
    text = out(node, "-i", "3,1", visible="7,2,4,6")
    assert [row[:6] for row in gpu_rows(text)] == ["|   1 ", "|   3 "]
    assert "00000000:58:00.0" in text and "00000000:88:00.0" in text  # node GPUs 4 and 7


def test_the_whole_mig_gpu_still_shows_its_memory():
    node = smi_node("1xh100-80gb", "all-balanced")
    assert "|      86MiB /  81559MiB |     N/A      Default |" in out(node, visible="0")


def test_a_dynamic_mig_device_shows_its_gpu_in_mig_mode():
    """DRA dynamic MIG: the GPU is not in MIG mode on the node, but the container's device is a MIG one (a Hopper
    GPU: an Ampere one with MIG mode off is offered whole only, NVIDIA's ``isDynamicMIGCapable``)."""
    node = from_node(spec_node({"model": "h100-80gb"}), dynamic_mig=True)
    option = next(m for m in node.gpus[0].mig_options if m.profile == "3g.40gb" and m.start == 4)
    text = out(node, visible=option.uuid)
    assert gpu_rows(text) == [
        "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                   On |"
    ]
    assert "|                    N/A |     N/A      Default |" in text
    assert "|              Enabled |" in text
    rows = [line for line in text.splitlines() if "MiB /" in line and line.startswith("|  0 ")]
    assert rows == ["|  0    2   0   0  |              37MiB / 40448MiB    | 60      0 |  3   0    3    0    3 |"]
    assert out(node, visible="0").count("MIG devices") == 0


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("NVIDIA GeForce RTX 3090 Ti", "NVIDIA GeForce RTX 3090 Ti   "),
        ("NVIDIA GeForce RTX 2080 SUPER", "NVIDIA GeForce RTX 2080 ...  "),
        ("NVIDIA RTX 6000 Ada Generation", "NVIDIA RTX 6000 Ada Gene...  "),
        ("27 characters, not cut ....", "27 characters, not cut ....  "),
    ],
)
def test_long_names_are_cut_to_24_characters_and_dots(name, shown):
    """As real 570 readings print them (``|   0  NVIDIA RTX 6000 Ada Gene...    On  |``)."""
    gpu = dataclasses.replace(smi_node("1xl40s").gpus[0], name=name)
    row = table.gpu_rows(gpu)[0]
    assert row == f"|@G4@  {shown}  On  |   00000000:18:00.0 Off |                    0 |"
