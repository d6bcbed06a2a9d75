"""deploy/examples/: every manifest passes the 1.36 schema, asks for what the overlays advertise, and the DRA
claims select devices the driver publishes and prepare with the environment deploy/README.md shows."""

from __future__ import annotations

import re
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from fakegpu.cli.inventory_options import inventory_inputs
from fakegpu.cli.slice_commands import dra_feature_gates, slice_options
from fakegpu.dra.device_map import published_devices
from fakegpu.dra.prepare_plan import prepare_plan
from fakegpu.dra.resource_slices import build_slice_specs, spec_devices
from fakegpu.sharing.inputs import load_inventory, load_node
from fakegpu.sharing.node import Node
from tests.deploy.manifests import (
    EXAMPLES,
    KUBERNETES_VERSION,
    Obj,
    container_env,
    example_files,
    example_objects,
    fakegpu_argv,
    find,
    load_docs,
    one,
    only_container,
    parse_cli,
    pod_spec,
    render,
    resource_counts,
    write_config_dir,
)

DP_NODE = "fakegpu-worker"
DRA_NODE = "fakegpu-worker2"
DRIVER = "gpu.nvidia.com"
CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")
_TERM = re.compile(
    r"^(?:device\.driver|device\.attributes\['(?P<domain>[^']+)'\]\.(?P<attr>\w+))\s*==\s*'(?P<value>[^']*)'$"
)


def pods_and_workloads(objs: list[Obj]) -> list[Obj]:
    return [o for o in objs if o["kind"] in ("Pod", "Deployment", "DaemonSet")]


def replicas(obj: Obj) -> int:
    return int(obj["spec"].get("replicas", 1)) if obj["kind"] == "Deployment" else 1


def targets_kwok(obj: Obj) -> bool:
    return bool(pod_spec(obj).get("nodeSelector", {}).get("type") == "kwok")


@pytest.mark.parametrize("path", example_files(), ids=lambda p: str(p.relative_to(p.parents[1])))
def test_example_passes_the_kubernetes_schema(path: Path) -> None:
    docs = load_docs(path)
    assert docs
    for obj in docs:
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{path.name}: {obj['kind']} {obj['metadata']['name']}: {exc.message} at {exc.path}")


# --- device plugin examples ------------------------------------------------------------------------------


def device_plugin_offers(tmp_path: Path) -> dict[str, dict[str, int]]:
    """config name -> resources the device-plugin DaemonSet advertises on DP_NODE with that config."""
    ds = one(render("device-plugin"), "DaemonSet", "fakegpu-device-plugin")
    container = only_container(ds)
    args = parse_cli(fakegpu_argv(container))
    env = container_env(container, DP_NODE)
    data = one(render("device-plugin"), "ConfigMap", "fakegpu-device-plugin-configs")["data"]
    directory = write_config_dir(data, tmp_path / "configs")
    base = inventory_inputs(args, env)
    # Each config file as the node label would select it (test_nvidia_configs checks the selection itself).
    return {name: resource_counts(load_inventory(replace(base, config_file=str(directory / name)))) for name in data}


def test_device_plugin_examples_fit_a_config_of_the_daemonset(tmp_path: Path) -> None:
    offers = device_plugin_offers(tmp_path)
    checked = 0
    for obj in pods_and_workloads(example_objects()):
        if targets_kwok(obj):
            continue
        for container in pod_spec(obj)["containers"]:
            wanted = {
                k: int(v) for k, v in container.get("resources", {}).get("limits", {}).items() if "nvidia.com/" in k
            }
            if not wanted:
                continue
            checked += 1
            fits = [
                name
                for name, offer in offers.items()
                if all(offer.get(res, 0) >= count * replicas(obj) for res, count in wanted.items())
            ]
            assert fits, f"{obj['kind']} {obj['metadata']['name']} asks for {wanted} x{replicas(obj)}: no config fits"
    assert checked >= 2


def test_time_slicing_example_needs_sharing(tmp_path: Path) -> None:
    """Five pods on two GPUs: they all run only because time-slicing-4 advertises 8."""
    offers = device_plugin_offers(tmp_path)
    deployment = one(load_docs(EXAMPLES / "time-slicing.yaml"), "Deployment")
    assert offers["default"]["nvidia.com/gpu"] < replicas(deployment) <= offers["time-slicing-4"]["nvidia.com/gpu"]


def test_kwok_example_matches_the_virtual_nodes_placement() -> None:
    (deployment,) = [o for o in pods_and_workloads(example_objects()) if targets_kwok(o)]
    tolerations = pod_spec(deployment)["tolerations"]
    assert any(t["key"] == "kwok.x-k8s.io/node" and t["operator"] == "Exists" for t in tolerations)
    controller = one(render("kwok"), "Deployment", "fakegpu-virtual-nodes")
    terms = pod_spec(controller)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    # The controller avoids exactly the label the example pods select.
    assert {"key": "type", "operator": "NotIn", "values": ["kwok"]} in terms["nodeSelectorTerms"][0]["matchExpressions"]


# --- DRA examples -----------------------------------------------------------------------------------------


def dra_node() -> tuple[Node, Any]:
    """The DRA node as the overlay's DaemonSet describes it; ``args.mig_mode`` and ``args.gates`` resolved as
    ``fakegpu dra`` resolves them (--mig-mode, --feature-gates / FEATURE_GATES, NVIDIA's start-up checks)."""
    ds = one(render("dra"), "DaemonSet", "fakegpu-dra")
    container = only_container(ds)
    args = parse_cli(fakegpu_argv(container))
    env = container_env(container, DRA_NODE)
    args.gates, args.mig_mode = dra_feature_gates(args, env)
    node = load_node(inventory_inputs(args, env))
    return node, args


def published(node: Node, args: Any) -> list[Obj]:
    options = slice_options(args, 36)
    return [d for spec in build_slice_specs(node, options) for d in spec_devices(spec)]


def selector_matches(expression: str, device: Obj, strict_attributes: bool) -> bool:
    """Evaluate the CEL subset the manifests use: ``&&`` of ``device.driver == '...'`` and
    ``device.attributes['<domain>'].<name> == '<string>'``. A missing attribute is a CEL runtime error,
    which aborts allocation: with ``strict_attributes`` the test fails on it."""
    for term in expression.split("&&"):
        m = _TERM.match(term.strip())
        assert m, f"selector term {term.strip()!r} is outside the CEL subset this test evaluates"
        if m.group("domain") is None:
            ok = m.group("value") == DRIVER
        else:
            domain, attr = m.group("domain"), m.group("attr")
            key = attr if domain == DRIVER else f"{domain}/{attr}"
            value = device["attributes"].get(key)
            if value is None:
                assert not strict_attributes, f"device {device['name']} has no attribute {key}: CEL would fail"
                return False
            assert set(value) == {"string"}, f"{key} is not a string attribute: compare it differently"
            ok = value["string"] == m.group("value")
        if not ok:
            return False
    return True


def claims() -> list[tuple[str, Obj]]:
    out = []
    for obj in example_objects():
        if obj["kind"] == "ResourceClaim":
            out.append((obj["metadata"]["name"], obj["spec"]))
        elif obj["kind"] == "ResourceClaimTemplate":
            out.append((obj["metadata"]["name"], obj["spec"]["spec"]))
    return out


def test_there_are_mig_and_mps_claims() -> None:
    classes = {r["exactly"]["deviceClassName"] for _, spec in claims() for r in spec["devices"]["requests"]}
    assert classes == {"gpu.nvidia.com", "mig.nvidia.com"}
    strategies = {
        c["opaque"]["parameters"]["sharing"]["strategy"]
        for _, spec in claims()
        for c in spec["devices"].get("config", [])
    }
    assert "MPS" in strategies


@pytest.mark.parametrize("name", [n for n, _ in claims()])
def test_claim_selects_published_devices_and_prepares(name: str) -> None:
    spec = dict(claims())[name]
    classes = {c["metadata"]["name"]: c for c in find(render("deviceclasses"), "DeviceClass")}
    node, args = dra_node()
    devices = published(node, args)
    results = []
    for request in spec["devices"]["requests"]:
        exact = request["exactly"]
        device_class = classes.get(exact["deviceClassName"])
        assert device_class is not None, (
            f"{name}: class {exact['deviceClassName']} is not in deploy/overlays/deviceclasses"
        )
        candidates = [
            d
            for d in devices
            if all(selector_matches(s["cel"]["expression"], d, False) for s in device_class["spec"]["selectors"])
        ]
        chosen = [
            d
            for d in candidates
            if all(selector_matches(s["cel"]["expression"], d, True) for s in exact.get("selectors", []))
        ]
        count = exact.get("count", 1)
        assert len(chosen) >= count, f"{name}: request {request['name']} matches {len(chosen)} device(s)"
        # The scheduler allocates first fit in publishing order (slices sorted by name).
        results += [
            {"request": request["name"], "driver": DRIVER, "pool": node.name, "device": d["name"]}
            for d in chosen[:count]
        ]
    claim = {
        "metadata": {"namespace": "default", "name": name, "uid": str(uuid.uuid4())},
        "status": {
            "allocation": {
                "devices": {
                    "results": results,
                    "config": [{"source": "FromClaim", **c} for c in spec["devices"].get("config", [])],
                }
            }
        },
    }
    # With the overlay's feature gates: a sharing strategy whose gate the overlay lacks fails here, as it
    # would in NodePrepareResources (kubernetes-sigs/dra-driver-nvidia-gpu api/nvidia.com/resource/v1beta1/sharing.go).
    preparation = prepare_plan(claim, DRIVER, node.name, published_devices(node, args.mig_mode), args.gates)
    assert [r.device for r in preparation.results] == [r["device"] for r in results]
    by_name = published_devices(node, args.mig_mode)
    for result in preparation.results:
        env = dict(e.split("=", 1) for e in result.env)
        assert env["FAKEGPU_VISIBLE_DEVICES"] == by_name[result.device].visible_uuid(node.name)
        for config in spec["devices"].get("config", []):
            sharing = config["opaque"]["parameters"].get("sharing", {})
            if sharing.get("strategy") == "MPS" and result.request in config["requests"]:
                mps = sharing["mpsConfig"]
                assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == str(mps["defaultActiveThreadPercentage"])
                assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"].startswith(env["FAKEGPU_VISIBLE_DEVICES"] + "=")


def test_pods_reference_claims_that_exist() -> None:
    objs = example_objects()
    names = {kind: {o["metadata"]["name"] for o in find(objs, kind)} for kind in CLAIM_KINDS}
    pods = [o for o in pods_and_workloads(objs) if pod_spec(o).get("resourceClaims")]
    assert pods
    for pod in pods:
        spec = pod_spec(pod)
        declared = set()
        for ref in spec["resourceClaims"]:
            declared.add(ref["name"])
            if "resourceClaimName" in ref:
                assert ref["resourceClaimName"] in names["ResourceClaim"], f"{pod['metadata']['name']}: {ref}"
            else:
                assert ref["resourceClaimTemplateName"] in names["ResourceClaimTemplate"], f"{pod['metadata']['name']}"
        for container in spec["containers"]:
            for claim in container.get("resources", {}).get("claims", []):
                assert claim["name"] in declared, f"{pod['metadata']['name']}/{container['name']}: {claim}"
