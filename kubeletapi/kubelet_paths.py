"""Where the kubelet keeps its sockets, relative to its ``--root-dir`` (default /var/lib/kubelet);
every path is derived from the root so a kubelet with another ``--root-dir`` works too."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path("/var/lib/kubelet")
KUBELET_SOCKET = "kubelet.sock"


@dataclass(frozen=True)
class KubeletPaths:
    root: Path = DEFAULT_ROOT

    @property
    def device_plugins(self) -> Path:
        return self.root / "device-plugins"

    @property
    def kubelet_socket(self) -> Path:
        return self.device_plugins / KUBELET_SOCKET

    @property
    def plugins_registry(self) -> Path:
        return self.root / "plugins_registry"

    @property
    def plugins(self) -> Path:
        return self.root / "plugins"

    def dra_socket(self, driver: str) -> Path:
        """``plugins/<driver>/dra.sock``: where a DRA driver serves the kubelet."""
        return self.plugins / driver / "dra.sock"

    def dra_plugin_dir(self, driver: str) -> Path:
        return self.plugins / driver


def unix_target(path: Path) -> str:
    """gRPC target for a Unix socket path (absolute, so ``unix://`` + path has three slashes)."""
    return f"unix://{path.resolve() if not path.is_absolute() else path}"
