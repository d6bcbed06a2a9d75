"""``nvidia-smi -q``: the ``==============NVSMI LOG==============`` report, a faithful subset.

Keys are padded to column 42 and nested by four spaces, in driver 570's order and wording (``Utilization
/ GPU``, ``Average`` and ``Instantaneous Power Draw``); sections fakegpu has nothing true to say about
(inforom, VBIOS, application clocks) are left out rather than invented. The sections faults change (clocks
event reasons, ECC errors, retired pages or remapped rows, clocks, fabric) come from
``health_report``. A MIG-enabled GPU lists
the MIG devices the container may use under ``MIG Devices``, right after ``MIG Mode``. A container given
only some of a GPU's MIG devices sees MIG mode Enabled and ``Insufficient Permissions`` for the GPU's
FB memory (``partial``), as NVML answers there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from fakegpu.telemetry.nvidia_smi import health_report, tokens
from fakegpu.telemetry.nvidia_smi.devices import SmiGpu, SmiMig, SmiNode, VisibleGpu
from fakegpu.telemetry.nvidia_smi.report_lines import kv as _kv
from fakegpu.telemetry.nvidia_smi.report_lines import section as _section
from fakegpu.telemetry.nvidia_smi.table import mig_mode_text

MIG_DEVICES: Final = "    MIG Devices"
NO_PERMISSION: Final = "Insufficient Permissions"


def head(node: SmiNode) -> tuple[str, ...]:
    return (
        "",
        "==============NVSMI LOG==============",
        "",
        _kv(0, "Timestamp", tokens.TIMESTAMP),
        _kv(0, "Driver Version", node.driver_version),
        _kv(0, "CUDA Version", node.cuda_version),
        "",
        _kv(0, "Attached GPUs", tokens.ATTACHED),
    )


def gpu_head(gpu: SmiGpu, *, partial: bool = False) -> tuple[str, ...]:
    """From the ``GPU <bus id>`` line through ``MIG Mode``: what comes before the MIG devices."""
    mig = mig_mode_text(gpu, partial=partial)
    return (
        f"GPU {gpu.bus_id}",
        _kv(1, "Product Name", gpu.name),
        _kv(1, "Product Brand", gpu.brand),
        _kv(1, "Product Architecture", gpu.architecture),
        _kv(1, "Display Mode", "Enabled"),
        _kv(1, "Display Active", "Disabled"),
        _kv(1, "Persistence Mode", "Enabled"),
        _section(1, "MIG Mode"),
        _kv(2, "Current", mig),
        _kv(2, "Pending", mig),
    )


def _mib(value: int) -> str:
    return f"{value} MiB"


def gpu_tail(gpu: SmiGpu, *, partial: bool = False) -> tuple[str, ...]:
    """Everything after the MIG devices, ending with the blank line that separates GPUs."""
    domain, bus, rest = gpu.bus_id.split(":")
    device, function = rest.split(".")
    board_id = (int(domain, 16) << 16) | (int(bus, 16) << 8) | (int(device, 16) << 3) | int(function)
    gen = str(gpu.pcie_gen)
    util = "N/A" if gpu.mig_enabled or partial else "0 %"
    fb = (gpu.memory_mib, gpu.reserved_mib, gpu.used_mib, gpu.free_mib)
    fb_text = [NO_PERMISSION] * 4 if partial else [_mib(v) for v in fb]
    fan = "N/A" if gpu.fan == "N/A" else f"{gpu.fan.rstrip('%')} %"
    limit = f"{gpu.power_limit_w:.2f} W"
    draw = f"{gpu.power_draw_w:.2f} W"
    return (
        _kv(1, "Accounting Mode", "Disabled"),
        _kv(1, "Accounting Mode Buffer Size", "4000"),
        _section(1, "Driver Model"),
        _kv(2, "Current", "N/A"),
        _kv(2, "Pending", "N/A"),
        _kv(1, "Serial Number", gpu.serial),
        _kv(1, "GPU UUID", gpu.uuid),
        _kv(1, "Minor Number", str(gpu.index)),
        _kv(1, "MultiGPU Board", "No"),
        _kv(1, "Board ID", f"0x{board_id:x}"),
        _section(1, "GPU Virtualization Mode"),
        _kv(2, "Virtualization Mode", "None"),
        _kv(2, "Host VGPU Mode", "N/A"),
        _kv(2, "vGPU Heterogeneous Mode", "N/A"),
        _section(1, "PCI"),
        _kv(2, "Bus", f"0x{bus}"),
        _kv(2, "Device", f"0x{device}"),
        _kv(2, "Domain", f"0x{int(domain, 16):04X}"),
        _kv(2, "Base Classcode", "0x3"),
        _kv(2, "Sub Classcode", "0x2"),
        _kv(2, "Device Id", gpu.pci_device_id),
        _kv(2, "Bus Id", gpu.bus_id),
        _section(2, "GPU Link Info"),
        _section(3, "PCIe Generation"),
        _kv(4, "Max", gen),
        _kv(4, "Current", gen),
        _kv(4, "Device Current", gen),
        _kv(4, "Device Max", gen),
        _kv(4, "Host Max", gen),
        _section(3, "Link Width"),
        _kv(4, "Max", f"{gpu.pcie_width}x"),
        _kv(4, "Current", f"{gpu.pcie_width}x"),
        _kv(1, "Fan Speed", fan),
        _kv(1, "Performance State", gpu.pstate),
        *health_report.event_reasons(gpu.health),
        _section(1, "FB Memory Usage"),
        *(_kv(2, key, text) for key, text in zip(("Total", "Reserved", "Used", "Free"), fb_text, strict=True)),
        _section(1, "BAR1 Memory Usage"),
        _kv(2, "Total", _mib(gpu.bar1_mib)),
        _kv(2, "Used", _mib(1)),
        _kv(2, "Free", _mib(gpu.bar1_mib - 1)),
        _kv(1, "Compute Mode", gpu.compute_mode),
        _section(1, "Utilization"),
        *(_kv(2, engine, util) for engine in ("GPU", "Memory", "Encoder", "Decoder", "JPEG", "OFA")),
        _section(1, "ECC Mode"),
        _kv(2, "Current", "Enabled"),
        _kv(2, "Pending", "Enabled"),
        *health_report.memory_errors(gpu.health),
        _section(1, "Temperature"),
        _kv(2, "GPU Current Temp", f"{gpu.temperature_c} C"),
        _section(1, "GPU Power Readings"),
        _kv(2, "Average Power Draw", draw),
        _kv(2, "Instantaneous Power Draw", draw),
        _kv(2, "Current Power Limit", limit),
        _kv(2, "Requested Power Limit", limit),
        _kv(2, "Default Power Limit", limit),
        _kv(2, "Min Power Limit", f"{gpu.power_min_w:.2f} W"),
        _kv(2, "Max Power Limit", limit),
        *health_report.clocks_and_fabric(gpu.health),
        _kv(1, "Processes", "None"),
        "",
    )


def mig_block(mig: SmiMig) -> tuple[str, ...]:
    """A MIG device's lines; the GPU-instance ID is a token (``tokens.GI``), as in the table rows."""
    return (
        _section(2, "MIG Device"),
        _kv(3, "Index", tokens.MIG),
        _kv(3, "GPU Instance ID", tokens.GI),
        _kv(3, "Compute Instance ID", str(mig.ci_id)),
        _section(3, "Device Attributes"),
        _section(4, "Shared"),
        _kv(5, "Multiprocessor count", str(mig.multiprocessors)),
        _kv(5, "Copy Engine count", str(mig.copy_engines)),
        _kv(5, "Encoder count", str(mig.encoders)),
        _kv(5, "Decoder count", str(mig.decoders)),
        _kv(5, "OFA count", str(mig.ofa)),
        _kv(5, "JPG count", str(mig.jpeg)),
        _section(3, "ECC Errors"),
        _section(4, "Volatile"),
        _kv(5, "SRAM Uncorrectable", "0"),
        _section(3, "FB Memory Usage"),
        _kv(4, "Total", _mib(mig.memory_mib)),
        _kv(4, "Used", _mib(mig.used_mib)),
        _kv(4, "Free", _mib(mig.memory_mib - mig.used_mib)),
        _section(3, "BAR1 Memory Usage"),
        _kv(4, "Total", _mib(mig.bar1_mib)),
        _kv(4, "Used", _mib(0)),
        _kv(4, "Free", _mib(mig.bar1_mib)),
    )


def assemble(node: SmiNode, gpus: Sequence[VisibleGpu], attached: int, timestamp: str) -> str:
    lines = [tokens.fill(line, attached=attached, timestamp=timestamp) for line in head(node)]
    for v in gpus:
        lines += gpu_head(v.gpu, partial=not v.whole)
        if v.migs:
            lines.append(MIG_DEVICES)
            for n, mig in enumerate(v.migs):
                lines += [tokens.fill(line, mig=n, gi=mig.gi_id) for line in mig_block(mig)]
        lines += gpu_tail(v.gpu, partial=not v.whole)
    return "".join(line + "\n" for line in lines)
