"""ResourceSlices for a fake node, shaped like the ones NVIDIA's gpu-kubelet-plugin publishes.

Pure functions: a resolved :class:`~fakegpu.sharing.node.Node` in, plain dicts ready to serialise out. The
names, attributes, capacities and counters follow NVIDIA's driver (``deviceinfo.go``, ``mig.go``,
``partitions.go``, ``driver.go``) so that real claims, CEL selectors and DeviceClasses written for
NVIDIA's driver select the fake devices unchanged. The API's size limits are enforced here, because
the JSON schemas do not carry them and the API server rejects the whole slice when one is exceeded.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fakegpu.dra.consumable_shares import OFF, ConsumableShares, advertised
from fakegpu.dra.device_attributes import (
    NUMA_NODE_ATTRIBUTE,
    Attribute,
    fabric_manager_attributes,
    numa_node_attribute,
)
from fakegpu.dra.feature_gates import NVML_DEVICE_HEALTH_CHECK, FeatureGates
from fakegpu.dra.health_taints import DeviceTaints
from fakegpu.kube.discovery import SUPPORTED_API_VERSIONS
from fakegpu.sharing.catalog import GpuModel, MigProfile
from fakegpu.sharing.label_syntax import DNS1123_LABEL, DNS1123_SUBDOMAIN
from fakegpu.sharing.node import Node, PhysicalGpu
from fakegpu.sharing.quantities import count_or_quantity, mebibytes

MigMode = Literal["static", "dynamic"]

API_GROUP = "resource.k8s.io"

# Limits from k8s.io/api resource/v1 types.go (the OpenAPI schemas do not express them).
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_WITH_COUNTERS_OR_TAINTS = 64
MAX_COUNTER_SETS_PER_SLICE = 8
MAX_COUNTERS_PER_SET = 32
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_SHARED_COUNTERS_PER_SLICE_1_34 = 32
"""1.34 only: counters across all counter sets of one slice."""
MAX_CONSUMED_COUNTERS_PER_SLICE_1_34 = 1024
"""1.34 only: counters consumed across all devices of one slice."""
DNS_LABEL_MAX = 63
GENERATED_NAME_BASE_MAX = 58
"""The API server cuts generateName to 63 - 5 characters before appending its random suffix."""

PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"
PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
FIRST_MINOR_WITH_TAINTS = 36
"""DRADeviceTaints is beta (on by default) from 1.36; earlier servers drop the field."""
FIRST_MINOR_WITH_SPLIT_SLICES = 35
"""From 1.35 a slice holds either sharedCounters or devices, never both."""
FIRST_MINOR_WITH_INDEXED_NAMES = 36
"""From 1.36 the kubelet helper prefixes slice names with their hex index within the pool."""

_NOT_RFC1123 = re.compile(r"[^a-z0-9.-]")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

Device = dict[str, Any]
Attributes = dict[str, Attribute]
Spec = dict[str, Any]


def check_driver_name(driver: str) -> None:
    """Driver names are lower-case DNS subdomains of at most 63 characters; they also end up quoted in
    CEL expressions and in object names, so anything else is refused early."""
    if len(driver) > DNS_LABEL_MAX or not DNS1123_SUBDOMAIN.fullmatch(driver):
        raise ValueError(f"driver name {driver!r} must be a lower-case DNS subdomain of at most 63 characters")


@dataclass(frozen=True)
class SliceOptions:
    """How to publish: driver name, MIG mode and the API server the slices are meant for."""

    driver: str = "gpu.nvidia.com"
    mig_mode: MigMode = "static"
    server_minor: int = 36
    """Kubernetes 1.<minor> of the API server (see ``fakegpu.kube.discovery``); minors past the last
    FIRST_MINOR_WITH_* behave like it."""
    api_version: str = "resource.k8s.io/v1"
    shares: ConsumableShares = OFF
    """NVIDIA's ``--consumable-shares`` (``fakegpu.dra.consumable_shares``): every device allows several
    allocations, with request policies on its capacity, from Kubernetes 1.34."""
    feature_gates: FeatureGates = field(default_factory=FeatureGates)
    """NVIDIA's driver gates: ``DRAListTypeAttributes`` and ``FabricManagerPartitioning`` change attributes
    (``fakegpu.dra.device_attributes``), ``NVMLDeviceHealthCheck`` publishes health taints; DynamicMIG is
    ``mig_mode``."""

    def __post_init__(self) -> None:
        check_driver_name(self.driver)
        if self.mig_mode not in ("static", "dynamic"):
            raise ValueError(f"mig_mode must be 'static' or 'dynamic', got {self.mig_mode!r}")
        served = SUPPORTED_API_VERSIONS.get(self.api_version)
        if served is None:
            raise ValueError(
                f"unsupported API version {self.api_version!r}; expected one of {', '.join(SUPPORTED_API_VERSIONS)}"
            )
        first, last = served
        if not first <= self.server_minor <= last:
            raise ValueError(f"{self.api_version} is not served by Kubernetes 1.{self.server_minor}")

    @property
    def health_taints(self) -> bool:
        """NVIDIA's ``NVMLDeviceHealthCheck`` gate: publish the devices' health taints (off: none, as NVIDIA)."""
        return self.feature_gates.enabled(NVML_DEVICE_HEALTH_CHECK)

    @property
    def taints_supported(self) -> bool:
        return self.server_minor >= FIRST_MINOR_WITH_TAINTS

    @property
    def split_slices(self) -> bool:
        return self.server_minor >= FIRST_MINOR_WITH_SPLIT_SLICES


# ---------------------------------------------------------------------------------------------
# Names


def device_name_gpu(gpu: PhysicalGpu) -> str:
    """NVIDIA's canonical full-GPU name ``gpu-<minor>``."""
    return f"gpu-{gpu.minor}"


def _rfc1123(name: str) -> str:
    """NVIDIA's ``toRFC1123Compliant``: lower case, every character other than ``[a-z0-9.-]`` becomes
    ``-``, then leading and trailing ``-`` and a trailing ``.`` go."""
    return _NOT_RFC1123.sub("-", name.lower()).strip("-").removesuffix(".")


def device_name_mig(gpu: PhysicalGpu, profile: MigProfile, start: int) -> str:
    """NVIDIA's canonical MIG name ``gpu-<minor>-mig-<profile>-<GI profile ID>-<start>``, where the
    profile loses its dots and any other character a DNS label cannot hold becomes ``-``
    (``1g.5gb+me`` -> ``1g5gb-me``), as ``MigSpecTuple.ToCanonicalName`` does.

    Placement is part of the name, so every (profile, start) pair is a distinct, stable device."""
    compact = _rfc1123(profile.name.replace(".", ""))
    name = f"gpu-{gpu.minor}-mig-{compact}-{gpu.model.profile_id(profile)}-{start}"
    if len(name) > DNS_LABEL_MAX or not DNS1123_LABEL.fullmatch(name):
        raise ValueError(f"MIG device name {name!r} is not a DNS label of at most 63 characters")
    return name


def counter_set_name(gpu: PhysicalGpu) -> str:
    """The one CounterSet per physical GPU that its full device and its MIG devices draw from."""
    return f"gpu-{gpu.minor}-counter-set"


@functools.cache
def counter_name(capacity: str) -> str:
    """Counter names are DNS labels, so NVIDIA turns capacity names from camelCase into kebab-case.

    Cached: a few names, asked for once per device of every GPU."""
    return _CAMEL_BOUNDARY.sub("-", capacity).lower()


def memory_slice_counter(index: int) -> str:
    return f"memory-slice-{index}"


@functools.cache
def semver(version: str) -> str:
    """A dotted driver/CUDA version as semver 2.0.0, as NVIDIA publishes it: ``570.172.08`` ->
    ``570.172.8`` (no leading zeros), ``12.8`` -> ``12.8.0``.

    Cached: one or two versions per node, asked for twice per device."""
    parts = version.strip().split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"not a dotted numeric version: {version!r}")
    numbers = [str(int(p)) for p in parts]
    numbers += ["0"] * (3 - len(numbers))
    return ".".join(numbers)


def generate_name(opts: SliceOptions, node_name: str, index: int, count: int) -> str:
    """The ``metadata.generateName`` the kubelet plugin helper of that Kubernetes version uses.

    1.36+: ``<index as hex, at least 5 digits>-<driver>-<node>-`` (the allocator sorts slices by name,
    so the index sets first-fit priority); earlier: ``<node>-<driver>-``. Cut to the 58 characters the
    API server keeps, always ending in ``-`` so the random suffix yields a valid DNS subdomain."""
    if opts.server_minor >= FIRST_MINOR_WITH_INDEXED_NAMES:
        width = max(5, len(f"{max(count - 1, 0):x}"))
        base = f"{index:0{width}x}-{opts.driver}-{node_name}-"
    else:
        base = f"{node_name}-{opts.driver}-"
    if len(base) > GENERATED_NAME_BASE_MAX:
        base = base[: GENERATED_NAME_BASE_MAX - 1].rstrip(".-") + "-"
    return base


# ---------------------------------------------------------------------------------------------
# Devices (built in the flat v1 shape; converted for v1beta1 at the end)


def pcie_root(pci_bus_id: str) -> str:
    """The PCIe root complex ``pci<domain>:<bus>`` a GPU hangs off, as ``deviceattribute`` reads it from the
    first path component under ``/sys/devices``. A fake node has no sysfs: each GPU gets the root whose bus is
    its own bus with the low nibble cleared (one root per GPU for the first 15 GPUs, as on HGX boards where
    every GPU sits on its own root complex together with its NIC)."""
    domain, bus, _ = pci_bus_id.split(":", 2)
    return f"pci{domain}:{int(bus, 16) & 0xF0:02x}"


def _attributes(gpu: PhysicalGpu, node: Node, kind: str, gates: FeatureGates) -> Attributes:
    """What NVIDIA's ``GpuInfo.Attributes`` / ``CommonAttributesMig`` publish for every device of ``gpu``,
    with the standard ``resource.kubernetes.io`` PCI and NUMA attributes (``numaNode`` only where the
    node spec gives the GPU a NUMA node, as NVIDIA leaves it out without NUMA affinity; its form follows
    the gates, ``fakegpu.dra.device_attributes``)."""
    model = gpu.model
    major, minor = model.compute_capability
    attributes: Attributes = {
        "type": {"string": kind},
        "productName": {"string": model.product_name},
        "brand": {"string": model.brand},
        "architecture": {"string": model.architecture},
        "cudaComputeCapability": {"version": f"{major}.{minor}.0"},
        "driverVersion": {"version": semver(node.driver_version)},
        "cudaDriverVersion": {"version": semver(node.cuda_driver_version)},
        PCI_BUS_ID_ATTRIBUTE: {"string": gpu.pci_bus_id},
        PCIE_ROOT_ATTRIBUTE: {"string": pcie_root(gpu.pci_bus_id)},
    }
    numa = numa_node_attribute(gpu.numa, gates)
    if numa is not None:
        attributes[NUMA_NODE_ATTRIBUTE] = numa
    return attributes


def _mig_capacities(profile: MigProfile) -> dict[str, int | str]:
    """A MIG profile's capacities; ints are counts, strings are already quantities."""
    return {
        "multiprocessors": profile.multiprocessors,
        "copyEngines": profile.copy_engines,
        "decoders": profile.decoders,
        "encoders": profile.encoders,
        "jpegEngines": profile.jpeg,
        "ofaEngines": profile.ofa,
        "memory": mebibytes(profile.memory_mib),
    }


def _gpu_capacities(model: GpuModel) -> dict[str, int | str]:
    """What a whole MIG-capable GPU holds in each MIG dimension with dynamic MIG: NVIDIA's
    ``maxCapacities``, the most of each dimension any MIG profile has (``nvlib.go`` walks the profiles,
    ``partitions.go`` publishes them as the full GPU's capacity and its counter set). So the SMs and memory
    are the full-size profile's (A100 40GB: 98 SMs, 40192Mi), not the board's 108 SMs and 40960Mi."""
    profiles = model.mig_profiles
    return {
        "multiprocessors": max(p.multiprocessors for p in profiles),
        "copyEngines": max(p.copy_engines for p in profiles),
        "decoders": max(p.decoders for p in profiles),
        "encoders": max(p.encoders for p in profiles),
        "jpegEngines": max(p.jpeg for p in profiles),
        "ofaEngines": max(p.ofa for p in profiles),
        "memory": mebibytes(max(p.memory_mib for p in profiles)),
    }


def _capacity_map(values: Mapping[str, int | str]) -> dict[str, dict[str, str]]:
    return {name: {"value": count_or_quantity(values[name])} for name in sorted(values)}


def _counters(values: Mapping[str, int | str], slots: range) -> dict[str, dict[str, str]]:
    counters = {counter_name(name): count_or_quantity(v) for name, v in values.items()}
    counters.update({memory_slice_counter(i): "1" for i in slots})
    return {name: {"value": counters[name]} for name in sorted(counters)}


def _taints(health_key: str, unhealthy: DeviceTaints, opts: SliceOptions) -> list[dict[str, str]]:
    """The device's health taints (``fakegpu.dra.health_taints``) with the health gate on, where the server
    takes taints."""
    if not (opts.health_taints and opts.taints_supported):
        return []
    return [dict(t) for t in unhealthy.get(health_key, ())]


def _device(
    name: str,
    attributes: Mapping[str, Attribute],
    capacity: Mapping[str, int | str],
    *,
    consumes: dict[str, Any] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> Device:
    device: Device = {
        "name": name,
        "attributes": {key: attributes[key] for key in sorted(attributes)},
        "capacity": _capacity_map(capacity),
    }
    if consumes is not None:
        device["consumesCounters"] = [consumes]
    if taints:
        device["taints"] = taints
    if len(device["attributes"]) + len(device["capacity"]) > MAX_ATTRIBUTES_AND_CAPACITIES:
        raise ValueError(f"device {name} has more than {MAX_ATTRIBUTES_AND_CAPACITIES} attributes and capacities")
    return device


def _whole_gpu_attributes(node: Node, gpu: PhysicalGpu, opts: SliceOptions) -> Attributes:
    """A full GPU's attributes: the common ones, its UUID and (only on full GPUs) Fabric Manager's."""
    gates = opts.feature_gates
    fabric = fabric_manager_attributes(node, gpu, gates)
    return {**_attributes(gpu, node, "gpu", gates), "uuid": {"string": gpu.uuid}, **fabric}


def _full_gpu(node: Node, gpu: PhysicalGpu, opts: SliceOptions, unhealthy: DeviceTaints) -> Device:
    attributes = _whole_gpu_attributes(node, gpu, opts)
    return _device(
        device_name_gpu(gpu),
        attributes,
        {"memory": mebibytes(gpu.model.memory_mib)},
        taints=_taints(gpu.uuid, unhealthy, opts),
    )


def _mig_attributes(node: Node, gpu: PhysicalGpu, profile: MigProfile, opts: SliceOptions) -> Attributes:
    return {
        **_attributes(gpu, node, "mig", opts.feature_gates),
        "parentUUID": {"string": gpu.uuid},
        "profile": {"string": profile.name},
    }


def _static_devices(node: Node, gpu: PhysicalGpu, opts: SliceOptions, unhealthy: DeviceTaints) -> list[Device]:
    """Static MIG (mig-parted made the instances): a MIG-enabled GPU offers exactly its instances,
    any other GPU offers itself."""
    if not gpu.mig_enabled:
        return [_full_gpu(node, gpu, opts, unhealthy)]
    devices = []
    for mig in gpu.mig_devices:
        slots = range(mig.start, mig.start + mig.profile.memory_slices)
        capacity: dict[str, int | str] = {**_mig_capacities(mig.profile), **{f"memorySlice{i}": 1 for i in slots}}
        attributes: Attributes = {**_mig_attributes(node, gpu, mig.profile, opts), "uuid": {"string": mig.uuid}}
        devices.append(
            _device(
                device_name_mig(gpu, mig.profile, mig.start),
                attributes,
                capacity,
                taints=_taints(mig.uuid, unhealthy, opts),
            )
        )
    return devices


def whole_gpu_offered_with_dynamic_mig(gpu: PhysicalGpu) -> bool:
    """Hopper and later switch MIG mode without a GPU reset; Ampere does not, so NVIDIA's driver does not
    offer an Ampere GPU whole while MIG mode is on. The preparer uses the same rule."""
    return not gpu.mig_enabled or gpu.model.architecture != "Ampere"


def dynamic_mig_capable(gpu: PhysicalGpu) -> bool:
    """Whether dynamic MIG offers the GPU's MIG profiles (NVIDIA's ``isDynamicMIGCapable``): a MIG-capable GPU
    that can switch MIG mode without a reset, or an Ampere GPU whose MIG mode is already on. An Ampere GPU with
    MIG mode off stays a plain whole GPU, without counters. The rule is ``PhysicalGpu.dynamic_mig_capable``."""
    return gpu.dynamic_mig_capable


def _counter_set(gpu: PhysicalGpu) -> dict[str, Any]:
    model = gpu.model
    counters = _counters(_gpu_capacities(model), range(model.memory_slices))
    if len(counters) > MAX_COUNTERS_PER_SET:
        raise ValueError(f"{counter_set_name(gpu)} would need {len(counters)} counters; at most {MAX_COUNTERS_PER_SET}")
    return {"name": counter_set_name(gpu), "counters": counters}


def _dynamic_devices(node: Node, gpu: PhysicalGpu, opts: SliceOptions, unhealthy: DeviceTaints) -> list[Device]:
    """Dynamic MIG (partitionable devices): the whole GPU plus every profile at every allowed start,
    all drawing on the GPU's counter set, so the scheduler itself enforces MIG placement rules."""
    model = gpu.model
    if not dynamic_mig_capable(gpu):
        return [_full_gpu(node, gpu, opts, unhealthy)]
    devices: list[Device] = []
    if whole_gpu_offered_with_dynamic_mig(gpu):
        whole = _gpu_capacities(model)
        attributes = _whole_gpu_attributes(node, gpu, opts)
        consumes = {"counterSet": counter_set_name(gpu), "counters": _counters(whole, range(model.memory_slices))}
        taints = _taints(gpu.uuid, unhealthy, opts)
        devices.append(_device(device_name_gpu(gpu), attributes, whole, consumes=consumes, taints=taints))
    for profile in model.mig_profiles:
        capacity = _mig_capacities(profile)
        for start in profile.placements:
            slots = range(start, start + profile.memory_slices)
            consumes = {"counterSet": counter_set_name(gpu), "counters": _counters(capacity, slots)}
            devices.append(
                _device(
                    device_name_mig(gpu, profile, start),
                    _mig_attributes(node, gpu, profile, opts),
                    capacity,
                    consumes=consumes,
                    taints=_taints(gpu.uuid, unhealthy, opts),
                )
            )
    return devices


# ---------------------------------------------------------------------------------------------
# Slices


def _chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def _device_limit(devices: Sequence[Device]) -> int:
    advanced = any("taints" in d or "consumesCounters" in d for d in devices)
    return MAX_DEVICES_WITH_COUNTERS_OR_TAINTS if advanced else MAX_DEVICES_PER_SLICE


def _by_name(devices: list[Device]) -> list[Device]:
    return sorted(devices, key=lambda d: str(d["name"]))


def _static_layout(node: Node, opts: SliceOptions, unhealthy: DeviceTaints) -> list[Spec]:
    devices = [d for gpu in node.gpus for d in _by_name(_static_devices(node, gpu, opts, unhealthy))]
    if not devices:
        return [{}]
    return [{"devices": chunk} for chunk in _chunks(devices, _device_limit(devices))]


def _check_combined(spec: Spec, gpu: PhysicalGpu) -> None:
    """1.34 keeps counters and their consumers in one slice, with limits of its own."""
    shared = sum(len(s["counters"]) for s in spec.get("sharedCounters", []))
    consumed = sum(len(c["counters"]) for d in spec.get("devices", []) for c in d.get("consumesCounters", []))
    devices = spec.get("devices", [])
    if shared > MAX_SHARED_COUNTERS_PER_SLICE_1_34 or consumed > MAX_CONSUMED_COUNTERS_PER_SLICE_1_34:
        raise ValueError(f"GPU {gpu.index}: its counters do not fit one Kubernetes 1.34 ResourceSlice")
    if len(devices) > _device_limit(devices):
        raise ValueError(f"GPU {gpu.index}: {len(devices)} devices do not fit one Kubernetes 1.34 ResourceSlice")


def _dynamic_layout(node: Node, opts: SliceOptions, unhealthy: DeviceTaints) -> list[Spec]:
    per_gpu = [(gpu, _by_name(_dynamic_devices(node, gpu, opts, unhealthy))) for gpu in node.gpus]
    counter_sets = [(gpu, _counter_set(gpu)) for gpu in node.gpus if dynamic_mig_capable(gpu)]
    if not opts.split_slices:
        combined: list[Spec] = []
        sets = {gpu.index: s for gpu, s in counter_sets}
        for gpu, devices in per_gpu:
            spec: Spec = {}
            if gpu.index in sets:
                spec["sharedCounters"] = [sets[gpu.index]]
            if devices:
                spec["devices"] = devices
            _check_combined(spec, gpu)
            combined.append(spec)
        return combined
    specs: list[Spec] = [
        {"sharedCounters": chunk} for chunk in _chunks([s for _, s in counter_sets], MAX_COUNTER_SETS_PER_SLICE)
    ]
    for _, devices in per_gpu:
        specs.extend({"devices": chunk} for chunk in _chunks(devices, _device_limit(devices)))
    return specs


def _v1beta1_device(device: Device) -> Device:
    return {"name": device["name"], "basic": {k: v for k, v in device.items() if k != "name"}}


def build_slice_specs(
    node: Node,
    opts: SliceOptions,
    taints: DeviceTaints | None = None,
    generation: int = 1,
) -> list[dict[str, Any]]:
    """Every ResourceSlice ``spec`` of the node's pool, in publishing order.

    ``taints`` maps GPU and MIG UUIDs to their health taints (``fakegpu.dra.health_taints``), published
    with ``opts.health_taints`` (NVIDIA's ``NVMLDeviceHealthCheck`` gate) where the server takes them (1.36+).
    Dynamic MIG devices have no UUID of their own and carry their GPU's. The same inputs always give the
    same output, ordered by GPU index and then device name."""
    if generation < 0:
        raise ValueError(f"pool generation must be >= 0, got {generation}")
    health = taints or {}
    dynamic = opts.mig_mode == "dynamic" and any(dynamic_mig_capable(g) for g in node.gpus)
    layout = _dynamic_layout(node, opts, health) if dynamic else _static_layout(node, opts, health)
    specs: list[dict[str, Any]] = []
    for body in layout:
        spec: dict[str, Any] = {
            "driver": opts.driver,
            "nodeName": node.name,
            "pool": {"name": node.name, "generation": generation, "resourceSliceCount": len(layout)},
        }
        if "sharedCounters" in body:
            spec["sharedCounters"] = body["sharedCounters"]
        if "devices" in body:
            devices = [advertised(d, opts.shares, opts.server_minor) for d in body["devices"]]
            if opts.api_version == "resource.k8s.io/v1beta1":
                devices = [_v1beta1_device(d) for d in devices]
            spec["devices"] = devices
        specs.append(spec)
    return specs


def slice_objects(
    node: Node, opts: SliceOptions, specs: list[dict[str, Any]], node_uid: str | None = None
) -> list[dict[str, Any]]:
    """Whole ResourceSlice objects for ``specs``, named and owned the way the kubelet plugin helper does
    it: ``generateName`` per Kubernetes version and, given the Node's UID, a controller reference to the
    Node so the slices are garbage-collected with it."""
    objects = []
    for index, spec in enumerate(specs):
        metadata: dict[str, Any] = {"generateName": generate_name(opts, node.name, index, len(specs))}
        if node_uid is not None:
            metadata["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node_uid, "controller": True}
            ]
        objects.append({"apiVersion": opts.api_version, "kind": "ResourceSlice", "metadata": metadata, "spec": spec})
    return objects


def spec_devices(spec: Mapping[str, Any]) -> list[Device]:
    """A spec's devices in the flat (v1/v1beta2) shape, whatever version the spec was built for."""
    out = []
    for device in spec.get("devices", []):
        if "basic" in device:
            out.append({"name": device["name"], **device["basic"]})
        else:
            out.append(dict(device))
    return out
