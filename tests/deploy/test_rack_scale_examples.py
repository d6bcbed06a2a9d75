"""deploy/examples/rack-scale/: the 16-GPU gang job passes the schemas (kubernetes-validate 1.36 for the core
kinds, the CRD's own schema from deploy/overlays/compute-domains for the ComputeDomain), and its parts fit
together and fit a virtual NVL72 fleet: the workers reference the claim template the controller makes from the
ComputeDomain, ask for GPUs a GB200 node publishes, and are gang-scheduled inside the label fakegpu writes."""

from __future__ import annotations

import re

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from fakegpu.dra.compute_domain.claim_templates import workload_template
from fakegpu.dra.resource_slices import SliceOptions, build_slice_specs, spec_devices
from fakegpu.sharing.labels import CLIQUE_LABEL
from fakegpu.sharing.node import build_node
from fakegpu.sharing.node_spec import parse_node_spec
from fakegpu.sharing.rack_layout import RackLayout
from tests.apiserver import crd_schema
from tests.deploy.manifests import KUBERNETES_VERSION, RACK_SCALE, Obj, load_docs, one

GANG_JOB = RACK_SCALE / "gang-job.yaml"


def objects() -> list[Obj]:
    return load_docs(GANG_JOB)


@pytest.mark.parametrize("index", range(len(load_docs(GANG_JOB))))
def test_every_object_passes_its_schema(index: int) -> None:
    obj = objects()[index]
    if obj["kind"] == "ComputeDomain":
        schema = crd_schema.crd_schemas()["computedomains"]
        schema.normalize(obj)
        assert schema.errors(obj) == []
        return
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {exc.message} at {exc.path}")


def test_the_workers_use_the_domains_channel_template_and_sixteen_gpus_of_one_clique() -> None:
    objs = objects()
    domain = one(objs, "ComputeDomain", "train-16gpu")
    job = one(objs, "Job", "train-16gpu")
    workload = one(objs, "Workload", "train-16gpu")
    group = one(objs, "PodGroup", "train-16gpu-workers")
    gpus = one(objs, "ResourceClaimTemplate", "four-gb200")
    pod = job["spec"]["template"]["spec"]

    workers = domain["spec"]["numNodes"]
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == workers == 4
    templates = {c["name"]: c["resourceClaimTemplateName"] for c in pod["resourceClaims"]}
    # The controller names the workload template after the domain's spec (NVIDIA's controller does the same).
    channel = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    assert templates["imex"] == channel
    named = {**domain, "metadata": {"name": "train-16gpu", "namespace": "default", "uid": "u"}}
    made = workload_template(named, "resource.k8s.io/v1")
    assert made["metadata"]["name"] == channel
    (request,) = gpus["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert request["exactly"]["count"] * workers == 16
    assert {c["name"] for c in pod["containers"][0]["resources"]["claims"]} == set(templates)

    # Gang of all four inside one clique, by the label GFD (and fakegpu) writes on NVL72 nodes.
    (template,) = workload["spec"]["podGroupTemplates"]
    for policy in (template, group["spec"]):
        assert policy["schedulingPolicy"]["gang"]["minCount"] == workers
        assert policy["schedulingConstraints"]["topology"] == [{"key": CLIQUE_LABEL}]
    assert pod["schedulingGroup"]["podGroupName"] == group["metadata"]["name"]
    ref = group["spec"]["podGroupTemplateRef"]["workload"]
    assert (ref["workloadName"], ref["podGroupTemplateName"]) == (workload["metadata"]["name"], template["name"])
    (term,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == CLIQUE_LABEL


def test_a_gb200_rack_node_publishes_what_a_worker_asks_for() -> None:
    """A node of the fleet the README brings up (4x GB200 per node, one clique per rack) has the four
    ``gpu.nvidia.com`` GPUs a worker's claim asks for, and carries the clique label the gang is placed by."""
    layout = RackLayout(racks=4)
    fabric = layout.rack_fabric(1)
    spec = parse_node_spec(
        {"gpus": [{"model": "gb200", "count": 4}], "fabric": {"clusterUUID": fabric.cluster_uuid, "cliqueID": 1}},
        "fleet node",
    )
    node = build_node(spec, "fakegpu-virtual-0018", source="fleet node")
    devices = [d for s in build_slice_specs(node, SliceOptions()) for d in spec_devices(s)]
    gpus = [d for d in devices if d["attributes"]["type"] == {"string": "gpu"}]
    assert len(gpus) == 4
    assert {d["attributes"]["productName"]["string"] for d in gpus} == {"NVIDIA GB200"}
    assert node.fabric is not None and node.fabric.clique == fabric.clique


def test_the_readmes_real_cluster_fleets_fit_the_gang_and_do_not() -> None:
    # README.md reports what the real scheduler did with this job on two KWOK fleets: placed on one of the
    # first fleet's cliques, Pending on the second. Each clique is one rack, so the numbers must say so.
    readme = (RACK_SCALE.parents[2] / "README.md").read_text()
    fits = re.search(r"virtual-nodes --gpus (\d+)xgb200 --racks (\d+) --nodes-per-rack (\d+) --gpu-mode dra`", readme)
    fails = re.search(r"`--racks (\d+) --nodes-per-rack (\d+)` \(no clique with (\w+) nodes\)", readme)
    assert fits is not None and fails is not None
    objs = objects()
    workers = one(objs, "ComputeDomain", "train-16gpu")["spec"]["numNodes"]
    (request,) = one(objs, "ResourceClaimTemplate", "four-gb200")["spec"]["spec"]["devices"]["requests"]
    gpus_per_node, per_rack = int(fits.group(1)), int(fits.group(3))
    assert gpus_per_node >= request["exactly"]["count"] and per_rack >= workers
    assert int(fails.group(2)) < workers and fails.group(3) == "four" and workers == 4
    assert f"its {fails.group(3)} workers landed" in readme.replace("\n", " ")
