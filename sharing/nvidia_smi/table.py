"""The classic ``nvidia-smi`` table, laid out as driver 570 prints it (91 columns).

Column widths were checked against real 570 readings (L4, A10, H100 80GB HBM3, A100 80GB PCIe with MIG
devices). GPU rows and MIG rows are rendered once per device with index tokens; ``assemble`` puts the
visible ones between the fixed header and the Processes box. Utilisation, temperature and power are the
idle numbers of ``devices.SmiGpu``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from sharing.nvidia_smi import tokens
from sharing.nvidia_smi.devices import SmiGpu, SmiMig, SmiNode, VisibleGpu

WIDTH: Final = 91
_RULE: Final = "+" + "-" * (WIDTH - 2) + "+"


def _boxed(text: str) -> str:
    return f"{text:<{WIDTH - 1}}|"


NAME_WIDTH: Final = 29

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
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 3] + "..."


def mig_mode_text(gpu: SmiGpu) -> str:
    if not gpu.mig_capable:
        return "N/A"
    return "Enabled" if gpu.mig_enabled else "Disabled"


def gpu_rows(gpu: SmiGpu) -> tuple[str, str, str]:
    """A GPU's three table lines; in MIG mode ECC shows ``On`` and utilisation ``N/A``, as on real GPUs."""
    ecc = "On" if gpu.mig_enabled else "0"
    util = "N/A" if gpu.mig_enabled else "0%"
    return (
        f"|{tokens.GPU_4}  {_name(gpu.name):<{NAME_WIDTH}}  {'On':<3} |   {gpu.bus_id} {'Off':>3} |{ecc:>21} |",
        f"|{gpu.fan:>4}{gpu.temperature_c:>5}C{gpu.pstate:>6}{int(gpu.power_draw_w):>15}W / {gpu.power_limit_w:>4}W "
        f"|{gpu.used_mib:>8}MiB / {gpu.memory_mib:>6}MiB |{util:>8}{'Default':>13} |",
        f"|{'':41}|{'':24}|{mig_mode_text(gpu):>21} |",
    )


def mig_rows(mig: SmiMig) -> tuple[str, str]:
    """A MIG device's two lines: memory and BAR1 use, SMs, uncorrectable ECC, shared engines."""
    return (
        f"|{tokens.GPU_3} {mig.gi_id:>4} {mig.ci_id:>3} {tokens.MIG_3}  "
        f"|{mig.used_mib:>16}MiB / {mig.memory_mib:>5}MiB    "
        f"|{mig.multiprocessors:>3}{0:>7} "
        f"|{mig.copy_engines:>3}{mig.encoders:>4}{mig.decoders:>5}{mig.ofa:>5}{mig.jpeg:>5} |",
        f"|{'':18}|{0:>18}MiB / {mig.bar1_mib:>5}MiB  |{'':11}|{'':23}|",
    )


def assemble(node: SmiNode, gpus: Sequence[VisibleGpu], timestamp: str) -> str:
    """The whole table for the GPUs shown; the MIG box appears when one of them is in MIG mode."""
    lines = [tokens.fill(DATE_LINE, timestamp=timestamp), *head(node)]
    for v in gpus:
        lines += [tokens.fill(row, gpu=v.index) for row in gpu_rows(v.gpu)]
        lines.append(GPU_SEPARATOR)
    if any(v.gpu.mig_enabled for v in gpus):
        lines += MIG_HEAD
        shown = 0
        for v in gpus:
            for n, mig in enumerate(v.migs):
                lines += [tokens.fill(row, gpu=v.index, mig=n) for row in mig_rows(mig)]
                lines.append(MIG_SEPARATOR)
                shown += 1
        if not shown:
            lines += NO_MIG_DEVICES
    lines += PROCESSES
    return "\n".join(lines) + "\n"
