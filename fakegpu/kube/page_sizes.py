"""How many objects one list request asks for (``limit``), per kind: lists go in pages so that neither the
client nor the API server holds a whole large list at once.

A page is decoded and reduced to what its caller needs before the next one is asked for, so a client's memory
is bounded by one page; the server, too, answers a page without building the full list in memory.
"""

from __future__ import annotations

NODE_PAGE = 500
"""Nodes per page: a Node is a few KB, so a page is a few MB; what informers and kubectl ask for."""

SLICE_KEY_PAGE = 500
"""ResourceSlices per page. Slices are listed only for their keys (``lean_requests.SliceHead``): no objects
are made for the devices, so a page of dynamic-MIG slices (~30 KB each) costs its ~15 MB on the wire and
little more, and a fleet's 9000 slices are listed in 18 requests."""
