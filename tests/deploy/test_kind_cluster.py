"""deploy/kind/cluster.yaml is kind's config, not a Kubernetes object: check it is well-formed and carries what
the overlays and deploy/README.md rely on (node names, opt-in labels, CDI, DRA feature gates)."""

from __future__ import annotations

import tomllib

from fakegpu.cli.slice_commands import dra_feature_gates
from tests.deploy.manifests import (
    DEPLOY,
    Obj,
    fakegpu_argv,
    load_docs,
    one,
    only_container,
    parse_cli,
    pod_spec,
    render,
)


def cluster() -> Obj:
    (config,) = load_docs(DEPLOY / "kind" / "cluster.yaml")
    return config


def test_kind_cluster_config_shape() -> None:
    config = cluster()
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4" and config["kind"] == "Cluster"
    # Node names, hence device UUIDs in deploy/README.md, follow from the cluster name.
    assert config["name"] == "fakegpu"
    roles = [n["role"] for n in config["nodes"]]
    assert roles == ["control-plane", "worker", "worker"]
    images = {n["image"] for n in config["nodes"]}
    assert len(images) == 1
    (image,) = images
    assert image.startswith("kindest/node:v1.36.") and "@sha256:" in image


def test_each_opt_in_label_is_on_exactly_one_worker() -> None:
    workers = [n for n in cluster()["nodes"] if n["role"] == "worker"]
    for overlay, kind in (("device-plugin", "DaemonSet"), ("dra", "DaemonSet")):
        (workload,) = [o for o in render(overlay) if o["kind"] == kind]
        selector = pod_spec(workload)["nodeSelector"]
        labelled = [w for w in workers if selector.items() <= w.get("labels", {}).items()]
        assert len(labelled) == 1, f"{overlay}: {selector} should select exactly one kind worker"
    # Disjoint: a node running both faces would offer the same fake GPUs twice.
    assert all(len(w.get("labels", {})) == 1 for w in workers)


def test_containerd_reads_the_cdi_specs_the_dra_driver_writes() -> None:
    args = parse_cli(fakegpu_argv(only_container(one(render("dra"), "DaemonSet", "fakegpu-dra"))))
    patches = [tomllib.loads(p) for p in cluster()["containerdConfigPatches"]]
    cri = [
        p["plugins"]["io.containerd.grpc.v1.cri"]
        for p in patches
        if "io.containerd.grpc.v1.cri" in p.get("plugins", {})
    ]
    assert len(cri) == 1
    assert cri[0]["enable_cdi"] is True
    assert str(args.cdi_root) in cri[0]["cdi_spec_dirs"]


def test_dra_feature_gates_for_dynamic_mig() -> None:
    args = parse_cli(fakegpu_argv(only_container(one(render("dra"), "DaemonSet", "fakegpu-dra"))))
    gates = cluster()["featureGates"]
    _, mig_mode = dra_feature_gates(args, {})
    if mig_mode == "dynamic":  # counters: dropped by 1.34/1.35 API servers without the gate
        assert gates["DRAPartitionableDevices"] is True
    assert all(value is True for value in gates.values())
