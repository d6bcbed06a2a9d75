"""The health of every published DRA device, from the live inventory: for the health stream."""

from __future__ import annotations

from typing import Literal

from fakegpu.dra.device_map import published_devices
from fakegpu.sharing.live_inventory import LiveInventory


def device_health(
    live: LiveInventory, driver: str, mig_mode: Literal["static", "dynamic"]
) -> list[tuple[str, str, bool, str]]:
    """(pool, device, healthy, message) per published device; a dynamic MIG device (no UUID yet) has its
    GPU's health."""
    node = live.inventory.node
    unhealthy = live.unhealthy()
    out = []
    for name, device in sorted(published_devices(node, mig_mode).items()):
        key = device.uuid if device.uuid is not None else device.parent_uuid
        bad = key in unhealthy or device.parent_uuid in unhealthy
        xid = unhealthy.get(key, unhealthy.get(device.parent_uuid))
        message = f"XID {xid}" if bad and xid is not None else ("unhealthy" if bad else "")
        out.append((node.name, name, not bad, message))
    return out
