"""What Allocate answers for one container: NVIDIA's ValidateRequest and getAllocateResponse (v0.20.0).

The kubelet stores this response in its checkpoint and turns it into CRI config, so every field is
built in NVIDIA's order and with NVIDIA's names; a workload sees the same envs, mounts, device nodes
and CDI names it would see on a real node.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from collections.abc import Callable, Iterable, Sequence

from fakegpu.fakeplugin.allocation_error import AllocationError
from fakegpu.fakeplugin.imex_channels import imex_channels
from fakegpu.fakeplugin.preferred_allocation import shown_id
from fakegpu.kubeletapi.deviceplugin.v1beta1 import api_pb2
from fakegpu.runtime.cdi_spec_model import qualified_name
from fakegpu.sharing.identifiers import strip_replica
from fakegpu.sharing.inventory import Device, Inventory, Resource
from fakegpu.sharing.node import MigInstance
from fakegpu.sharing.plugin_config import CDI_STRATEGIES, PluginConfig
from fakegpu.telemetry.nvidia_smi.injection import (
    CONTAINER_DEVICES_PATH,
    DEVICES_FILE_ENV,
    VISIBLE_DEVICES_ENV,
    injected_mounts,
)

CDI_VENDOR = "k8s.device-plugin.nvidia.com"
"""The vendor of the plugin's own CDI spec (not ``nvidia.com``, which nvidia-ctk's host spec uses)."""
GPU_CLASS = "gpu"
IMEX_CHANNEL_CLASS = "imex-channel"
ALL_DEVICES = "all"
"""The one device of the gdrcopy, gds and mofed classes (nvcdi's ``ModeGds`` etc. name it so)."""
CDI_PLUGIN_NAME = "nvidia-device-plugin"
VOLUME_MOUNTS_ROOT = "/var/run/nvidia-container-devices"
VOLUME_MOUNTS_HOST_PATH = "/dev/null"
MPS_CONTAINER_ROOT = "/mps"
CONTROL_DEVICE_PATHS = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
"""Optional in NVIDIA: each is passed only if it exists where the plugin runs (``os.Stat`` on the path)."""

# /proc/driver/nvidia-caps/mig-minors numbering: "config" is 1, "monitor" 2, then per GPU (up to 32)
# per GPU instance (up to 15) one "gi access" minor followed by 8 "ci access" minors.
MIG_CAP_FIRST = 3
MIG_CAPS_PER_GI = 9
MIG_GIS_PER_GPU = 15


def _error(resource: Resource, reason: str) -> AllocationError:
    return AllocationError(f'invalid allocation request for "{resource.name}": invalid request: {reason}')


def validate_request(resource: Resource, ids: Sequence[str]) -> None:
    """NVIDIA's ValidateRequest: refuse unknown IDs and, if configured, more than one shared replica.

    The kubelet reports the error as ``UnexpectedAdmissionError`` and never retries the pod.
    """
    if not ids:
        raise _error(resource, "no devices requested")
    known = {d.id for d in resource.devices}
    for device_id in ids:
        if device_id not in known:
            raise _error(resource, f"unknown device: {shown_id(device_id)}")
    if resource.fail_requests_greater_than_one and len(ids) > 1 and any("::" in i for i in ids):
        raise _error(resource, f"maximum request size for shared resources is 1; found {len(ids)}")


def mig_cap_minors(gpu_index: int, gi_id: int, ci_id: int) -> tuple[int, int]:
    """The nvidia-caps minors of a MIG device's GI and CI access files, numbered as the driver does.

    ``gi = 3 + 135*gpu + 9*gi`` and ``ci = gi + 1 + ci`` (e.g. gpu0/gi1 -> 12, gpu0/gi1/ci0 -> 13):
    unique per (gpu, gi, ci) and equal to the real ``mig-minors`` file.
    """
    gi_minor = MIG_CAP_FIRST + gpu_index * MIG_GIS_PER_GPU * MIG_CAPS_PER_GI + gi_id * MIG_CAPS_PER_GI
    return gi_minor, gi_minor + 1 + ci_id


def _lookup(resource: Resource, ids: Sequence[str]) -> list[Device]:
    by_id = {d.id: d for d in resource.devices}
    devices = []
    for device_id in ids:
        device = by_id.get(device_id)
        if device is None:
            raise _error(resource, f"unknown device: {shown_id(device_id)}")
        devices.append(device)
    return devices


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def runtime_id(device: Device, strategy: str) -> str:
    """deviceIDStrategy: the GPU/MIG UUID (replica suffix stripped) or the index form ``3`` / ``3:1``."""
    return device.index_id if strategy == "index" else strip_replica(device.base_id)


def join_root(root: str, path: str) -> str:
    """Go's filepath.Join(root, path): one slash between parts, ``/`` + ``/dev/x`` -> ``/dev/x``."""
    joined = posixpath.normpath(posixpath.join(root or "/", path.lstrip("/")))
    return "/" + joined.lstrip("/") if joined.startswith("/") else joined


def _mig_instance(inventory: Inventory, device: Device) -> MigInstance:
    for mig in inventory.node.gpus[device.parent_index].mig_devices:
        if mig.uuid == device.base_id:
            return mig
    raise AllocationError(f"MIG device {device.base_id} not found on GPU {device.parent_index}")


def control_device_paths(device_exists: Callable[[str], bool] = os.path.exists) -> list[str]:
    """The control nodes (``/dev/nvidiactl``, ...) that exist on the node, as apiDeviceSpecs filters them."""
    return [p for p in CONTROL_DEVICE_PATHS if device_exists(p)]


def own_device_paths(inventory: Inventory, device: Device) -> list[str]:
    """One device's nodes: its GPU's node and, for MIG, its GI and CI caps."""
    paths = [f"/dev/nvidia{inventory.node.gpus[device.parent_index].minor}"]
    if device.is_mig:
        mig = _mig_instance(inventory, device)
        gi_minor, ci_minor = mig_cap_minors(device.parent_index, mig.gi_id, mig.ci_id)
        paths += [f"/dev/nvidia-caps/nvidia-cap{gi_minor}", f"/dev/nvidia-caps/nvidia-cap{ci_minor}"]
    return paths


def device_paths(
    inventory: Inventory, devices: Sequence[Device], device_exists: Callable[[str], bool] = os.path.exists
) -> list[str]:
    """NVIDIA's GetDevicePaths as apiDeviceSpecs filters it (``internal/rm/nvml_manager.go``,
    ``internal/plugin/server.go``): the control nodes that exist on the node, then each requested device's
    nodes once per requested ID, so replicas of one GPU repeat them.

    NVIDIA walks a map, so its order is random; here the request's order is kept.
    """
    return control_device_paths(device_exists) + [p for d in devices for p in own_device_paths(inventory, d)]


def additional_cdi_classes(config: PluginConfig) -> list[str]:
    """NVIDIA's ``additionalModes``, in its order (``internal/cdi/cdi.go`` ``New``): gdrcopy, gds, mofed.
    Each is a CDI class with one device ``all``; the plugin's spec defines them (``fakeplugin.plugin_cdi_specs``)."""
    enabled = {"gdrcopy": config.gdrcopy_enabled, "gds": config.gds_enabled, "mofed": config.mofed_enabled}
    return [cdi_class for cdi_class, on in enabled.items() if on]


def _cdi_names(inventory: Inventory, runtime_ids: Sequence[str]) -> list[str]:
    """NVIDIA's ``updateResponseForCDI``: the GPUs, the IMEX channels found, then ``AdditionalDevices``."""
    config = inventory.config
    names = [qualified_name(CDI_VENDOR, GPU_CLASS, i) for i in runtime_ids]
    names += [qualified_name(CDI_VENDOR, IMEX_CHANNEL_CLASS, c.id) for c in imex_channels(inventory)]
    names += [qualified_name(CDI_VENDOR, cdi_class, ALL_DEVICES) for cdi_class in additional_cdi_classes(config)]
    return names


def _update_for_mps(
    response: api_pb2.ContainerAllocateResponse,
    inventory: Inventory,
    resource: Resource,
    devices: Sequence[Device],
) -> None:
    """NVIDIA's MPS additions (pipe dir env, pipe and shm mounts) plus fakegpu's client-limit envs.

    Extension: NVIDIA never sets ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` or
    ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``; its control daemon applies them as defaults. fakegpu has
    no daemon, so it hands the same per-replica limits to the client through the env.
    """
    mps_root = inventory.config.mps_root
    pipe = posixpath.join(MPS_CONTAINER_ROOT, resource.name, "pipe")
    response.envs["CUDA_MPS_PIPE_DIRECTORY"] = pipe
    response.mounts.append(api_pb2.Mount(container_path=pipe, host_path=join_root(mps_root, f"{resource.name}/pipe")))
    response.mounts.append(api_pb2.Mount(container_path="/dev/shm", host_path=join_root(mps_root, "shm")))
    strategy = inventory.config.device_id_strategy
    limits: dict[str, int] = {}
    for device in devices:
        if device.mps_memory_limit_mib is not None:
            limits.setdefault(runtime_id(device, strategy), device.mps_memory_limit_mib)
    if limits:
        response.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(f"{k}={v}M" for k, v in limits.items())
    percentages = [d.mps_thread_percentage for d in devices if d.mps_thread_percentage is not None]
    if percentages:
        response.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(min(percentages))


def _add_nvidia_smi(response: api_pb2.ContainerAllocateResponse, directory: str, runtime_ids: Sequence[str]) -> None:
    """fakegpu extension (``--inject-nvidia-smi``): the fake nvidia-smi at /usr/bin/nvidia-smi and
    devices.json beside it, read-only, after NVIDIA's own mounts, and ``FAKEGPU_VISIBLE_DEVICES`` with
    the container's runtime IDs, which the script prefers to NVIDIA_VISIBLE_DEVICES: the CDI strategies
    set no NVIDIA_VISIBLE_DEVICES, and CUDA images bring their own ``all``."""
    for mount in injected_mounts(directory):
        response.mounts.append(
            api_pb2.Mount(container_path=mount.container_path, host_path=mount.host_path, read_only=True)
        )
    response.envs[DEVICES_FILE_ENV] = CONTAINER_DEVICES_PATH
    response.envs[VISIBLE_DEVICES_ENV] = ",".join(runtime_ids)


def container_allocate_response(
    inventory: Inventory,
    resource: Resource,
    ids: Sequence[str],
    *,
    annotation_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    device_exists: Callable[[str], bool] = os.path.exists,
) -> api_pb2.ContainerAllocateResponse:
    """NVIDIA's response (``_nvidia_response``) plus, when configured, the fake nvidia-smi's mounts.

    ``device_exists`` says whether an optional device node exists on the node (injectable for tests)."""
    response = _nvidia_response(inventory, resource, ids, annotation_id, device_exists)
    if inventory.config.nvidia_smi_dir:
        strategy = inventory.config.device_id_strategy
        runtime_ids = _unique(runtime_id(d, strategy) for d in _lookup(resource, ids))
        _add_nvidia_smi(response, inventory.config.nvidia_smi_dir, runtime_ids)
    return response


def _nvidia_response(
    inventory: Inventory,
    resource: Resource,
    ids: Sequence[str],
    annotation_id: Callable[[], str],
    device_exists: Callable[[str], bool],
) -> api_pb2.ContainerAllocateResponse:
    """NVIDIA's getAllocateResponse for one container's request, in NVIDIA's order.

    CDI -> MPS -> GDS/MOFED/GDRCOPY envs -> (stop if only CDI strategies) -> envvar -> volume-mounts
    (which overwrites envvar's NVIDIA_VISIBLE_DEVICES, as in NVIDIA) -> device specs. Unknown IDs raise
    AllocationError; the request-size rule is ``validate_request``'s job. ``annotation_id`` names the
    CDI annotation (random in NVIDIA; injectable so tests are deterministic).
    """
    config = inventory.config
    strategies = config.device_list_strategy
    devices = _lookup(resource, ids)
    runtime_ids = _unique(runtime_id(d, config.device_id_strategy) for d in devices)
    response = api_pb2.ContainerAllocateResponse()

    if any(s in CDI_STRATEGIES for s in strategies):
        names = _cdi_names(inventory, runtime_ids)
        if "cdi-annotations" in strategies:
            key = f"{config.cdi_annotation_prefix}{CDI_PLUGIN_NAME}_{annotation_id()}"
            response.annotations[key] = ",".join(names)
        if "cdi-cri" in strategies:
            response.cdi_devices.extend(api_pb2.CDIDevice(name=n) for n in names)
    if resource.sharing == "mps":
        _update_for_mps(response, inventory, resource, devices)
    if config.gdrcopy_enabled:
        response.envs["NVIDIA_GDRCOPY"] = "enabled"
    if config.gds_enabled:
        response.envs["NVIDIA_GDS"] = "enabled"
    if config.mofed_enabled:
        response.envs["NVIDIA_MOFED"] = "enabled"
    if all(s in CDI_STRATEGIES for s in strategies):
        return response

    # The channels the node has (``fakeplugin.imex_channels``), in every allocation of every resource as
    # NVIDIA v0.17 internal/plugin/server.go: updateResponseForImexChannelsEnvVar (envvar), a marker mount
    # per channel (volume-mounts), a DeviceSpec per channel after the GPUs' (passDeviceSpecs).
    channels = imex_channels(inventory)
    if "envvar" in strategies:
        response.envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(runtime_ids)
        if channels:
            response.envs["NVIDIA_IMEX_CHANNELS"] = ",".join(c.id for c in channels)
    if "volume-mounts" in strategies:
        response.envs["NVIDIA_VISIBLE_DEVICES"] = VOLUME_MOUNTS_ROOT
        container_paths = [posixpath.join(VOLUME_MOUNTS_ROOT, i) for i in runtime_ids]
        container_paths += [posixpath.join(VOLUME_MOUNTS_ROOT, "imex", c.id) for c in channels]
        response.mounts.extend(
            api_pb2.Mount(host_path=VOLUME_MOUNTS_HOST_PATH, container_path=p) for p in container_paths
        )
    if config.pass_device_specs:
        response.devices.extend(
            api_pb2.DeviceSpec(container_path=p, host_path=join_root(config.nvidia_dev_root, p), permissions="rw")
            for p in [*device_paths(inventory, devices, device_exists), *(c.path for c in channels)]
        )
    return response
