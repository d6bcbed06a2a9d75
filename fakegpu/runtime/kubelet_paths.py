"""Where the kubelet keeps its sockets, relative to its ``--root-dir`` (default /var/lib/kubelet).

Every path follows the root so a kubelet with another ``--root-dir`` works too; the registry and
plugin directories can also be set on their own (DaemonSets sometimes mount them elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = Path("/var/lib/kubelet")
KUBELET_SOCKET = "kubelet.sock"
DRA_SOCKET = "dra.sock"
"""A DRA driver's service socket in its plugin directory (``plugins/<driver>/dra.sock``)."""


@dataclass(frozen=True)
class KubeletPaths:
    root: Path = DEFAULT_ROOT
    registry_dir: Path | None = None
    plugins_dir: Path | None = None

    @property
    def device_plugins(self) -> Path:
        return self.root / "device-plugins"

    @property
    def kubelet_socket(self) -> Path:
        return self.device_plugins / KUBELET_SOCKET

    @property
    def plugins_registry(self) -> Path:
        return self.registry_dir or self.root / "plugins_registry"

    @property
    def plugins(self) -> Path:
        return self.plugins_dir or self.root / "plugins"

    def dra_socket(self, driver: str) -> Path:
        """``plugins/<driver>/dra.sock``: where a DRA driver serves the kubelet."""
        return self.dra_plugin_dir(driver) / DRA_SOCKET

    def dra_plugin_dir(self, driver: str) -> Path:
        return self.plugins / driver
