"""The device description the fake nvidia-smi renders from, and the resolution of the visible devices.

A container never sees the whole node: nvidia-container-runtime hands it the devices named in
``NVIDIA_VISIBLE_DEVICES``, and NVML then numbers what it sees from 0 in PCI order. ``select`` does the
same, so ``nvidia-smi`` in a pod shows exactly the devices the kubelet gave it, numbered as a real
container would number them. ``visible_devices`` picks the list: ``FAKEGPU_VISIBLE_DEVICES`` (set by
fakegpu with the mounts) before ``NVIDIA_VISIBLE_DEVICES``; with neither, a container sees nothing and the
host CLI everything.

A GPU the container sees only through some of its MIG devices is shown as a MIG-enabled GPU whose memory
it may not read (``VisibleGpu.whole`` False), as NVML answers in such a container. With the DRA driver's
dynamic MIG, a GPU the driver offers MIG profiles on (``PhysicalGpu.dynamic_mig_capable``: not an Ampere GPU
with MIG mode off) also carries ``mig_options``: every MIG device the driver may create on it (every profile
at every placement, with the UUID the driver hands out), shown only when named.

``SmiNode`` is complete on its own (every number nvidia-smi prints is in it), so the JSON form
(``devices.json``) renders identically without the catalog: ``fakegpu nvidia-smi --devices-file`` and
the injected shell script both work from it.
"""

from __future__ import annotations

import dataclasses
import re
import uuid as uuid_module
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from fakegpu.sharing.catalog import GpuModel, MigProfile
from fakegpu.sharing.gpu_condition import HEALTHY_CONDITION, GpuCondition
from fakegpu.sharing.gpu_policies import DEFAULT_MODE, TABLE_ABBREVIATIONS, GpuPolicies
from fakegpu.sharing.identifiers import mig_uuid
from fakegpu.sharing.inventory import Inventory
from fakegpu.sharing.mig_geometry import Placement
from fakegpu.sharing.node import MigInstance, Node, PhysicalGpu, gi_id
from fakegpu.telemetry.idle_reading import idle_reading
from fakegpu.telemetry.nvidia_smi import gpu_health
from fakegpu.telemetry.nvidia_smi.gpu_health import SmiHealth
from fakegpu.telemetry.nvidia_smi.injection import NVIDIA_VISIBLE_DEVICES_ENV, VISIBLE_DEVICES_ENV
from fakegpu.telemetry.nvidia_smi.nvlinks import links_per_peer

JSON_KIND: Final = "fakegpu.io/nvidia-smi-devices"
JSON_VERSION: Final = 2
"""Version 2 added each GPU's ``health`` (fault readings); version 1 files still read, as healthy GPUs."""
READ_VERSIONS: Final = (1, JSON_VERSION)
VOLUME_MOUNTS_ROOT: Final = "/var/run/nvidia-container-devices"
"""NVIDIA's ``volume-mounts`` strategy: ``NVIDIA_VISIBLE_DEVICES`` names this directory and the device IDs
are the names of the files mounted in it."""
NO_DEVICES: Final = frozenset({"", "none", "void"})
_BLANKS: Final = " \t\n\r"
"""Trimmed around the list and each ID (the runtime trims white space; the awk ``trim`` strips the same)."""
_BUS_ID: Final = re.compile(r"[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
_DIGITS: Final = re.compile(r"[0-9]+")
_PAIR: Final = re.compile(r"([0-9]+):([0-9]+)")


@dataclass(frozen=True)
class SmiMig:
    index: int
    """The MIG device's index on its GPU on the node (NVIDIA's ``<gpu>:<mig>`` form); for a dynamic MIG
    option, a number after the instances' that only keeps it apart (options have no index form)."""
    uuid: str
    profile: str
    gi_id: int
    ci_id: int
    start: int
    memory_mib: int
    used_mib: int
    bar1_mib: int
    multiprocessors: int
    copy_engines: int
    encoders: int
    decoders: int
    ofa: int
    jpeg: int


@dataclass(frozen=True)
class SmiMigProfile:
    """A GPU-instance profile as ``nvidia-smi mig -lgip`` lists it, with the geometry that decides how many
    more instances of it fit (``placements``, in memory slices)."""

    name: str
    profile_id: int
    """``nvidia-smi``'s ID column (NVML ``profileInfo.Id``)."""
    nvml_index: int
    """NVML's ``NVML_GPU_INSTANCE_PROFILE_*`` constant: ``-lgi`` and ``-lci`` list instances in its order."""
    instances: int
    memory_mib: int
    memory_slices: int
    compute_slices: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg: int
    ofa: int
    placements: tuple[int, ...]


@dataclass(frozen=True)
class SmiGpu:
    index: int
    """The GPU's index on the node (its minor number)."""
    uuid: str
    name: str
    brand: str
    architecture: str
    serial: str
    bus_id: str
    """nvidia-smi's form: ``00000000:18:00.0`` (8-digit domain, upper-case hex)."""
    pci_device_id: str
    compute_cap: str
    memory_mib: int
    reserved_mib: int
    used_mib: int
    bar1_mib: int
    mig_capable: bool
    mig_enabled: bool
    power_draw_w: float
    power_limit_w: int
    power_min_w: int
    temperature_c: int
    pstate: str
    fan: str
    pcie_gen: int
    pcie_width: int
    migs: tuple[SmiMig, ...]
    mig_options: tuple[SmiMig, ...] = ()
    """Dynamic MIG: the devices the DRA driver may create here and not yet in ``migs``; named by UUID only."""
    mig_profiles: tuple[SmiMigProfile, ...] = ()
    """The board's GPU-instance profiles in catalog order (``-lgip``); empty when it is not MIG-capable."""
    numa: int | None = None
    """The NUMA node the GPU hangs off (``topo -m``'s NUMA Affinity); None when the node spec has none."""
    nvlink_peers: tuple[int, ...] = ()
    """Node indices of the GPUs this one has NVLinks to."""
    nvlink_links: int = 0
    """NVLinks bonded to each peer (``NV18``: 18)."""
    compute_mode: str = DEFAULT_MODE
    """nvidia-smi's spelling (``Default``, ``Exclusive_Process``): the DRA driver's MPS claims change it
    (``fakegpu.sharing.gpu_policies``)."""
    health: SmiHealth = gpu_health.HEALTHY
    """What its faults show (ECC, remapped rows, clocks, fabric, lost); ``temperature_c`` and
    ``power_draw_w`` already carry a thermal or power fault's reading."""

    @property
    def free_mib(self) -> int:
        return self.memory_mib - self.reserved_mib - self.used_mib


@dataclass(frozen=True)
class SmiNode:
    name: str
    driver_version: str
    cuda_version: str
    gpus: tuple[SmiGpu, ...]


@dataclass(frozen=True)
class VisibleGpu:
    """A GPU as a container sees it: NVML's index in the container and the MIG devices it may use."""

    index: int
    gpu: SmiGpu
    migs: tuple[SmiMig, ...]
    whole: bool = True
    """False when only some of its MIG devices were given: MIG mode shows Enabled and memory is hidden."""


@dataclass(frozen=True)
class View:
    gpus: tuple[VisibleGpu, ...]


# --- building from the inventory ---------------------------------------------------------------------


def smi_bus_id(bus_id: str) -> str:
    """``0000:18:00.0`` (sysfs form) -> ``00000000:18:00.0`` (what nvidia-smi and NVML print)."""
    domain, rest = bus_id.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def _serial(gpu_uuid: str) -> str:
    """A 13-digit board serial that is stable per GPU, like the UUID it derives from."""
    return f"{uuid_module.UUID(gpu_uuid.removeprefix('GPU-')).int % 10**13:013d}"


def _brand(model: GpuModel) -> str:
    return "NVIDIA" if model.brand.lower() == "nvidia" else model.brand


def _mig_used_mib(profile: MigProfile) -> int:
    """An idle MIG device still shows a few MiB in use (about 12.5 MiB per compute slice on A100/H100)."""
    return 25 * profile.compute_slices // 2


def _mig(model: GpuModel, bar1_mib: int, instance: MigInstance) -> SmiMig:
    profile = instance.profile
    return SmiMig(
        index=instance.index,
        uuid=instance.uuid,
        profile=profile.name,
        gi_id=instance.gi_id,
        ci_id=instance.ci_id,
        start=instance.start,
        memory_mib=profile.memory_mib,
        used_mib=_mig_used_mib(profile),
        bar1_mib=bar1_mib * profile.memory_slices // max(model.memory_slices, 1) - 1,
        multiprocessors=profile.multiprocessors,
        copy_engines=profile.copy_engines,
        encoders=profile.encoders,
        decoders=profile.decoders,
        ofa=profile.ofa,
        jpeg=profile.jpeg,
    )


def _options(node_name: str, gpu: PhysicalGpu, bar1_mib: int, migs: tuple[SmiMig, ...]) -> tuple[SmiMig, ...]:
    """Every (profile, placement) the dynamic-MIG DRA driver publishes for this GPU, with the UUID its
    prepare hands out (``fakegpu.sharing.identifiers.mig_uuid`` of the node name), in GPU-instance ID order."""
    model = gpu.model
    taken = {m.uuid for m in migs}
    placements = sorted(
        (gi_id(model, Placement(start, profile)), profile.name, start, profile)
        for profile in model.mig_profiles
        for start in profile.placements
    )
    out: list[SmiMig] = []
    for gi, _, start, profile in placements:
        uuid = mig_uuid(node_name, gpu.index, profile.name, start)
        if uuid in taken:
            continue
        instance = MigInstance(uuid, profile, start, gi, 0, len(migs) + len(out), gpu.index)
        out.append(_mig(model, bar1_mib, instance))
    return tuple(out)


_NVML_GI_PROFILES: Final = (
    "1_SLICE",
    "2_SLICE",
    "3_SLICE",
    "4_SLICE",
    "7_SLICE",
    "8_SLICE",
    "6_SLICE",
    "1_SLICE_REV1",
    "2_SLICE_REV1",
    "1_SLICE_REV2",
    "1_SLICE_GFX",
    "2_SLICE_GFX",
    "4_SLICE_GFX",
    "1_SLICE_NO_ME",
    "2_SLICE_NO_ME",
    "1_SLICE_ALL_ME",
    "2_SLICE_ALL_ME",
    "3_SLICE_GFX",
)
"""NVML's GPU-instance profile constants in value order (``go-nvml pkg/nvml/const.go``: 0 to 17)."""


def _profile(model: GpuModel, p: MigProfile) -> SmiMigProfile:
    return SmiMigProfile(
        name=p.name,
        profile_id=model.profile_id(p),
        nvml_index=_NVML_GI_PROFILES.index(p.gi_profile),
        instances=p.max_instances,
        memory_mib=p.memory_mib,
        memory_slices=p.memory_slices,
        compute_slices=p.compute_slices,
        multiprocessors=p.multiprocessors,
        copy_engines=p.copy_engines,
        decoders=p.decoders,
        encoders=p.encoders,
        jpeg=p.jpeg,
        ofa=p.ofa,
        placements=p.placements,
    )


def _gpu(gpu: PhysicalGpu, node: Node, dynamic_mig: bool, condition: GpuCondition) -> SmiGpu:
    model = gpu.model
    facts = model.facts
    idle = idle_reading(model, gpu.index)
    power = idle.power_w if condition.power_draw_w is None else round(condition.power_draw_w, 2)
    temperature = idle.temperature_c if condition.temperature_c is None else condition.temperature_c
    migs = tuple(_mig(model, facts.bar1_mib, m) for m in (gpu.mig_devices if gpu.mig_enabled else ()))
    options = _options(node.name, gpu, facts.bar1_mib, migs) if dynamic_mig and gpu.dynamic_mig_capable else ()
    peers = tuple(g.index for g in node.gpus if g.index != gpu.index and node.nvlinked(gpu.index, g.index))
    major, minor = model.compute_capability
    return SmiGpu(
        index=gpu.index,
        uuid=gpu.uuid,
        name=model.product_name,
        brand=_brand(model),
        architecture=model.architecture,
        serial=_serial(gpu.uuid),
        bus_id=smi_bus_id(gpu.pci_bus_id),
        pci_device_id=model.pci_device_id_hex,
        compute_cap=f"{major}.{minor}",
        memory_mib=model.memory_mib,
        reserved_mib=facts.reserved_mib,
        used_mib=sum(m.used_mib for m in migs),
        bar1_mib=facts.bar1_mib,
        mig_capable=model.mig_capable,
        mig_enabled=gpu.mig_enabled,
        power_draw_w=power,
        power_limit_w=facts.power_limit_w,
        power_min_w=facts.power_min_w,
        temperature_c=temperature,
        pstate=facts.idle_pstate,
        fan=facts.fan,
        pcie_gen=facts.pcie_gen,
        pcie_width=facts.pcie_width,
        migs=migs,
        mig_options=options,
        mig_profiles=tuple(_profile(model, p) for p in model.mig_profiles),
        numa=gpu.numa,
        nvlink_peers=peers,
        nvlink_links=links_per_peer(model.key) if peers else 0,
        health=gpu_health.health(model, condition, node.fabric),
    )


def from_node(
    node: Node, *, dynamic_mig: bool = False, conditions: Mapping[str, GpuCondition] | None = None
) -> SmiNode:
    """The node as nvidia-smi shows it; ``dynamic_mig`` adds the DRA driver's dynamic MIG devices, ``conditions``
    (``LiveInventory.conditions()``, by GPU UUID) what faults left on its GPUs."""
    found = conditions or {}
    return SmiNode(
        name=node.name,
        driver_version=node.driver_version,
        cuda_version=node.cuda_driver_version,
        gpus=tuple(_gpu(g, node, dynamic_mig, found.get(g.uuid, HEALTHY_CONDITION)) for g in node.gpus),
    )


def from_inventory(
    inventory: Inventory,
    *,
    dynamic_mig: bool = False,
    policies: GpuPolicies | None = None,
    conditions: Mapping[str, GpuCondition] | None = None,
) -> SmiNode:
    """The inventory's node; with ``policies``, each GPU in the compute mode the driver has set it to; with
    ``conditions``, its GPUs' faults."""
    node = from_node(inventory.node, dynamic_mig=dynamic_mig, conditions=conditions)
    if policies is None:
        return node
    gpus = tuple(dataclasses.replace(g, compute_mode=policies.compute_mode(g.uuid)) for g in node.gpus)
    return dataclasses.replace(node, gpus=gpus)


# --- JSON (devices.json) -------------------------------------------------------------------------------

_MIG_KEYS: Final = (
    ("index", "index", int),
    ("uuid", "uuid", str),
    ("profile", "profile", str),
    ("gi_id", "giId", int),
    ("ci_id", "ciId", int),
    ("start", "start", int),
    ("memory_mib", "memoryMiB", int),
    ("used_mib", "usedMiB", int),
    ("bar1_mib", "bar1MiB", int),
    ("multiprocessors", "multiprocessors", int),
    ("copy_engines", "copyEngines", int),
    ("encoders", "encoders", int),
    ("decoders", "decoders", int),
    ("ofa", "ofa", int),
    ("jpeg", "jpeg", int),
)
_GPU_KEYS: Final = (
    ("index", "index", int),
    ("uuid", "uuid", str),
    ("name", "name", str),
    ("brand", "brand", str),
    ("architecture", "architecture", str),
    ("serial", "serial", str),
    ("bus_id", "busId", str),
    ("pci_device_id", "pciDeviceId", str),
    ("compute_cap", "computeCap", str),
    ("memory_mib", "memoryMiB", int),
    ("reserved_mib", "reservedMiB", int),
    ("used_mib", "usedMiB", int),
    ("bar1_mib", "bar1MiB", int),
    ("mig_capable", "migCapable", bool),
    ("mig_enabled", "migEnabled", bool),
    ("power_draw_w", "powerDrawW", float),
    ("power_limit_w", "powerLimitW", int),
    ("power_min_w", "powerMinW", int),
    ("temperature_c", "temperatureC", int),
    ("pstate", "pstate", str),
    ("fan", "fan", str),
    ("pcie_gen", "pcieGen", int),
    ("pcie_width", "pcieWidth", int),
)


_PROFILE_KEYS: Final = (
    ("name", "name", str),
    ("profile_id", "id", int),
    ("nvml_index", "nvmlIndex", int),
    ("instances", "instances", int),
    ("memory_mib", "memoryMiB", int),
    ("memory_slices", "memorySlices", int),
    ("compute_slices", "computeSlices", int),
    ("multiprocessors", "multiprocessors", int),
    ("copy_engines", "copyEngines", int),
    ("decoders", "decoders", int),
    ("encoders", "encoders", int),
    ("jpeg", "jpeg", int),
    ("ofa", "ofa", int),
)


def _mig_json(m: SmiMig) -> dict[str, Any]:
    return {key: getattr(m, attr) for attr, key, _ in _MIG_KEYS}


def _profile_json(p: SmiMigProfile) -> dict[str, Any]:
    return {**{key: getattr(p, attr) for attr, key, _ in _PROFILE_KEYS}, "placements": list(p.placements)}


def to_json(node: SmiNode) -> dict[str, Any]:
    """The devices.json document: camelCase keys, GPUs and MIG devices in node order (``migOptions``
    only where there are dynamic MIG options)."""
    gpus: list[dict[str, Any]] = []
    for g in node.gpus:
        doc = {**{key: getattr(g, attr) for attr, key, _ in _GPU_KEYS}, "migDevices": [_mig_json(m) for m in g.migs]}
        if g.mig_options:
            doc["migOptions"] = [_mig_json(m) for m in g.mig_options]
        if g.mig_profiles:
            doc["migProfiles"] = [_profile_json(p) for p in g.mig_profiles]
        doc |= {"numaNode": g.numa, "nvlinkPeers": list(g.nvlink_peers), "nvlinkLinks": g.nvlink_links}
        doc["computeMode"] = g.compute_mode
        doc["health"] = gpu_health.to_json(g.health)
        gpus.append(doc)
    return {
        "kind": JSON_KIND,
        "version": JSON_VERSION,
        "node": node.name,
        "driverVersion": node.driver_version,
        "cudaVersion": node.cuda_version,
        "gpus": gpus,
    }


def _field(obj: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in obj:
        raise ValueError(f"{where}: missing field {key!r}")
    value = obj[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{where}.{key}: expected {kind.__name__}, found {value!r}")
    if isinstance(value, str) and _CONTROL.search(value):
        raise ValueError(f"{where}.{key}: control characters are not allowed, found {value!r}")
    return value


def _migs(raw: Any, where: str) -> tuple[SmiMig, ...]:
    out = []
    for j, m in enumerate(_list(raw, where)):
        entry = _mapping(m, f"{where}[{j}]")
        out.append(SmiMig(**{attr: _field(entry, key, kind, f"{where}[{j}]") for attr, key, kind in _MIG_KEYS}))
    return tuple(out)


def _ints(raw: Any, where: str) -> tuple[int, ...]:
    values = _list(raw, where)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{where}: expected a list of integers, found {values!r}")
    return tuple(values)


def _profiles(raw: Any, where: str) -> tuple[SmiMigProfile, ...]:
    out = []
    for j, p in enumerate(_list(raw, where)):
        entry = _mapping(p, f"{where}[{j}]")
        fields = {attr: _field(entry, key, kind, f"{where}[{j}]") for attr, key, kind in _PROFILE_KEYS}
        out.append(SmiMigProfile(**fields, placements=_ints(entry.get("placements"), f"{where}[{j}].placements")))
    return tuple(out)


def _topology(g: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``numaNode``, ``nvlinkPeers``, ``nvlinkLinks`` and ``computeMode``, optional: a devices.json written
    before ``topo -m`` existed renders without NUMA node and NVLinks, one written before compute modes in
    ``Default``."""
    numa = g.get("numaNode")
    if numa is not None and (not isinstance(numa, int) or isinstance(numa, bool)):
        raise ValueError(f"{where}.numaNode: expected an integer or null, found {numa!r}")
    links = g.get("nvlinkLinks", 0)
    if not isinstance(links, int) or isinstance(links, bool):
        raise ValueError(f"{where}.nvlinkLinks: expected int, found {links!r}")
    mode = g.get("computeMode", DEFAULT_MODE)
    if mode not in TABLE_ABBREVIATIONS:
        raise ValueError(f"{where}.computeMode: expected one of {', '.join(TABLE_ABBREVIATIONS)}, found {mode!r}")
    return {
        "numa": numa,
        "nvlink_peers": _ints(g.get("nvlinkPeers", []), f"{where}.nvlinkPeers"),
        "nvlink_links": links,
        "compute_mode": mode,
    }


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list")
    return value


def from_json(data: Any, source: str = "devices.json") -> SmiNode:
    """Parse a devices.json document; ``ValueError`` names the field that is wrong."""
    doc = _mapping(data, source)
    if doc.get("kind") != JSON_KIND or doc.get("version") not in READ_VERSIONS:
        raise ValueError(f"{source}: expected kind {JSON_KIND!r} version {JSON_VERSION}")
    gpus = []
    for i, raw in enumerate(_list(doc.get("gpus"), f"{source}.gpus")):
        where = f"{source}.gpus[{i}]"
        g = _mapping(raw, where)
        fields = {attr: _field(g, key, kind, where) for attr, key, kind in _GPU_KEYS}
        if not _BUS_ID.fullmatch(fields["bus_id"]):
            raise ValueError(f"{where}.busId: expected nvidia-smi's form 00000000:18:00.0, found {fields['bus_id']!r}")
        migs = _migs(g.get("migDevices"), f"{where}.migDevices")
        options = _migs(g.get("migOptions", []), f"{where}.migOptions")
        indices = [m.index for m in (*migs, *options)]
        if len(set(indices)) != len(indices):
            raise ValueError(f"{where}: MIG device indices must be unique, found {indices}")
        profiles = _profiles(g.get("migProfiles", []), f"{where}.migProfiles")
        health = gpu_health.from_json(g.get("health"), f"{where}.health")
        gpus.append(
            SmiGpu(
                **fields,
                migs=migs,
                mig_options=options,
                mig_profiles=profiles,
                health=health,
                **_topology(g, where),
            )
        )
    return SmiNode(
        name=_field(doc, "node", str, source),
        driver_version=_field(doc, "driverVersion", str, source),
        cuda_version=_field(doc, "cudaVersion", str, source),
        gpus=tuple(gpus),
    )


# --- the visible devices --------------------------------------------------------------------------------


def expand_volume_mounts(
    visible: str | None, listdir: Callable[[str], Iterable[str]], root: str = VOLUME_MOUNTS_ROOT
) -> str | None:
    """``volume-mounts`` strategy: the value names a directory whose file names are the device IDs (hidden
    files aside); nvidia-container-runtime compares the value with the directory exactly."""
    if visible != root:
        return visible
    try:
        names = sorted(n for n in listdir(root) if not n.startswith("."))
    except OSError:
        names = []
    return ",".join(names)


def visible_devices(
    env: Mapping[str, str],
    listdir: Callable[[str], Iterable[str]],
    *,
    unset: str | None,
    root: str = VOLUME_MOUNTS_ROOT,
) -> str | None:
    """The device list for ``select``: ``FAKEGPU_VISIBLE_DEVICES`` if set, else ``NVIDIA_VISIBLE_DEVICES``
    (its ``volume-mounts`` directory listed), else ``unset``: ``""`` (nothing) for the script in a
    container, which is what runc without the NVIDIA hook gives, and None (everything) for the host CLI."""
    if VISIBLE_DEVICES_ENV in env:
        return env[VISIBLE_DEVICES_ENV]
    if NVIDIA_VISIBLE_DEVICES_ENV in env:
        return expand_volume_mounts(env[NVIDIA_VISIBLE_DEVICES_ENV], listdir, root)
    return unset


def select(node: SmiNode, visible: str | None) -> View:
    """The devices a container given this device list sees, renumbered as NVML does.

    None or ``all``: everything. ``none``, ``void`` or empty: nothing. Otherwise a comma list of GPU
    indices, GPU UUIDs, MIG UUIDs or ``<gpu>:<mig>`` pairs; replica IDs (``GPU-...::3``) name their
    device; IDs of no device are ignored. A whole GPU in MIG mode brings all its MIG devices (not its
    dynamic options, which only their UUID names). The container sees GPUs in PCI (node) order
    whatever the order of the list, and a GPU's instances before its options.
    """
    whole: set[int] = set()
    parts: set[tuple[int, int]] = set()
    value = None if visible is None else visible.strip(_BLANKS)
    by_index = {g.index: g for g in node.gpus}
    if value is None or value == "all":
        whole = set(by_index)
    elif value not in NO_DEVICES:
        for raw in value.split(","):
            token = raw.strip(_BLANKS).split("::", 1)[0]
            pair = _PAIR.fullmatch(token)
            for g in node.gpus:
                if token == g.uuid or (_DIGITS.fullmatch(token) and int(token) == g.index):
                    whole.add(g.index)
                for m in g.migs:
                    if token == m.uuid or (pair and int(pair[1]) == g.index and int(pair[2]) == m.index):
                        parts.add((g.index, m.index))
                for m in g.mig_options:
                    if token == m.uuid:
                        parts.add((g.index, m.index))
    visible_gpus: list[VisibleGpu] = []
    for g in node.gpus:
        if g.index in whole:
            visible_gpus.append(VisibleGpu(len(visible_gpus), g, g.migs if g.mig_enabled else ()))
            continue
        migs = tuple(m for m in (*g.migs, *g.mig_options) if (g.index, m.index) in parts)
        if migs:
            visible_gpus.append(VisibleGpu(len(visible_gpus), g, migs, whole=False))
    return View(tuple(visible_gpus))


def filter_ids(view: View, ids: str) -> tuple[VisibleGpu, ...]:
    """``nvidia-smi -i``: GPUs by container index, UUID or PCI bus ID (8- or 4-digit domain), keeping
    their indices; IDs of no GPU are ignored."""
    wanted = ids.split(",")
    out = []
    for v in view.gpus:
        bus = v.gpu.bus_id.upper()
        for raw in wanted:
            token = raw.strip(_BLANKS)
            upper = token.upper()
            if (
                (_DIGITS.fullmatch(token) and int(token) == v.index)
                or upper == v.gpu.uuid.upper()
                or upper in (bus, bus[4:])
            ):
                out.append(v)
                break
    return tuple(out)
