"""GFD labels per strategy, pinned label by label."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from fakegpu.cli.main import main
from fakegpu.sharing.catalog import CATALOG
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import load_labels, load_node
from fakegpu.sharing.label_syntax import fit_label_value, key_problem, label_problems, value_problem
from fakegpu.sharing.labels import TIMESTAMP_LABEL, sanitize_product
from fakegpu.sharing.mig_parted import generated_layout_names
from tests.inventory_builders import inputs, labels, mps, time_slicing

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


# -- every label passes Kubernetes' rules --------------------------------------------------------------

_LAYOUTS = [
    (key, layout)
    for key, model in CATALOG.items()
    for layout in (generated_layout_names([model]) if model.mig_capable else [None])
]


@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
@pytest.mark.parametrize("shared", [False, True], ids=["unshared", "time-sliced"])
@pytest.mark.parametrize(("board", "layout"), _LAYOUTS, ids=[f"{b}-{lay}" for b, lay in _LAYOUTS])
def test_every_label_is_a_valid_kubernetes_label(tmp_path, board, layout, strategy, shared):
    """Every catalog board, generated layout and MIG strategy, plain and time-sliced (the longest
    products, ``-SHARED``): the API server would refuse a Node patch carrying any invalid key or value
    (k8s.io/apimachinery pkg/util/validation ``IsQualifiedName`` / ``IsValidLabelValue``)."""
    config = time_slicing(4) if shared else None
    got = labels(tmp_path, f"2x{board}", layout=layout, cli={"mig_strategy": strategy}, config=config)
    assert label_problems(got) == []


def test_the_label_rules_catch_what_the_api_server_refuses():
    """The checker itself: the value ``+me`` gave before NVIDIA's ``+`` -> ``.`` rule fails it."""
    assert value_problem("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb+me") is not None
    assert value_problem("x" * 64) is not None
    assert value_problem("-lead") is not None and value_problem("trail.") is not None
    assert value_problem("") is None and value_problem("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me") is None
    assert key_problem("nvidia.com/mig-1g.10gb.me.product") is None
    assert key_problem("nvidia.com/mig-1g.10gb+me.product") is not None
    assert key_problem("Nvidia.com/gpu.count") is not None and key_problem("a/b/c") is not None
    assert key_problem("nvidia.com/" + "x" * 64) is not None


def test_machine_names_become_valid_values(tmp_path):
    """GFD writes the DMI product name with spaces as ``-`` (``internal/lm/machine-type.go``); fakegpu also
    drops what a label value may not hold, so an odd node spec cannot break the Node patch."""
    spec = {"machine": "  (Super)Server  SYS-821GE-TNHR / rev 2.0 " + "x" * 80, "gpus": [{"model": "l4", "count": 1}]}
    got = labels(tmp_path, node_spec=spec)["nvidia.com/gpu.machine"]
    assert got == "SuperServer-SYS-821GE-TNHR-rev-2.0-" + "x" * 28
    assert value_problem(got) is None
    assert fit_label_value("--..--") == ""
    assert fit_label_value("a" * 62 + "-b") == "a" * 62


# -- MIG ``+me`` profiles (NVIDIA/k8s-device-plugin internal/resource/nvml-mig-device.go GetName) ---------


def test_mixed_me_profile_product_uses_a_dot(tmp_path):
    """``GetName`` replaces ``+`` by ``.`` before the labeler sanitises the product
    (``internal/lm/resource.go`` ``getProductName``)."""
    got = labels(tmp_path, layout="all-1g.10gb+me", cli={"mig_strategy": "mixed"})
    assert got["nvidia.com/mig-1g.10gb.me.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me"
    assert got["nvidia.com/mig-1g.10gb.me.count"] == "8"
    assert not [k for k in got if "+" in k or "+" in got[k]]


def test_single_me_profile_product_uses_a_dot(tmp_path):
    got = labels(tmp_path, "2xa30", layout="all-2g.12gb+me", cli={"mig_strategy": "single"})
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A30-MIG-2g.12gb.me"
    assert got["nvidia.com/gpu.count"] == "2"


def test_me_profile_shared_keeps_the_suffix_after_the_profile(tmp_path):
    config = time_slicing(2, "nvidia.com/mig-1g.10gb.me")
    got = labels(tmp_path, layout="all-1g.10gb+me", cli={"mig_strategy": "mixed"}, config=config)
    assert got["nvidia.com/mig-1g.10gb.me.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me-SHARED"
    assert got["nvidia.com/mig-1g.10gb.me.sharing-strategy"] == "time-slicing"


# -- GFD on MIG-enabled GPUs (NVIDIA/k8s-device-plugin internal/lm/mig-strategy.go newGPULabelers) --------


def test_none_strategy_labels_mig_enabled_gpus_without_sharing(tmp_path):
    """MIG-enabled GPUs get ``NewGPUResourceLabelerWithoutSharing`` under every strategy, ``none`` included:
    replicas 0, strategy none, no ``-SHARED`` even with a time-slicing rule."""
    got = labels(tmp_path, layout="all-balanced", cli={"mig_strategy": "none"}, config=time_slicing(4))
    assert got["nvidia.com/gpu.replicas"] == "0"
    assert got["nvidia.com/gpu.sharing-strategy"] == "none"
    assert got["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert got["nvidia.com/gpu.count"] == "8"
    assert "nvidia.com/mig.strategy" not in got


def _one_mig_one_full(board: str = "h100-80gb", profile: str = "1g.10gb") -> dict[str, Any]:
    return {"gpus": [{"model": board, "migEnabled": True, "migDevices": {profile: 7}}, {"model": board}]}


def test_mixed_counts_mig_enabled_and_full_gpus_of_one_model(tmp_path):
    """``counts[name]`` adds MIG-enabled and full GPUs of a model; the full GPU's labeler (with sharing)
    comes last and wins."""
    spec = _one_mig_one_full()
    got = labels(tmp_path, node_spec=spec, cli={"mig_strategy": "mixed"}, config=time_slicing(2))
    assert got["nvidia.com/gpu.count"] == "2"
    assert got["nvidia.com/gpu.replicas"] == "2"
    assert got["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert got["nvidia.com/mig-1g.10gb.count"] == "7"


def test_single_invalid_leaves_the_sharing_strategy_of_the_full_gpu_labels(tmp_path):
    """``newInvalidMigStrategyLabeler`` sets product, count, replicas and memory only; the sharing
    strategy is what the full-GPU labelers wrote (here the full GPU's time-slicing)."""
    spec = _one_mig_one_full()
    got = labels(tmp_path, node_spec=spec, cli={"mig_strategy": "single"}, config=time_slicing(2))
    assert got["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID"
    assert (got["nvidia.com/gpu.count"], got["nvidia.com/gpu.replicas"], got["nvidia.com/gpu.memory"]) == ("0",) * 3
    assert got["nvidia.com/gpu.sharing-strategy"] == "time-slicing"


def test_single_invalid_on_mig_only_gpus_says_none(tmp_path):
    got = labels(tmp_path, layout="all-balanced", cli={"mig_strategy": "single"}, config=time_slicing(2))
    assert got["nvidia.com/gpu.sharing-strategy"] == "none"
    assert got["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-INVALID"


def test_single_is_valid_across_boards_sharing_one_profile_name(tmp_path):
    """GFD groups MIG devices by profile name only; the product names the first device's board."""
    spec = {
        "gpus": [
            {"model": "a100-80gb", "migEnabled": True, "migDevices": {"1g.10gb": 7}},
            {"model": "h100-80gb", "migEnabled": True, "migDevices": {"1g.10gb": 7}},
        ]
    }
    got = labels(tmp_path, node_spec=spec, cli={"mig_strategy": "single"})
    assert got["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert got["nvidia.com/gpu.count"] == "14"


def test_sanitise_collapses_runs_of_spaces():
    """``sanitise`` joins ``strings.Fields``: runs of spaces are one ``-``, none at the ends."""
    assert sanitize_product(" NVIDIA  H100 (80GB) ") == "NVIDIA-H100-80GB"


def test_timestamp_label_when_given(tmp_path):
    """``internal/lm/timestamp.go``: ``nvidia.com/gfd.timestamp`` is the Unix time in seconds."""
    assert load_labels(inputs(tmp_path), 1724632719)[TIMESTAMP_LABEL] == "1724632719"
    assert TIMESTAMP_LABEL not in load_labels(inputs(tmp_path))


# -- multi-node NVLink (GB200/GB300 NVL72) ---------------------------------------------------------------

CLUSTER = "00000001-0000-0000-0000-000000000001"
"""The cluster UUID of the real GB200 tray capture (NVIDIA/k8s-test-infra qx-gb200.xml, cliqueId 2)."""


def test_clique_label_on_a_fabric_node(tmp_path):
    """GFD's imex labeler (k8s-device-plugin ``internal/lm/imex.go``): ``nvidia.com/gpu.clique`` =
    ``<ClusterUUID>.<decimal CliqueId>``; the ``nvidia.com/gpu.imex-domain`` label of v0.17.0 was removed in
    v0.17.1 (CHANGELOG "Remove nvidia.com/gpu.imex-domain label") and is never written."""
    spec = {"fabric": {"clusterUUID": CLUSTER, "cliqueID": 2}, "gpus": [{"model": "gb200", "count": 4}]}
    got = labels(tmp_path, node_spec=spec)
    assert got["nvidia.com/gpu.clique"] == f"{CLUSTER}.2"
    assert "nvidia.com/gpu.imex-domain" not in got
    assert (got["nvidia.com/gpu.product"], got["nvidia.com/gpu.count"]) == ("NVIDIA-GB200", "4")
    assert (got["nvidia.com/gpu.memory"], got["nvidia.com/gpu.family"]) == ("189471", "blackwell")
    assert label_problems(got) == []


def test_no_clique_label_off_a_fabric(tmp_path):
    got = labels(tmp_path, "4xgb300")
    assert not any(k in got for k in ("nvidia.com/gpu.clique", "nvidia.com/gpu.imex-domain"))
    assert (got["nvidia.com/gpu.product"], got["nvidia.com/gpu.memory"]) == ("NVIDIA-GB300", "284208")
    assert (got["nvidia.com/gpu.compute.major"], got["nvidia.com/gpu.compute.minor"]) == ("10", "3")


@pytest.mark.parametrize(
    ("fabric", "why"),
    [
        ({"state": "not-started"}, "registration not started"),
        ({"state": "in-progress"}, "registration still in progress"),
        ({"state": "in-progress", "singleNode": True}, "GFD has no single-node exception"),
        ({"state": "not-supported"}, "no fabric support"),
        ({"status": "ERROR_UNKNOWN"}, "registration completed with an error"),
        ({"clusterUUID": "00000000-0000-0000-0000-000000000000"}, "NVLink but not multi-node capable"),
    ],
)
def test_no_clique_label_unless_the_fabric_is_attached(tmp_path, fabric, why):
    """GFD's imex labeler (NVIDIA/k8s-device-plugin ``internal/lm/imex.go``, ``getFabricIDs``, at commit 9d4c2ae,
    unchanged in v0.20.0) skips every GPU go-nvlib's ``IsFabricAttached`` rejects (NVIDIA/go-nvlib
    ``pkg/nvlib/device/device.go`` at commit 2442aa7: state COMPLETED, status SUCCESS, a non-zero cluster UUID),
    and with no GPU left writes no ``nvidia.com/gpu.clique``; the node spec's ``fabric.state``, ``status`` and
    ``singleNode`` say which case a node is in."""
    spec = {"fabric": {"clusterUUID": CLUSTER, "cliqueID": 2, **fabric}, "gpus": [{"model": "gb200", "count": 4}]}
    assert "nvidia.com/gpu.clique" not in labels(tmp_path, node_spec=spec), why
    attached = {"fabric": {"clusterUUID": CLUSTER, "cliqueID": 2, "state": "completed", "status": "SUCCESS"}}
    assert labels(tmp_path, node_spec={**spec, **attached})["nvidia.com/gpu.clique"] == f"{CLUSTER}.2"


def test_nvlink_clique_flag_gives_a_node_without_spec_its_fabric(tmp_path):
    """``--nvlink-clique`` reaches ``Node.fabric`` through ``load_node``, so every command sees it; the
    UUID is written lower-case, as NVML's bytes turned into a UUID string are."""
    i = replace(inputs(tmp_path, "4xgb200"), nvlink_clique=f"{CLUSTER.upper()}.32766")
    node = load_node(i)
    assert node.fabric is not None and node.fabric.clique == f"{CLUSTER}.32766"
    assert node.fabric.imex_channels == 2048
    assert load_labels(i)["nvidia.com/gpu.clique"] == f"{CLUSTER}.32766"


def test_nvlink_clique_flag_refused_with_a_spec_that_has_a_fabric(tmp_path):
    spec = {"fabric": {"clusterUUID": CLUSTER, "cliqueID": 2}, "gpus": [{"model": "gb200", "count": 4}]}
    i = replace(inputs(tmp_path, node_spec=spec), nvlink_clique=f"{CLUSTER}.3")
    with pytest.raises(SpecError, match=r"^--nvlink-clique: cannot be combined with .*node\.yaml, whose fabric"):
        load_node(i)


def test_nvlink_clique_flag_with_a_spec_without_fabric(tmp_path):
    i = replace(inputs(tmp_path, node_spec={"gpus": [{"model": "gb300", "count": 4}]}), nvlink_clique=f"{CLUSTER}.7")
    assert load_labels(i)["nvidia.com/gpu.clique"] == f"{CLUSTER}.7"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("rack-1", "expected <cluster UUID>.<clique ID>"),
        (f"{CLUSTER}", "expected <cluster UUID>.<clique ID>"),
        (f"{CLUSTER}.-1", "expected <cluster UUID>.<clique ID>"),
        (f"{CLUSTER}.99999", "clique ID must be at most 32767, found 99999"),
    ],
)
def test_bad_nvlink_clique_names_the_flag(capsys, value, message):
    code = main(["labels", "--gpus", "4xgb200", "--nvlink-clique", value])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith("fakegpu: error: --nvlink-clique: ") and message in err
    assert err.count("\n") == 1


def test_labels_command_writes_the_clique(capsys):
    code = main(["labels", "--gpus", "4xgb200", "--nvlink-clique", f"{CLUSTER}.2"])
    out, _ = capsys.readouterr()
    assert code == 0 and f"nvidia.com/gpu.clique={CLUSTER}.2\n" in out
