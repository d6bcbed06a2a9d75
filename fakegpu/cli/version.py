"""``fakegpu --version``: this package's version and what it emulates by default.

A bug report needs both: the fakegpu release, and the NVIDIA driver and CUDA versions its fake GPUs
report (nvidia-smi, GFD labels, ResourceSlice attributes) unless a node spec says otherwise.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from fakegpu.sharing.driver_defaults import DEFAULT_CUDA_DRIVER_VERSION, DEFAULT_DRIVER_VERSION


def package_version() -> str:
    """The installed distribution's version; a source tree run without installing has none to report."""
    try:
        return version("fakegpu")
    except PackageNotFoundError:
        return "unknown (not installed)"


def version_line() -> str:
    return (
        f"fakegpu {package_version()} "
        f"(emulated NVIDIA driver {DEFAULT_DRIVER_VERSION}, CUDA {DEFAULT_CUDA_DRIVER_VERSION})"
    )
