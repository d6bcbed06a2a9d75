"""Placeholders in pre-rendered fragments for what only the reader knows: indices and the time.

A container numbers its GPUs from 0 in PCI order and its MIG devices from 0 per GPU, so the same GPU has
a different index in every pod. Fragments are rendered once per node with these tokens; the Python
renderer and the shell script's awk both replace them with the same printf widths, which is what keeps
their outputs identical byte for byte.
"""

from __future__ import annotations

from typing import Final

TIMESTAMP: Final = "@TS@"
ATTACHED: Final = "@N@"
"""Number of GPUs the container sees (``-q`` "Attached GPUs")."""
GPU_4: Final = "@G4@"
"""The GPU's index right-aligned in 4 (table GPU row)."""
GPU_3: Final = "@G3@"
"""The GPU's index right-aligned in 3 (MIG devices row)."""
GPU: Final = "@G@"
MIG_3: Final = "@M3@"
MIG_2: Final = "@M2@"
MIG: Final = "@M@"

ALL: Final = (TIMESTAMP, ATTACHED, GPU_4, GPU_3, GPU, MIG_3, MIG_2, MIG)


def fill(line: str, *, gpu: int = 0, mig: int = 0, attached: int = 0, timestamp: str = "") -> str:
    """Replace every token; the awk in ``shell_script`` mirrors this with ``gsub`` and ``sprintf``."""
    return (
        line.replace(TIMESTAMP, timestamp)
        .replace(ATTACHED, str(attached))
        .replace(GPU_4, f"{gpu:4d}")
        .replace(GPU_3, f"{gpu:3d}")
        .replace(GPU, str(gpu))
        .replace(MIG_3, f"{mig:3d}")
        .replace(MIG_2, f"{mig:2d}")
        .replace(MIG, str(mig))
    )
