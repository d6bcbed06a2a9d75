"""The DRA drivers an integration test started, so its fixture can stop every one of them at the end.

Each driver fixture used to repeat the same steps (build the driver on ``root``'s kubelet directory, record it,
start it, wait for its ResourceSlices, and stop them all newest first on teardown); they differ only in the
inventory and settings they build, which the fixtures still do themselves.
"""

from __future__ import annotations

from pathlib import Path

from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.live_inventory import LiveInventory
from tests.apiserver import FakeApiServer


class StartedDrivers:
    """Drivers started on ``root``'s kubelet directory; a driver whose start failed is recorded too (its stop
    cleans up whatever the failed start left behind)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.drivers: list[DraDriver] = []

    def __len__(self) -> int:
        return len(self.drivers)

    async def start(self, live: LiveInventory, settings: DraSettings, server: FakeApiServer) -> DraDriver:
        """Start a driver against ``server`` and return it once its GPU ResourceSlices are published."""
        driver = DraDriver(live, KubeletPaths(self.root / "kubelet"), settings, server.client)
        self.drivers.append(driver)
        await driver.start()
        await driver.wait_published()
        return driver

    async def stop_all(self) -> None:
        """Stop every driver, newest first."""
        while self.drivers:
            await self.drivers.pop().stop()


def write_boot_id(root: Path, boot_id: str) -> Path:
    """Write the fake node's boot ID (what ``--boot-id-file`` names) under ``root``; a test reboots the node by
    rewriting the file."""
    path = root / "boot_id"
    path.write_text(f"{boot_id}\n")
    return path
