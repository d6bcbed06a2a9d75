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
GI_4: Final = "@I4@"
"""A MIG device's GPU-instance ID right-aligned in 4 (MIG devices row): MIG fragments are shared by every
device of the same shape, so the one number that tells them apart is filled in when printing."""
GI: Final = "@I@"
START: Final = "@S@"
"""A MIG device's first memory slice (``mig -lgi`` Placement ``Start:Size``), filled in for the same reason."""
UUID: Final = "@U@"
"""A MIG device's UUID (``-L`` line), for the same reason."""

ALL: Final = (TIMESTAMP, ATTACHED, GPU_4, GPU_3, GPU, MIG_3, MIG_2, MIG, GI_4, GI, START, UUID)


def fill(
    line: str,
    *,
    gpu: int = 0,
    mig: int = 0,
    gi: int = 0,
    start: int = 0,
    uuid: str = "",
    attached: int = 0,
    timestamp: str = "",
) -> str:
    """Replace every token, in this order, each occurrence left to right without rescanning what was put in;
    the UUID and the timestamp (values from outside: devices.json, an override) go in last, so nothing in
    them is taken for a token. The awk in ``shell_script`` mirrors it with ``index``/``substr`` (not
    ``gsub``, which would read ``&`` in a value as the matched text)."""
    return (
        line.replace(ATTACHED, str(attached))
        .replace(GPU_4, f"{gpu:4d}")
        .replace(GPU_3, f"{gpu:3d}")
        .replace(GPU, str(gpu))
        .replace(MIG_3, f"{mig:3d}")
        .replace(MIG_2, f"{mig:2d}")
        .replace(MIG, str(mig))
        .replace(GI_4, f"{gi:4d}")
        .replace(GI, str(gi))
        .replace(START, str(start))
        .replace(UUID, uuid)
        .replace(TIMESTAMP, timestamp)
    )
