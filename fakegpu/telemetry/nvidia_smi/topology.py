"""``nvidia-smi topo -m``: the GPU-to-GPU matrix of the GPUs a container sees, with CPU and NUMA affinity.

The layout is the tab-separated one of drivers 5xx and later (8x H100 80GB HBM3 without NICs, RHEL AI
``nvidia-smi topo --matrix``; 2x RTX 5090 on driver 580 in noonghunna/club-3090#1229): a header row, one
row per GPU, an empty line and the legend. Cells come from the node: ``NV#`` for GPUs the node links
(``nvlinks``), else ``NODE`` on one NUMA node and ``SYS`` across NUMA nodes (fakegpu has no PCIe switches,
so no ``PIX``/``PXB``/``PHB``). CPU Affinity is empty: it is the CPUs of the GPU's NUMA node the caller
may run on, and a fake node's NUMA nodes have no CPUs in the container (real readings show the same empty
column for GPUs whose NUMA node's CPUs a job may not use, as in NVIDIA/nccl-tests logs under Slurm).
GPU NUMA ID is ``N/A`` as on every board but Grace Hopper/Blackwell. Rows and columns are the visible
GPUs, numbered as the container numbers them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from fakegpu.telemetry.nvidia_smi.devices import SmiGpu, SmiNode, VisibleGpu

SELF: Final = " X "
LEGEND: Final = (
    "",
    "Legend:",
    "",
    "  X    = Self",
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "  PIX  = Connection traversing at most a single PCIe bridge",
    "  NV#  = Connection traversing a bonded set of # NVLinks",
)
HEAD_TAIL: Final = "CPU Affinity\tNUMA Affinity\tGPU NUMA ID"
NO_ID_OPTION: Final = "The -i command line argument must be used in conjunction with -n or -p.\n"
"""``nvidia-smi topo -m -i 0`` (cfregly/ai-performance-engineering#8)."""


def cell(a: SmiGpu, b: SmiGpu) -> str:
    """How ``a`` reaches ``b``."""
    if a.index == b.index:
        return SELF
    if b.index in a.nvlink_peers:
        return f"NV{min(a.nvlink_links, b.nvlink_links)}"
    return "NODE" if a.numa == b.numa else "SYS"


def cells(node: SmiNode, gpu: SmiGpu) -> tuple[str, ...]:
    """``gpu``'s cell towards every GPU of the node, in node order."""
    return tuple(cell(gpu, other) for other in node.gpus)


def row_tail(gpu: SmiGpu) -> str:
    """CPU Affinity, NUMA Affinity (tab-padded to its header) and GPU NUMA ID."""
    numa = "N/A" if gpu.numa is None else str(gpu.numa)
    return f"\t{numa}\t\tN/A"


def head(count: int) -> str:
    return "".join(f"\tGPU{i}" for i in range(count)) + "\t" + HEAD_TAIL


def assemble(node: SmiNode, gpus: Sequence[VisibleGpu]) -> str:
    lines = [head(len(gpus))]
    for v in gpus:
        lines.append(f"GPU{v.index}\t" + "\t".join(cell(v.gpu, w.gpu) for w in gpus) + "\t" + row_tail(v.gpu))
    return "".join(line + "\n" for line in (*lines, *LEGEND))
