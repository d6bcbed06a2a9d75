"""``nvidia-smi -L``: one line per GPU and, indented under it, one per MIG device, as real nvidia-smi
prints them (``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)`` / ``  MIG 1g.10gb     Device  0: ...``)."""

from __future__ import annotations

from collections.abc import Sequence

from fakegpu.telemetry.nvidia_smi import tokens
from fakegpu.telemetry.nvidia_smi.devices import SmiGpu, SmiMig, VisibleGpu


def gpu_line(gpu: SmiGpu) -> str:
    return f"GPU {tokens.GPU}: {gpu.name} (UUID: {gpu.uuid})"


def mig_line(mig: SmiMig) -> str:
    """The UUID is a token (``tokens.UUID``), so MIG devices of one profile share the line."""
    return f"  MIG {mig.profile:<11} Device {tokens.MIG_2}: (UUID: {tokens.UUID})"


def assemble(gpus: Sequence[VisibleGpu]) -> str:
    lines: list[str] = []
    for v in gpus:
        lines.append(tokens.fill(gpu_line(v.gpu), gpu=v.index))
        lines += [tokens.fill(mig_line(m), mig=n, uuid=m.uuid) for n, m in enumerate(v.migs)]
    return "".join(line + "\n" for line in lines)
