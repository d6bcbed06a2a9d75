"""A resolved node: the physical GPUs and MIG instances a node spec (plus a MIG layout) describes.

This is what the hardware looks like after mig-parted ran: identities fixed, instances placed,
health decided. Everything the device plugin and DRA driver advertise is derived from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations

from fakegpu.sharing.catalog import CATALOG, GpuModel, MigProfile
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.health import HEALTHY, UNHEALTHY, XidPolicy
from fakegpu.sharing.identifiers import gpu_uuid, mig_uuid, pci_bus_id
from fakegpu.sharing.mig_geometry import MigLayoutError, Placement, check_placements, place
from fakegpu.sharing.mig_parted import MigLayoutChoice
from fakegpu.sharing.node_spec import NodeSpec
from fakegpu.sharing.nvlink_fabric import NvlinkFabric


@dataclass(frozen=True)
class MigInstance:
    """A GPU instance with one full-size compute instance, as mig-parted creates them."""

    uuid: str
    profile: MigProfile
    start: int
    gi_id: int
    ci_id: int
    index: int
    parent_index: int

    @property
    def index_id(self) -> str:
        """NVIDIA's MIG index form ``<gpu>:<mig>`` (deviceIDStrategy=index)."""
        return f"{self.parent_index}:{self.index}"


@dataclass(frozen=True)
class PhysicalGpu:
    index: int
    uuid: str
    model: GpuModel
    numa: int | None
    pci_bus_id: str
    mig_enabled: bool
    mig_devices: tuple[MigInstance, ...]
    health: str
    xid: int | None

    @property
    def minor(self) -> int:
        return self.index

    @property
    def uuids(self) -> tuple[str, ...]:
        """The GPU's UUID and those of its MIG devices: everything an event on the GPU touches."""
        return (self.uuid, *(m.uuid for m in self.mig_devices))

    @property
    def dynamic_mig_capable(self) -> bool:
        """Whether the DRA driver's dynamic MIG offers this GPU's MIG profiles (NVIDIA's ``isDynamicMIGCapable``):
        a MIG-capable GPU that switches MIG mode without a reset (Hopper and later), or an Ampere GPU whose MIG
        mode is already on. An Ampere GPU with MIG mode off stays a plain whole GPU. The one rule for the
        slices, the preparer and the fake nvidia-smi."""
        return self.model.mig_capable and (self.mig_enabled or self.model.architecture != "Ampere")


@dataclass(frozen=True)
class Node:
    name: str
    driver_version: str
    cuda_driver_version: str
    machine: str
    gpus: tuple[PhysicalGpu, ...]
    nvlinks: frozenset[tuple[int, int]]
    fabric: NvlinkFabric | None = None
    """Multi-node NVLink (NVL72 racks): the node's clique and IMEX channels; None off such a fabric."""

    def nvlinked(self, a: int, b: int) -> bool:
        return (min(a, b), max(a, b)) in self.nvlinks


def gi_id(model: GpuModel, placement: Placement) -> int:
    """The GPU-instance ID the driver gives a placement: IDs are numbered by size class, largest first,
    then by start slot (A100: 7g -> 0, 4-slice -> 1-2, 2-slice -> 3-6, 1-slice -> 7-13)."""
    size = placement.profile.memory_slices
    offset = 0
    larger = model.memory_slices
    while larger > size:
        offset += model.memory_slices // larger
        larger //= 2
    return offset + placement.start // size


def build_node(
    spec: NodeSpec,
    node_name: str,
    *,
    source: str,
    xid_policy: XidPolicy | None = None,
    mig_choices: Mapping[int, MigLayoutChoice] | None = None,
    identity_seed: str | None = None,
) -> Node:
    """Resolve a node spec into GPUs with identities, placements and health. Identities derive from
    ``identity_seed`` (the node name unless a bug mode asks for fresh IDs)."""
    seed = node_name if identity_seed is None else identity_seed
    policy = xid_policy or XidPolicy()
    choices = mig_choices or {}
    total = spec.gpu_count
    gpus: list[PhysicalGpu] = []
    index = 0
    for entry_no, entry in enumerate(spec.gpus):
        model = CATALOG[entry.model]
        for k in range(entry.count):
            if isinstance(entry.numa, list):
                numa: int | None = entry.numa[k]
            elif entry.numa is not None:
                numa = entry.numa
            else:
                numa = index * spec.numa_nodes // total
            if numa is not None and numa < 0:
                numa = None
            mig_enabled = entry.mig_enabled
            where = f"gpus[{entry_no}]"
            placements: list[Placement] = []
            choice = choices.get(index)
            try:
                if choice is not None:
                    mig_enabled = choice.mig_enabled
                    where = choice.origin
                    placements = place(model, dict(choice.counts)) if mig_enabled else []
                elif mig_enabled and isinstance(entry.mig_devices, dict):
                    placements = place(model, entry.mig_devices)
                elif mig_enabled and isinstance(entry.mig_devices, list):
                    placements = check_placements(model, [(d.profile, d.start) for d in entry.mig_devices])
            except MigLayoutError as exc:
                raise SpecError(
                    source if choice is None else where,
                    f"GPU {index}: {exc}",
                    None if choice is not None else f"{where}.migDevices",
                ) from None
            uuid = gpu_uuid(seed, index)
            instances = tuple(
                MigInstance(
                    uuid=mig_uuid(seed, index, p.profile.name, p.start),
                    profile=p.profile,
                    start=p.start,
                    gi_id=gi_id(model, p),
                    ci_id=0,
                    index=n,
                    parent_index=index,
                )
                for n, p in enumerate(sorted(placements))
            )
            health: str = entry.health
            if entry.xid is not None and policy.is_critical(entry.xid):
                health = UNHEALTHY
            gpus.append(
                PhysicalGpu(
                    index=index,
                    uuid=uuid,
                    model=model,
                    numa=numa,
                    pci_bus_id=pci_bus_id(index),
                    mig_enabled=mig_enabled,
                    mig_devices=instances,
                    health=health if health == UNHEALTHY else HEALTHY,
                    xid=entry.xid,
                )
            )
            index += 1
    for unknown in sorted(set(choices) - set(range(total))):
        raise SpecError(choices[unknown].origin, f"selects GPU {unknown} but the node has {total} GPU(s)")
    return Node(
        name=node_name,
        driver_version=spec.driver_version,
        cuda_driver_version=spec.cuda_driver_version,
        machine=spec.machine,
        gpus=tuple(gpus),
        nvlinks=_nvlinks(spec, gpus, source),
        fabric=spec.fabric.fabric() if spec.fabric is not None else None,
    )


def _nvlinks(spec: NodeSpec, gpus: list[PhysicalGpu], source: str) -> frozenset[tuple[int, int]]:
    indices = [g.index for g in gpus]
    nvlink = spec.nvlink
    if nvlink is None:
        same_sxm = len({g.model.key for g in gpus}) == 1 and gpus[0].model.sxm
        nvlink = "all" if same_sxm else "none"
    if nvlink == "none":
        return frozenset()
    if nvlink == "all":
        return frozenset(combinations(indices, 2))
    pairs: set[tuple[int, int]] = set()
    seen: dict[int, int] = {}
    for g, group in enumerate(nvlink):
        for i in group:
            if i not in indices:
                raise SpecError(source, f"GPU {i} does not exist (the node has {len(indices)})", f"nvlink[{g}]")
            if i in seen:
                raise SpecError(source, f"GPU {i} is already in NVLink group {seen[i]}", f"nvlink[{g}]")
            seen[i] = g
        pairs.update(combinations(sorted(group), 2))
    return frozenset(pairs)
