"""The one error a device plugin RPC raises for a bad request: answered as INVALID_ARGUMENT."""

from __future__ import annotations


class AllocationError(Exception):
    """A request the plugin refuses; ``str(err)`` is the exact text NVIDIA's plugin answers with."""
