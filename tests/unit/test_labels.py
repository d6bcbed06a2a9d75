"""GFD labels per strategy, pinned label by label."""

from __future__ import annotations

from tests.inventory_builders import labels, mps, time_slicing

COMMON_H100 = {
    "nvidia.com/cuda.driver-version.full": "570.172.08",
    "nvidia.com/cuda.driver-version.major": "570",
    "nvidia.com/cuda.driver-version.minor": "172",
    "nvidia.com/cuda.driver-version.revision": "08",
    "nvidia.com/cuda.driver.major": "570",
    "nvidia.com/cuda.driver.minor": "172",
    "nvidia.com/cuda.driver.rev": "08",
    "nvidia.com/cuda.runtime-version.full": "12.8",
    "nvidia.com/cuda.runtime-version.major": "12",
    "nvidia.com/cuda.runtime-version.minor": "8",
    "nvidia.com/cuda.runtime.major": "12",
    "nvidia.com/cuda.runtime.minor": "8",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.machine": "unknown",
    "nvidia.com/gpu.mode": "compute",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/vgpu.present": "false",
}


def test_full_gpus(tmp_path):
    assert labels(tmp_path) == {
        **COMMON_H100,
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mps.capable": "false",
    }


def test_time_slicing_marks_product_shared(tmp_path):
    got = labels(tmp_path, "8xa100-40gb", config=time_slicing(4))
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-SHARED"
    assert got["nvidia.com/gpu.replicas"] == "4"
    assert got["nvidia.com/gpu.count"] == "8"
    assert got["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert got["nvidia.com/gpu.family"] == "ampere"


def test_renamed_shared_resource_keeps_plain_product(tmp_path):
    got = labels(tmp_path, "8xa100-40gb", config=time_slicing(4, renameByDefault=True))
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert got["nvidia.com/gpu.replicas"] == "4"


def test_mps(tmp_path):
    got = labels(tmp_path, "2xt4", config=mps(4))
    assert got["nvidia.com/mps.capable"] == "true"
    assert got["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert got["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert got["nvidia.com/gpu.family"] == "turing"
    assert got["nvidia.com/mig.capable"] == "false"


def test_mixed_mig(tmp_path):
    got = labels(tmp_path, layout="all-balanced", cli={"mig_strategy": "mixed"})
    assert got["nvidia.com/mig.strategy"] == "mixed"
    assert got["nvidia.com/gpu.replicas"] == "0"
    expected_3g = {
        "nvidia.com/mig-3g.40gb.count": "8",
        "nvidia.com/mig-3g.40gb.replicas": "1",
        "nvidia.com/mig-3g.40gb.sharing-strategy": "none",
        "nvidia.com/mig-3g.40gb.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
        "nvidia.com/mig-3g.40gb.memory": "40448",
        "nvidia.com/mig-3g.40gb.multiprocessors": "60",
        "nvidia.com/mig-3g.40gb.slices.gi": "3",
        "nvidia.com/mig-3g.40gb.slices.ci": "3",
        "nvidia.com/mig-3g.40gb.engines.copy": "3",
        "nvidia.com/mig-3g.40gb.engines.decoder": "3",
        "nvidia.com/mig-3g.40gb.engines.encoder": "0",
        "nvidia.com/mig-3g.40gb.engines.jpeg": "3",
        "nvidia.com/mig-3g.40gb.engines.ofa": "0",
    }
    assert {k: v for k, v in got.items() if k.startswith("nvidia.com/mig-3g.40gb.")} == expected_3g
    assert got["nvidia.com/mig-1g.10gb.count"] == "16"
    assert got["nvidia.com/mig-2g.20gb.count"] == "8"


def test_mixed_mig_time_sliced_profile(tmp_path):
    got = labels(
        tmp_path, layout="all-1g.10gb", cli={"mig_strategy": "mixed"}, config=time_slicing(2, "nvidia.com/mig-1g.10gb")
    )
    assert got["nvidia.com/mig-1g.10gb.replicas"] == "2"
    assert got["nvidia.com/mig-1g.10gb.sharing-strategy"] == "time-slicing"
    assert got["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED"


def test_single_mig(tmp_path):
    got = labels(tmp_path, layout="all-1g.10gb", cli={"mig_strategy": "single"})
    assert got["nvidia.com/mig.strategy"] == "single"
    assert got["nvidia.com/gpu.count"] == "56"
    assert got["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert got["nvidia.com/gpu.memory"] == "9984"
    assert got["nvidia.com/gpu.multiprocessors"] == "16"
    assert got["nvidia.com/gpu.slices.gi"] == "1"
    assert got["nvidia.com/gpu.slices.ci"] == "1"
    assert got["nvidia.com/gpu.engines.copy"] == "1"
    assert got["nvidia.com/gpu.replicas"] == "1"


def test_single_mig_invalid_layout(tmp_path):
    got = labels(tmp_path, layout="all-balanced", cli={"mig_strategy": "single"})
    assert got["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID"
    assert got["nvidia.com/gpu.count"] == "0"
    assert got["nvidia.com/gpu.replicas"] == "0"


def test_versions_and_machine_from_node_spec(tmp_path):
    spec = {
        "driverVersion": "550.107.02",
        "cudaDriverVersion": "12.4",
        "machine": "DGX H100",
        "gpus": [{"model": "l40s", "count": 2}],
    }
    got = labels(tmp_path, node_spec=spec)
    assert got["nvidia.com/cuda.driver-version.full"] == "550.107.02"
    assert got["nvidia.com/cuda.runtime-version.full"] == "12.4"
    assert got["nvidia.com/gpu.machine"] == "DGX-H100"
    assert got["nvidia.com/gpu.family"] == "ada-lovelace"
    assert got["nvidia.com/gpu.memory"] == "46068"


def test_mixed_models_describe_the_full_gpus_counted_per_model(tmp_path):
    got = labels(tmp_path, ("4xa100-40gb", "2xt4"), layout="all-3g.20gb", cli={"mig_strategy": "mixed"})
    assert got["nvidia.com/gpu.product"] == "Tesla-T4"
    assert got["nvidia.com/gpu.count"] == "2"
    assert got["nvidia.com/gpu.replicas"] == "1"
    assert got["nvidia.com/gpu.family"] == "turing"
    assert got["nvidia.com/mig-3g.20gb.count"] == "8"
    assert got["nvidia.com/mig-3g.20gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb"


def test_heterogeneous_full_gpus_use_the_last_model(tmp_path):
    got = labels(tmp_path, ("2xl4", "3xt4"))
    assert (got["nvidia.com/gpu.product"], got["nvidia.com/gpu.count"]) == ("Tesla-T4", "3")
