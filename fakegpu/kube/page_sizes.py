"""How many objects one list request asks for (``limit``), per kind: lists go in pages so that neither the
client nor the API server holds a whole large list at once.

A page is decoded and reduced to what its caller needs before the next one is asked for, so a client's memory
is bounded by one page; the server, too, answers a page without building the full list in memory.
"""

from __future__ import annotations

NODE_PAGE = 500
"""Nodes per page: a Node is a few KB, so a page is a few MB; what informers and kubectl ask for."""

SLICE_PAGE = 100
"""ResourceSlices per page: a dynamic-MIG slice is about 26-30 KB on the wire (and several times that once
decoded), so 100 keep a page near 3 MB while a node's pool (9 slices for 8 GPUs, 72 for 64) still fits in one
or a few pages."""

SLICE_KEY_PAGE = 500
"""ResourceSlices per page when only their keys are read (``lean_requests.SliceHead``): no objects are made
for the devices, so a page costs its bytes on the wire (~15 MB at most) and little more; a fleet's 9000 slices
are listed in 18 requests."""
