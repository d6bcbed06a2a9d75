"""Every device name the DRA driver publishes for a node, and what each one is.

Names are NVIDIA's (``gpu.nvidia.com`` driver): full GPU ``gpu-<index>``; MIG
``gpu-<index>-mig-<profile without '.', '+' as '-'>-<GI profile ID>-<start slot>``. Prepare, the health
stream and the admin socket look devices up here; the names come from the slice builder's own rules,
so what is prepared and what is published can never disagree.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

from fakegpu.dra.resource_slices import (
    MigMode,
    device_name_gpu,
    device_name_mig,
    dynamic_mig_capable,
    whole_gpu_offered_with_dynamic_mig,
)
from fakegpu.sharing.identifiers import mig_uuid
from fakegpu.sharing.node import Node

DeviceKind = Literal["gpu", "mig"]


@dataclass(frozen=True)
class PublishedDevice:
    """One device this node publishes in its ResourceSlices, with what prepare needs to know about it."""

    name: str
    kind: DeviceKind
    uuid: str | None
    """``GPU-...`` / ``MIG-...``; None for a dynamic MIG device, which does not exist until prepared."""
    parent_uuid: str
    parent_index: int
    profile: str | None
    start: int | None
    """First memory slice of a MIG device."""
    memory_mib: int

    def visible_uuid(self, node_name: str) -> str:
        """The UUID a workload sees; dynamic MIG devices get the one they would have if created."""
        if self.uuid is not None:
            return self.uuid
        assert self.profile is not None and self.start is not None  # only dynamic MIG has no UUID
        return mig_uuid(node_name, self.parent_index, self.profile, self.start)


@functools.lru_cache(maxsize=16)
def published_devices(node: Node, mig_mode: MigMode) -> dict[str, PublishedDevice]:
    """Every device name the DRA driver publishes for ``node``: GPU by GPU, sorted by name within a GPU.

    Cached per node and mode (prepare and the health stream ask often); callers must not modify it.

    static: MIG-enabled GPUs publish their MIG instances, the others their full GPU.
    dynamic: GPUs that pass ``dynamic_mig_capable`` publish every profile at every allowed start slot plus the
    full GPU (see ``whole_gpu_offered_with_dynamic_mig``); other GPUs publish the full GPU. Names come from the
    slice builder's own rules, so prepare and publish can never disagree.
    """
    out: dict[str, PublishedDevice] = {}
    for gpu in node.gpus:
        full = PublishedDevice(
            name=device_name_gpu(gpu),
            kind="gpu",
            uuid=gpu.uuid,
            parent_uuid=gpu.uuid,
            parent_index=gpu.index,
            profile=None,
            start=None,
            memory_mib=gpu.model.memory_mib,
        )
        devices: list[PublishedDevice] = []
        if mig_mode == "static" or not dynamic_mig_capable(gpu):
            if not gpu.mig_enabled:
                devices.append(full)
            devices.extend(
                PublishedDevice(
                    name=device_name_mig(gpu, mig.profile, mig.start),
                    kind="mig",
                    uuid=mig.uuid,
                    parent_uuid=gpu.uuid,
                    parent_index=gpu.index,
                    profile=mig.profile.name,
                    start=mig.start,
                    memory_mib=mig.profile.memory_mib,
                )
                for mig in (gpu.mig_devices if gpu.mig_enabled else ())
            )
        else:
            if whole_gpu_offered_with_dynamic_mig(gpu):
                devices.append(full)
            devices.extend(
                PublishedDevice(
                    name=device_name_mig(gpu, profile, start),
                    kind="mig",
                    uuid=None,
                    parent_uuid=gpu.uuid,
                    parent_index=gpu.index,
                    profile=profile.name,
                    start=start,
                    memory_mib=profile.memory_mib,
                )
                for profile in gpu.model.mig_profiles
                for start in profile.placements
            )
        out.update((d.name, d) for d in sorted(devices, key=lambda d: d.name))
    return out
