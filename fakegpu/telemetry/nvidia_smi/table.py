"""The classic ``nvidia-smi`` table, laid out as driver 570 prints it (91 columns).

Column widths were checked against real 570 readings (L4, A10, H100 80GB HBM3, A100 80GB PCIe with MIG
devices). GPU rows are rendered once per GPU with index tokens, twice for a GPU with MIG devices: whole,
and as a container given only some of its MIG devices sees it (MIG mode Enabled, memory ``N/A``: NVML
refuses the parent's memory there). MIG rows are shared by every MIG device of the same shape, its
GPU-instance ID a token too. ``assemble`` puts the visible ones between the fixed header and the
Processes box. Utilisation, temperature and power are the idle numbers of ``devices.SmiGpu``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from fakegpu.sharing.gpu_policies import TABLE_ABBREVIATIONS
from fakegpu.telemetry.nvidia_smi import tokens
from fakegpu.telemetry.nvidia_smi.devices import SmiGpu, SmiMig, SmiNode, VisibleGpu

WIDTH: Final = 91
_RULE: Final = "+" + "-" * (WIDTH - 2) + "+"


def _boxed(text: str) -> str:
    return f"{text:<{WIDTH - 1}}|"


NAME_WIDTH: Final = 29
NAME_SHOWN: Final = 27
"""Longer names are cut to 24 characters and ``...`` (``NVIDIA RTX 6000 Ada Gene...``,
``NVIDIA GeForce RTX 2080 ...``), as 570 prints them; a 26-character name is shown whole."""

DATE_LINE: Final = tokens.TIMESTAMP + "       "
"""nvidia-smi pads the date with 7 spaces; the date itself is ``date '+%a %b %e %H:%M:%S %Y'``."""

GPU_SEPARATOR: Final = "+-----------------------------------------+------------------------+----------------------+"
MIG_HEAD: Final = (
    "",
    _RULE,
    _boxed("| MIG devices:"),
    "+------------------+----------------------------------+-----------+-----------------------+",
    "| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |",
    "|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |",
    "|                  |                                  |        ECC|                       |",
    "|==================+==================================+===========+=======================|",
)
MIG_SEPARATOR: Final = "+------------------+----------------------------------+-----------+-----------------------+"
NO_MIG_DEVICES: Final = (_boxed("|  No MIG devices found"), _RULE)
PROCESSES: Final = (
    " " * (WIDTH - 2),
    _RULE,
    _boxed("| Processes:"),
    "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
    "|        ID   ID                                                               Usage      |",
    "|" + "=" * (WIDTH - 2) + "|",
    _boxed("|  No running processes found"),
    _RULE,
)


def head(node: SmiNode) -> tuple[str, ...]:
    """The box with the versions and the column titles (after the date line)."""
    drv = node.driver_version
    return (
        _RULE,
        f"| NVIDIA-SMI {drv:<23}Driver Version: {drv:<15}CUDA Version: {node.cuda_version:<9}|",
        "|-----------------------------------------+------------------------+----------------------+",
        "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
        "|                                         |                        |               MIG M. |",
        "|=========================================+========================+======================|",
    )


def _name(name: str) -> str:
    return name if len(name) <= NAME_SHOWN else name[: NAME_SHOWN - 3] + "..."


def mig_mode_text(gpu: SmiGpu, *, partial: bool = False) -> str:
    """``partial``: seen through some of its MIG devices only, so in MIG mode whatever the node says (a
    dynamic MIG device is created by switching MIG on)."""
    if not gpu.mig_capable and not partial:
        return "N/A"
    return "Enabled" if gpu.mig_enabled or partial else "Disabled"


def gpu_rows(gpu: SmiGpu, *, partial: bool = False) -> tuple[str, str, str]:
    """A GPU's three table lines; ``Volatile Uncorr. ECC`` is the volatile uncorrectable (DRAM) error count, in MIG
    mode ``On``, and utilisation ``N/A`` there, as on real GPUs;
    ``partial`` (only some MIG devices visible) also hides the memory, as NVML does in such a container."""
    mig_on = gpu.mig_enabled or partial
    ecc = "On" if mig_on else str(gpu.health.ecc_dbe_volatile)
    util = "N/A" if mig_on else "0%"
    memory = f"{'N/A':>23}" if partial else f"{gpu.used_mib:>8}MiB / {gpu.memory_mib:>6}MiB"
    return (
        f"|{tokens.GPU_4}  {_name(gpu.name):<{NAME_WIDTH}}  {'On':<3} |   {gpu.bus_id} {'Off':>3} |{ecc:>21} |",
        f"|{gpu.fan:>4}{gpu.temperature_c:>5}C{gpu.pstate:>6}{int(gpu.power_draw_w):>15}W / {gpu.power_limit_w:>4}W "
        f"|{memory} |{util:>8}{TABLE_ABBREVIATIONS[gpu.compute_mode]:>13} |",
        f"|{'':41}|{'':24}|{mig_mode_text(gpu, partial=partial):>21} |",
    )


def mig_rows(mig: SmiMig) -> tuple[str, str]:
    """A MIG device's two lines: memory and BAR1 use, SMs, uncorrectable ECC, shared engines; the
    GPU-instance ID is a token (``tokens.GI_4``), so devices of one shape share the lines."""
    return (
        f"|{tokens.GPU_3} {tokens.GI_4} {mig.ci_id:>3} {tokens.MIG_3}  "
        f"|{mig.used_mib:>16}MiB / {mig.memory_mib:>5}MiB    "
        f"|{mig.multiprocessors:>3}{0:>7} "
        f"|{mig.copy_engines:>3}{mig.encoders:>4}{mig.decoders:>5}{mig.ofa:>5}{mig.jpeg:>5} |",
        f"|{'':18}|{0:>18}MiB / {mig.bar1_mib:>5}MiB  |{'':11}|{'':23}|",
    )


def assemble(node: SmiNode, gpus: Sequence[VisibleGpu], timestamp: str) -> str:
    """The whole table for the GPUs shown; the MIG box appears when one of them is in MIG mode."""
    lines = [tokens.fill(DATE_LINE, timestamp=timestamp), *head(node)]
    for v in gpus:
        lines += [tokens.fill(row, gpu=v.index) for row in gpu_rows(v.gpu, partial=not v.whole)]
        lines.append(GPU_SEPARATOR)
    if any(v.gpu.mig_enabled or not v.whole for v in gpus):
        lines += MIG_HEAD
        shown = 0
        for v in gpus:
            for n, mig in enumerate(v.migs):
                lines += [tokens.fill(row, gpu=v.index, mig=n, gi=mig.gi_id) for row in mig_rows(mig)]
                lines.append(MIG_SEPARATOR)
                shown += 1
        if not shown:
            lines += NO_MIG_DEVICES
    lines += PROCESSES
    return "\n".join(lines) + "\n"
