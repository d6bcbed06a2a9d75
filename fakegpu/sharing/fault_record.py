"""The faults a virtual node's GPUs carry, recorded on its Node as one annotation.

A virtual node has no daemon to keep runtime state in, so ``fakegpu virtual-nodes --fault`` writes the faults
onto the Node (``fakegpu.io/gpu-faults``) and everything derived from them (the slices' taints, the
capacity, the GFD labels, the IMEX daemon's readiness) is worked out from the annotation: a re-run, the
watcher and ``--recover`` all read the same record, and a healthy node has none (so no write touches it).

The value is JSON: ``{"<GPU index>": ["<fault>", ...]}`` with each fault in its command-line form
(``ecc-uncorrectable count=2``, :meth:`fakegpu.sharing.gpu_faults.GpuFault.describe`), oldest first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from fakegpu.sharing.gpu_faults import GpuFault, parse_fault_text

FAULTS_ANNOTATION: Final = "fakegpu.io/gpu-faults"

NodeFaults = Mapping[int, tuple[GpuFault, ...]]


def encode_faults(faults: NodeFaults) -> str | None:
    """The annotation's value, or None when no GPU has a fault (the annotation is then removed)."""
    kept = {str(i): [f.describe() for f in fs] for i, fs in sorted(faults.items()) if fs}
    return json.dumps(kept, separators=(",", ":"), sort_keys=True) if kept else None


def decode_faults(value: str | None, where: str) -> dict[int, tuple[GpuFault, ...]]:
    """The faults of the annotation's value (None or empty: none); ValueError naming ``where`` (the node)."""
    if not value:
        return {}
    try:
        raw = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: annotation {FAULTS_ANNOTATION} is not JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: annotation {FAULTS_ANNOTATION} must map GPU indices to lists of faults")
    out: dict[int, tuple[GpuFault, ...]] = {}
    for key, texts in raw.items():
        if not str(key).isdigit() or not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ValueError(
                f'{where}: annotation {FAULTS_ANNOTATION}: expected "<GPU index>": [faults], found {key!r}'
            )
        out[int(key)] = tuple(parse_fault_text(t, f"{where}: annotation {FAULTS_ANNOTATION}[{key}]") for t in texts)
    return out
