"""``nvidia-smi -q``: the NVSMI LOG report, key column 42, GPUs and their MIG devices."""

from __future__ import annotations

import re

from tests.unit.nvidia_smi.helpers import TS, mixed, out, smi_node


def kv(text: str) -> list[tuple[int, str, str]]:
    """(indent, key, value) of every ``key : value`` line."""
    found = []
    for line in text.splitlines():
        if " : " in line or line.endswith(" :"):
            assert line.index(" : ") == 41 if " : " in line else True, line
            key, _, value = line.partition(" : ")
            found.append((len(key) - len(key.lstrip()), key.strip(), value))
    return found


def value(text: str, key: str, indent: int = 4, nth: int = 0) -> str:
    return [v for i, k, v in kv(text) if k == key and i == indent][nth]


def test_header_and_one_gpu_subset():
    node = smi_node("2xh100-80gb")
    text = out(node, "-q")
    assert text.startswith(
        "\n==============NVSMI LOG==============\n\n"
        f"Timestamp                                 : {TS}\n"
        "Driver Version                            : 570.172.08\n"
        "CUDA Version                              : 12.8\n\n"
        "Attached GPUs                             : 2\n"
        "GPU 00000000:18:00.0\n"
        "    Product Name                          : NVIDIA H100 80GB HBM3\n"
        "    Product Brand                         : NVIDIA\n"
        "    Product Architecture                  : Hopper\n"
    )
    assert value(text, "Current", 8) == "Disabled"  # MIG Mode
    assert value(text, "Serial Number") == node.gpus[0].serial
    assert re.fullmatch(r"\d{13}", node.gpus[0].serial)
    assert value(text, "GPU UUID", nth=1) == node.gpus[1].uuid
    assert value(text, "Minor Number", nth=1) == "1"
    assert value(text, "Bus Id", 8) == "00000000:18:00.0"
    assert value(text, "Device Id", 8) == "0x233010DE"
    assert [value(text, k, 8) for k in ("Total", "Reserved", "Used", "Free")] == [
        "81559 MiB",
        "328 MiB",
        "0 MiB",
        "81231 MiB",
    ]
    assert value(text, "GPU", 8) == "0 %"  # Utilization
    assert value(text, "GPU Current Temp", 8) == "30 C"
    assert value(text, "Instantaneous Power Draw", 8) == "69.21 W"
    assert value(text, "Max Power Limit", 8) == "700.00 W"
    assert text.endswith("    Processes                             : None\n\n")
    assert text.count("\nGPU 0000") == 2


def test_mig_devices_follow_mig_mode():
    node = mixed()
    text = out(node, "-q", "-i", "0")
    lines = text.splitlines()
    start = lines.index("    MIG Devices")
    assert lines[start - 2 : start] == [
        "        Current                           : Enabled",
        "        Pending                           : Enabled",
    ]
    assert lines[start + 1 : start + 5] == [
        "        MIG Device",
        "            Index                         : 0",
        "            GPU Instance ID               : 1",
        "            Compute Instance ID           : 0",
    ]
    assert value(text, "Multiprocessor count", 20) == "60"
    assert value(text, "Copy Engine count", 20, nth=2) == "1"
    assert [value(text, "Index", 12, nth=n) for n in range(3)] == ["0", "1", "2"]
    # MIG device 0: FB then BAR1 totals.
    assert [value(text, "Total", 16, nth=n) for n in (0, 1)] == ["40448 MiB", "65535 MiB"]
    assert value(text, "GPU", 8) == "N/A"
    assert "Attached GPUs                             : 2" in text


def test_container_with_one_mig_device():
    node = mixed()
    mig = node.gpus[0].migs[1]
    text = out(node, "-q", visible=mig.uuid)
    assert "Attached GPUs                             : 1" in text
    assert value(text, "GPU Instance ID", 12) == "5"
    assert [v for i, k, v in kv(text) if k == "Index"] == ["0"]
    assert value(text, "Minor Number") == "0"


def test_a_container_with_only_mig_devices_may_not_read_the_gpus_memory():
    node = mixed()
    text = out(node, "-q", visible=node.gpus[0].migs[2].uuid)
    assert [value(text, k, 8) for k in ("Total", "Reserved", "Used", "Free")] == ["Insufficient Permissions"] * 4
    assert value(text, "Total", 16) == "9984 MiB"  # the MIG device's own FB memory
    whole = out(node, "-q", visible="0")
    assert [value(whole, k, 8) for k in ("Total", "Reserved", "Used", "Free")] == [
        "81559 MiB",
        "328 MiB",
        "74 MiB",
        "81157 MiB",
    ]


def test_every_key_value_line_is_aligned():
    for gpus, layout in (("1xt4", None), ("1xa30", "all-balanced"), ("2xb200", "all-1g.23gb")):
        kv(out(smi_node(gpus, layout), "-q"))
