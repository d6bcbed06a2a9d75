"""The GPU driver's device attributes that depend on a feature gate or on the node's NVSwitch fabric.

NVIDIA's gpu-kubelet-plugin (kubernetes-sigs/dra-driver-nvidia-gpu, main after v0.4.1) publishes two kinds
of such attributes, and claims written for it select on them:

- ``resource.kubernetes.io/numaNode`` (KEP-6072's standard name, ``deviceattribute.StandardDeviceAttributeNUMANode``)
  on full GPUs and MIG devices whose GPU has NUMA affinity: a scalar ``int`` by default, a list ``ints`` with the
  ``DRAListTypeAttributes`` gate (``numa.go``). The list holds the GPU's node and the same-socket nodes at the
  minimum SLIT distance; a fake node has no SLIT table, so it is the one-element list the helper falls back to.
- Fabric Manager partition attributes with the ``FabricManagerPartitioning`` gate, on full GPUs only
  (``GpuInfo.addFabricManagerAttributes``, PR #1273): ``gpuModuleID`` (the NVML module ID, 1-based) and one
  ``partition<N>`` per partition size FM reports containing the GPU, each an ``int`` partition ID. NVIDIA skips
  Fabric Manager on nodes without an NVSwitch fabric, so only an HGX 8-GPU baseboard gets them here.
"""

from __future__ import annotations

from typing import Final

from fakegpu.dra.feature_gates import DRA_LIST_TYPE_ATTRIBUTES, FABRIC_MANAGER_PARTITIONING, FeatureGates
from fakegpu.sharing.node import Node, PhysicalGpu

NUMA_NODE_ATTRIBUTE: Final = "resource.kubernetes.io/numaNode"
GPU_MODULE_ID_ATTRIBUTE: Final = "gpuModuleID"
HGX_BASEBOARD_GPUS: Final = 8
"""The NVSwitch baseboards whose Fabric Manager reports shared-NVSwitch partitions have eight GPUs."""
FM_PARTITION_SIZES: Final = (1, 2, 4, 8)
_NO_NVSWITCH_ARCHITECTURES: Final = frozenset({"Volta"})
"""An 8-GPU V100 SXM2 board links its GPUs in a hybrid cube mesh, without NVSwitches."""

Attribute = dict[str, str | int | list[int]]
"""One DeviceAttribute: ``{"string": ...}``, ``{"version": ...}``, ``{"int": ...}`` or ``{"ints": [...]}``."""


def numa_node_attribute(numa: int | None, gates: FeatureGates) -> Attribute | None:
    """The standard NUMA attribute's value, or None where the GPU has no NUMA affinity (NVIDIA omits it then:
    ``-1`` would match every other NUMA-less device under ``matchAttribute``)."""
    if numa is None or numa < 0:
        return None
    if gates.enabled(DRA_LIST_TYPE_ATTRIBUTES):
        return {"ints": [numa]}
    return {"int": numa}


def has_fabric_manager_partitions(node: Node) -> bool:
    """Whether Fabric Manager would report partitions for the node: one HGX baseboard of eight SXM GPUs of one
    model, every pair NVLinked through NVSwitches, and no multi-node NVLink fabric (NVL72 trays are partitioned
    by the rack's switch trays, not on the node)."""
    gpus = node.gpus
    if len(gpus) != HGX_BASEBOARD_GPUS or node.fabric is not None:
        return False
    model = gpus[0].model
    if not model.sxm or model.architecture in _NO_NVSWITCH_ARCHITECTURES:
        return False
    if any(gpu.model.key != model.key for gpu in gpus):
        return False
    return all(node.nvlinked(a.index, b.index) for a in gpus for b in gpus if a.index < b.index)


def gpu_module_id(gpu: PhysicalGpu) -> int:
    """The NVML module ID of the GPU's baseboard slot; slots are numbered from 1, in minor order here."""
    return gpu.index + 1


def partition_id(module_id: int, size: int) -> int:
    """The ID of the ``size``-GPU partition that holds ``module_id``, numbered as in NVIDIA's documented example
    (``fabric-manager-partitioning.md``: module 1 has ``partition1: 8``, ``partition2: 4``, ``partition4: 2``,
    ``partition8: 1``): the eight-GPU partition is 1, the two four-GPU partitions 2-3, the four pairs 4-7,
    the eight single GPUs 8-15."""
    if size not in FM_PARTITION_SIZES or not 1 <= module_id <= HGX_BASEBOARD_GPUS:
        raise ValueError(f"no {size}-GPU Fabric Manager partition holds module {module_id}")
    return HGX_BASEBOARD_GPUS // size + (module_id - 1) // size


def fabric_manager_attributes(node: Node, gpu: PhysicalGpu, gates: FeatureGates) -> dict[str, Attribute]:
    """``gpuModuleID`` and ``partition1``/``2``/``4``/``8`` for a full GPU, with the gate on a partitioned node;
    nothing otherwise."""
    if not gates.enabled(FABRIC_MANAGER_PARTITIONING) or not has_fabric_manager_partitions(node):
        return {}
    module = gpu_module_id(gpu)
    attributes: dict[str, Attribute] = {GPU_MODULE_ID_ATTRIBUTE: {"int": module}}
    for size in FM_PARTITION_SIZES:
        attributes[f"partition{size}"] = {"int": partition_id(module, size)}
    return attributes
