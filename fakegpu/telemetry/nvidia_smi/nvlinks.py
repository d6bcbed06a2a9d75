"""How many NVLinks a board bonds to each NVLink peer: the ``#`` of ``nvidia-smi topo -m``'s ``NV#``.

Readings: H100 SXM5 on an NVSwitch baseboard shows ``NV18`` for every pair (8x H100 80GB HBM3, RHEL AI
``nvidia-smi topo --matrix``), B200 ``NV18`` (8x B200 in an nccl-tests log), DGX A100 ``NV12``
(NVIDIA/nccl#1505). H200 carries the H100's eighteen NVLink4 links; the H100 NVL pairs through three
NVLink bridges (``NV12``), the A30 through one (``NV4``) and V100 SXM2 boards in a DGX-1 cube mesh show
``NV2`` on most pairs: these four are NVIDIA's published link counts, not readings.

Which GPUs are linked at all is the node's (``fakegpu.sharing.node.Node.nvlinks``); a board without NVLink
that a node spec links anyway shows ``NV1``, so ``topo -m`` never contradicts the allocator.
"""

from __future__ import annotations

from typing import Final

LINKS_PER_PEER: Final = {
    "h100-80gb": 18,
    "h200": 18,
    "b200": 18,
    "a100-40gb": 12,
    "a100-80gb": 12,
    "h100-94gb": 12,
    "a30": 4,
    "v100-32gb": 2,
}
WITHOUT_NVLINK: Final = 1


def links_per_peer(model_key: str) -> int:
    return LINKS_PER_PEER.get(model_key, WITHOUT_NVLINK)
