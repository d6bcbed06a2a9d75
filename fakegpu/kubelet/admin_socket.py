"""Where ``fakegpu kubelet`` serves its admin socket by default: ``<kubelet dir>/fakegpu-kubelet.sock``.

Beside ``device-plugins/`` rather than in it, because a kubelet (re)start removes every socket there. This
module imports nothing heavy: ``fakegpu ctl`` and ``--help`` read it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

KUBELET_ADMIN_SOCKET: Final = "fakegpu-kubelet.sock"


def default_admin_socket(kubelet_dir: Path) -> Path:
    return kubelet_dir / KUBELET_ADMIN_SOCKET
