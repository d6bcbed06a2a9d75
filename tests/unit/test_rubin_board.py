"""Rubin in the catalog: the VR200 as NVIDIA's one published capture of it reads.

The numbers are those of NVIDIA/k8s-test-infra deployments/nvml-mock/helm/nvml-mock/profiles/vr200.yaml
@ bb9c07b, authored from a real ``nvidia-smi -q -x`` of a 4-GPU Vera Rubin tray (driver 615.23, CUDA 13.4).
"""

from __future__ import annotations

from pathlib import Path

from fakegpu.dra.resource_slices import SliceOptions, build_slice_specs
from fakegpu.sharing.catalog import CATALOG
from fakegpu.sharing.labels import gpu_family
from tests.inventory_builders import inventory, labels

VR200 = CATALOG["vr200"]


def test_vr200_is_the_capture():
    assert VR200.product_name == "NVIDIA Graphics Device"
    assert (VR200.memory_mib, VR200.facts.reserved_mib, VR200.facts.bar1_mib) == (286524, 1277, 524288)
    assert VR200.pci_device_id_hex == "0x307F10DE"
    assert (VR200.facts.power_limit_w, VR200.facts.power_min_w, VR200.facts.idle_pstate) == (2300, 200, "P5")
    assert (VR200.facts.pcie_gen, VR200.facts.pcie_width) == (6, 16)
    assert VR200.architecture == "Rubin"
    assert not VR200.mig_capable, "the capture has MIG disabled and no profile list"


def test_what_is_not_in_the_capture_is_marked_unverified():
    notes = " ".join(VR200.unverified)
    assert "multiprocessors" in notes and "compute capability 10.7" in notes and "MIG" in notes


def test_gfd_labels_follow_the_compute_capability(tmp_path: Path):
    """Follows NVIDIA/k8s-device-plugin internal/lm/resource.go @ v0.20.0 (getArchFamily by compute
    capability major: 10 and 12 blackwell, 13 rubin, #1909): CUDA 13.4 calls Rubin 10.7, so GFD's family
    label says blackwell."""
    got = labels(tmp_path, "4xvr200")
    assert got["nvidia.com/gpu.product"] == "NVIDIA-Graphics-Device"
    assert (got["nvidia.com/gpu.compute.major"], got["nvidia.com/gpu.compute.minor"]) == ("10", "7")
    assert got["nvidia.com/gpu.family"] == "blackwell"
    assert got["nvidia.com/gpu.memory"] == "286524"
    assert gpu_family((13, 0)) == "rubin"


def test_dra_publishes_the_rubin_architecture(tmp_path: Path):
    """Follows kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/nvlib.go (``architecture`` is
    go-nvlib's name for NVML's DEVICE_ARCH_RUBIN, ``Rubin``; compute capability as semver)."""
    node = inventory(tmp_path, "4xvr200").node
    opts = SliceOptions(mig_mode="static", server_minor=36, api_version="resource.k8s.io/v1")
    devices = [d for spec in build_slice_specs(node, opts, {}) for d in spec.get("devices", [])]
    assert len(devices) == 4
    attrs = devices[0]["attributes"]
    assert attrs["architecture"] == {"string": "Rubin"}
    assert attrs["cudaComputeCapability"] == {"version": "10.7.0"}
    assert attrs["productName"] == {"string": "NVIDIA Graphics Device"}
