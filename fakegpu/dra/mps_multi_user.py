"""Multi-user MPS (``mpsConfig.multiUser: true``): allowed on Volta and newer GPUs only.

NVIDIA's MPS control daemon serves clients of one Linux user unless started with ``-M``; since
kubernetes-sigs/dra-driver-nvidia-gpu PR #1153 (main at 421c0f4, after v0.4.0) ``multiUser: true`` adds that
flag, so containers of different UIDs sharing a claim share its daemon. Before starting the daemon,
``MpsControlDaemon.Start`` (``cmd/gpu-kubelet-plugin/sharing.go``) checks every full GPU of the config's
group with ``ensureCapability`` (``mps_capability.go``): a compute capability below 7.0 fails the claim's
preparation. The errors are joined as Go's ``errors.Join`` joins them there: GPUs in UUID order, the
last one's first, one per line. fakegpu runs no daemon, so beyond this check ``multiUser`` has no effect.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

VOLTA: Final = (7, 0)
"""``voltaCudaComputeCapability``: the documented minimum for MPS's multi-user server."""


def multi_user_error(gpus: Iterable[tuple[str, tuple[int, int]]]) -> str | None:
    """NVIDIA's text (after ``error applying config: ``) when a GPU of ``(uuid, compute capability)`` is older
    than Volta, else None."""
    wanted = f"{VOLTA[0]}.{VOLTA[1]}"
    errors: list[str] = []
    for uuid, (major, minor) in sorted(set(gpus)):
        if (major, minor) < VOLTA:
            errors.insert(0, f'{uuid} has insufficient cudaComputeCapability "{major}.{minor}", wanted >= "{wanted}"')
    if not errors:
        return None
    return "error starting MPS control daemon: multiuser mode was requested but is not supported: " + "\n".join(errors)
