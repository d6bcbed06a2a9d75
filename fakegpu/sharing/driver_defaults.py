"""The NVIDIA driver fakegpu emulates unless a node spec says otherwise.

A module of its own, free of imports, because ``fakegpu --version`` prints these and must not load the node
spec's parsers (yaml, pydantic) to do it.
"""

from __future__ import annotations

DEFAULT_DRIVER_VERSION = "570.172.08"
"""The NVIDIA driver a node spec emulates unless it says otherwise (``fakegpu --version`` prints it)."""
DEFAULT_CUDA_DRIVER_VERSION = "12.8"
"""The CUDA version that driver supports, as ``nvidia-smi`` and GFD's cuda labels report it."""
