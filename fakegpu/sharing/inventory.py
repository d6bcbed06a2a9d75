"""The Inventory: every resource a node advertises and the devices behind each one.

Both faces read it: the device plugin serves ``resources`` over ListAndWatch and Allocate, the DRA
driver publishes the same devices in ResourceSlices.
"""

from __future__ import annotations

from dataclasses import dataclass

from fakegpu.sharing.node import Node
from fakegpu.sharing.plugin_config import PluginConfig, SharingStrategy


@dataclass(frozen=True)
class Device:
    """One allocatable unit: a whole GPU, a MIG device, or one replica of either."""

    id: str
    """The advertised ID: a GPU or MIG UUID, with ``::<n>`` for replicas."""
    health: str
    numa: int | None
    parent: str
    """UUID of the physical GPU."""
    parent_index: int
    base_id: str
    """The GPU or MIG UUID without replica annotation."""
    index_id: str
    """NVIDIA's index form: ``3`` for a GPU, ``3:1`` for a MIG device."""
    mig_profile: str | None
    replica: int | None
    replicas: int
    memory_mib: int
    mps_memory_limit_mib: int | None = None
    mps_thread_percentage: int | None = None

    @property
    def is_mig(self) -> bool:
        return self.mig_profile is not None


@dataclass(frozen=True)
class Resource:
    name: str
    """The advertised extended resource name (after any rename)."""
    base_name: str
    """The name before renaming; GFD labels are keyed by it."""
    devices: tuple[Device, ...]
    sharing: SharingStrategy
    replicas: int
    fail_requests_greater_than_one: bool

    @property
    def short_name(self) -> str:
        return self.name.split("/", 1)[1]

    @property
    def socket_name(self) -> str:
        """NVIDIA's socket file: ``nvidia-gpu.sock``, ``nvidia-mig-1g.10gb.sock``."""
        return f"nvidia-{self.short_name}.sock"

    @property
    def healthy(self) -> int:
        return sum(1 for d in self.devices if d.health == "Healthy")


@dataclass(frozen=True)
class Inventory:
    node: Node
    config: PluginConfig
    resources: tuple[Resource, ...]
    warnings: tuple[str, ...]

    def resource(self, name: str) -> Resource | None:
        for r in self.resources:
            if r.name == name:
                return r
        return None

    @property
    def resource_names(self) -> list[str]:
        return [r.name for r in self.resources]
