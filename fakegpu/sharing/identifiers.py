"""Deterministic device identities: the same node name and position always give the same UUID.

The kubelet's checkpoint stores device IDs; if a restarted plugin advertised new ones, restored
allocations would point at devices that no longer exist. So IDs are UUIDv5 names, never random.
"""

from __future__ import annotations

import uuid

# Fixed namespace for all fakegpu identities (uuid5 of the project's name in the URL namespace).
FAKEGPU_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://fakegpu.invalid/devices")


def gpu_uuid(node_name: str, index: int) -> str:
    """``GPU-<uuid>`` for the GPU at ``index`` on ``node_name``."""
    return f"GPU-{uuid.uuid5(FAKEGPU_NAMESPACE, f'{node_name}/gpu/{index}')}"


def mig_uuid(node_name: str, gpu_index: int, profile: str, start: int) -> str:
    """``MIG-<uuid>`` for a GPU instance; its placement is part of its identity, as on real hardware."""
    return f"MIG-{uuid.uuid5(FAKEGPU_NAMESPACE, f'{node_name}/gpu/{gpu_index}/mig/{profile}@{start}')}"


def pci_bus_id(index: int) -> str:
    """A plausible, unique PCI bus ID per GPU index (domain 0, one bus per GPU)."""
    if index < 15:
        return f"0000:{(0x18 + index * 0x10) & 0xFF:02x}:00.0"
    return f"0001:{index & 0xFF:02x}:00.0"


def replica_id(device_id: str, replica: int) -> str:
    """NVIDIA's annotated replica ID: ``<id>::<n>``."""
    return f"{device_id}::{replica}"


def strip_replica(device_id: str) -> str:
    """The physical or MIG device behind an annotated replica ID."""
    return device_id.split("::", 1)[0]
