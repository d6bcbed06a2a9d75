"""The one error a device plugin RPC raises for a bad request: answered as UNKNOWN, as NVIDIA's plugin.

NVIDIA's RPCs return plain Go errors (``internal/plugin/server.go``), which grpc-go sends with code
Unknown; the kubelet copies that code into the pod's message.
"""

from __future__ import annotations


class AllocationError(Exception):
    """A request the plugin refuses; ``str(err)`` is the exact text NVIDIA's plugin answers with."""
