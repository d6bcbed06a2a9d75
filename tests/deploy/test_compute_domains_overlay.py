"""deploy/overlays/compute-domains: NVIDIA's two ComputeDomain CRDs and the controller, rendered by kustomize
under the conventions of the other overlays, valid for Kubernetes 1.36, and wired to each other.

The CRD follows kubernetes-sigs/dra-driver-nvidia-gpu
deployments/helm/dra-driver-nvidia-gpu/crds/resource.nvidia.com_computedomains.yaml (driver 25.12)."""

from __future__ import annotations

import argparse
import re
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from fakegpu.cli.compute_domain_controller_command import add_compute_domain_controller_parser
from tests.deploy.manifests import (
    APPLIED,
    CLUSTER_SCOPED,
    DEPLOY,
    KUBERNETES_VERSION,
    NAMESPACE,
    PART_OF,
    Obj,
    fakegpu_argv,
    find,
    load_docs,
    one,
    only_container,
    parse_cli,
    pod_spec,
    render_dir,
)

OVERLAY = "overlays/compute-domains"


def _version_schema(crd: Obj) -> Any:
    (version,) = crd["spec"]["versions"]
    return version


def test_every_rendered_object_passes_the_kubernetes_schema() -> None:
    objs = render_dir(OVERLAY)
    assert {o["kind"] for o in objs} == {
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
    }
    for obj in objs:
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']} fails the schema: {exc.message} at {exc.path}")


def test_labels_and_namespaces_follow_the_other_overlays() -> None:
    for obj in render_dir(OVERLAY):
        meta = obj["metadata"]
        assert meta["labels"][PART_OF[0]] == PART_OF[1], obj["metadata"]["name"]
        if obj["kind"] in CLUSTER_SCOPED or obj["kind"] == "CustomResourceDefinition":
            assert "namespace" not in meta
        else:
            assert meta["namespace"] == NAMESPACE


def test_no_object_is_shared_with_another_applied_directory() -> None:
    ours = {(o["kind"], o["metadata"]["name"]) for o in render_dir(OVERLAY)}
    for directory in APPLIED:
        if directory == OVERLAY:
            continue
        theirs = {(o["kind"], o["metadata"]["name"]) for o in render_dir(directory)}
        assert not ours & theirs, directory


def test_compute_domain_crd_identity_and_schema() -> None:
    crd = one(render_dir(OVERLAY), "CustomResourceDefinition", "computedomains.resource.nvidia.com")
    spec = crd["spec"]
    assert spec["group"] == "resource.nvidia.com"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "ComputeDomain",
        "listKind": "ComputeDomainList",
        "plural": "computedomains",
        "singular": "computedomain",
    }
    version = _version_schema(crd)
    assert (version["name"], version["served"], version["storage"]) == ("v1beta1", True, True)
    assert version["subresources"] == {"status": {}}
    assert "additionalPrinterColumns" not in version
    props = version["schema"]["openAPIV3Schema"]["properties"]
    cd_spec = props["spec"]
    assert cd_spec["required"] == ["channel"]
    assert cd_spec["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "A computeDomain.spec is immutable"}
    ]
    channel = cd_spec["properties"]["channel"]
    assert channel["required"] == ["resourceClaimTemplate"]
    assert channel["properties"]["resourceClaimTemplate"]["required"] == ["name"]
    mode = channel["properties"]["allocationMode"]
    assert (mode["enum"], mode["default"]) == (["All", "Single"], "Single")
    num = cd_spec["properties"]["numNodes"]
    assert (num["type"], num["default"], num["minimum"]) == ("integer", 0, 0)
    status = props["status"]
    assert status["required"] == ["status"]
    assert status["properties"]["status"]["enum"] == ["Ready", "NotReady"]
    nodes = status["properties"]["nodes"]
    assert (nodes["x-kubernetes-list-type"], nodes["x-kubernetes-list-map-keys"]) == ("map", ["name"])
    assert nodes["items"]["required"] == ["cliqueID", "ipAddress", "name"]
    assert nodes["items"]["properties"]["index"] == {
        "description": nodes["items"]["properties"]["index"]["description"],
        "type": "integer",
    }
    assert nodes["items"]["properties"]["status"]["enum"] == ["Ready", "NotReady"]


def test_clique_crd_lists_daemons_by_node_name() -> None:
    crd = one(render_dir(OVERLAY), "CustomResourceDefinition", "computedomaincliques.resource.nvidia.com")
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["kind"] == "ComputeDomainClique"
    version = _version_schema(crd)
    assert "subresources" not in version
    daemons = version["schema"]["openAPIV3Schema"]["properties"]["daemons"]
    assert (daemons["x-kubernetes-list-type"], daemons["x-kubernetes-list-map-keys"]) == ("map", ["nodeName"])
    assert daemons["items"]["required"] == ["cliqueID", "ipAddress", "nodeName"]


def test_deployment_runs_the_controller_with_its_account_and_namespace() -> None:
    objs = render_dir(OVERLAY)
    deployment = one(objs, "Deployment", "fakegpu-compute-domain-controller")
    spec = pod_spec(deployment)
    account = one(objs, "ServiceAccount", spec["serviceAccountName"])
    binding = one(objs, "ClusterRoleBinding", "fakegpu-compute-domain-controller")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    assert one(objs, "ClusterRole", binding["roleRef"]["name"])
    args = parse_cli(fakegpu_argv(only_container(deployment)))
    assert args.command == "compute-domain-controller"
    assert args.namespace == NAMESPACE


def test_the_docs_name_the_controllers_flags_and_its_probe() -> None:
    """README's commands row names every option of ``fakegpu compute-domain-controller``, and deploy/README.md's
    rack-scale section the health flag and port the Deployment serves its probes on."""
    sub = argparse.ArgumentParser().add_subparsers()
    add_compute_domain_controller_parser(sub)
    options = {o for a in sub.choices["compute-domain-controller"]._actions for o in a.option_strings}
    options -= {"-h", "--help"}
    readme = (DEPLOY.parent / "README.md").read_text()
    commands = readme[readme.index("## Commands") :]
    row = re.findall(r"^\| `fakegpu compute-domain-controller .*$", commands, re.M)[0]
    assert sorted(o for o in options if f"[{o} " not in row) == []
    args = parse_cli(
        fakegpu_argv(only_container(one(render_dir(OVERLAY), "Deployment", "fakegpu-compute-domain-controller")))
    )
    port = args.health_address.rsplit(":", 1)[1]
    readme = (DEPLOY / "README.md").read_text()
    rack_scale = readme[readme.index("## 6. Rack scale") : readme.index("## 7.")]
    assert f"`/readyz` on its `--health-address` (port {port})" in rack_scale


def test_crd_files_are_what_the_overlay_lists() -> None:
    files = sorted(p.name for p in (DEPLOY / OVERLAY).glob("*-crd.yaml"))
    rendered = find(render_dir(OVERLAY), "CustomResourceDefinition")
    assert len(files) == len(rendered) == 2
    for name in files:
        (doc,) = load_docs(DEPLOY / OVERLAY / name)
        assert doc["kind"] == "CustomResourceDefinition"
