"""Every overlay renders, every rendered object passes the 1.36 schema, the objects fit together, and each
object has one owner among the directories users apply."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from fakegpu.cli.node_options import cleanup_on_exit
from tests.deploy.manifests import (
    APPLIED,
    CLUSTER_SCOPED,
    DEPLOY,
    KUBERNETES_VERSION,
    NAMESPACE,
    OVERLAYS,
    PART_OF,
    SHARED_NAMESPACE,
    WORKLOAD_KINDS,
    Obj,
    all_rendered,
    fakegpu_argv,
    find,
    mounts_by_path,
    one,
    only_container,
    parse_cli,
    pod_spec,
    render,
    render_dir,
)


def _label(obj: Obj) -> str:
    return f"{obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


@pytest.mark.parametrize("directory", APPLIED)
def test_every_rendered_object_passes_the_kubernetes_schema(directory: str) -> None:
    objs = render_dir(directory)
    assert objs, f"deploy/{directory} renders nothing"
    for obj in objs:
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(
                f"{directory}: {_label(obj)} fails the {KUBERNETES_VERSION} schema: {exc.message} at {exc.path}"
            )


@pytest.mark.parametrize("directory", APPLIED)
def test_namespaces_and_common_labels(directory: str) -> None:
    objs = render_dir(directory)
    # Only deploy/base renders the namespace: `kubectl delete -k` of a face must not delete the others' home.
    if directory == SHARED_NAMESPACE:
        assert one(objs, "Namespace", NAMESPACE)
    else:
        assert find(objs, "Namespace") == [], f"deploy/{directory} renders a Namespace; deploy/base owns it"
    for obj in objs:
        meta = obj["metadata"]
        if obj["kind"] in CLUSTER_SCOPED:
            # kustomize's namespace transformer would put kinds it does not know (DeviceClass) into one.
            assert "namespace" not in meta, f"{_label(obj)} is cluster-scoped but names a namespace"
        else:
            assert meta.get("namespace") == NAMESPACE, f"{_label(obj)} is not in namespace {NAMESPACE}"
        assert meta.get("labels", {}).get(PART_OF[0]) == PART_OF[1], f"{_label(obj)} lacks the {PART_OF[0]} label"


def test_every_object_has_one_owner() -> None:
    """No two applied directories render the same object (kind, namespace, name): `kubectl delete -k` deletes
    all a directory renders, so a shared object would vanish from under the other directory's workload. Shared
    objects live in their own directory (deploy/base, deploy/overlays/deviceclasses). NVIDIA ships its
    DeviceClasses in one Helm release (NVIDIA/k8s-dra-driver-gpu, deployments/helm/nvidia-dra-driver-gpu), which
    owns them alone; helm uninstall of another release leaves them."""
    owners: dict[tuple[str, str, str], list[str]] = {}
    for directory, obj in all_rendered():
        key = (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        owners.setdefault(key, []).append(directory)
    shared = {key: dirs for key, dirs in owners.items() if len(dirs) > 1}
    assert shared == {}, f"objects rendered by more than one directory: {shared}"
    assert {directory for directory, _ in all_rendered()} == set(APPLIED)


def test_overlays_use_the_shared_namespace_and_device_classes() -> None:
    """The faces' namespaced objects live in deploy/base's namespace; the classes the DRA driver's and the
    virtual nodes' devices are claimed through exist once, in deploy/overlays/deviceclasses."""
    namespaces = {o["metadata"]["name"] for o in render_dir(SHARED_NAMESPACE) if o["kind"] == "Namespace"}
    for overlay in OVERLAYS:
        for obj in render(overlay):
            if obj["kind"] not in CLUSTER_SCOPED:
                assert obj["metadata"]["namespace"] in namespaces, _label(obj)
            assert obj["kind"] != "DeviceClass", (
                f"{overlay} renders {_label(obj)}; deploy/overlays/deviceclasses owns it"
            )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_workloads_reference_what_the_overlay_renders(overlay: str) -> None:
    objs = render(overlay)
    workloads = [o for o in objs if o["kind"] in WORKLOAD_KINDS]
    assert len(workloads) == 1, f"{overlay} should run exactly one workload"
    accounts = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in find(objs, "ServiceAccount")}
    config_maps = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in find(objs, "ConfigMap")}
    for workload in workloads:
        namespace = workload["metadata"]["namespace"]
        spec = pod_spec(workload)
        assert (namespace, spec.get("serviceAccountName")) in accounts, f"{_label(workload)}: service account"
        assert (
            workload["spec"]["selector"]["matchLabels"].items()
            <= workload["spec"]["template"]["metadata"]["labels"].items()
        ), f"{_label(workload)}: the selector does not match the pod template"
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for volume in volumes.values():
            if "configMap" in volume:
                assert (namespace, volume["configMap"]["name"]) in config_maps, (
                    f"{_label(workload)} mounts ConfigMap {volume['configMap']['name']}, which the overlay lacks"
                )
        for mount in only_container(workload).get("volumeMounts", []):
            assert mount["name"] in volumes, f"{_label(workload)} mounts undeclared volume {mount['name']}"
        for path, volume in mounts_by_path(workload).items():
            if "hostPath" in volume:
                # Sockets are registered with the kubelet by path: inside and outside must agree.
                assert volume["hostPath"]["path"] == path, f"{_label(workload)}: hostPath {path} moved"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_cluster_role_bindings_bind_rendered_roles_to_rendered_accounts(overlay: str) -> None:
    objs = render(overlay)
    roles = {o["metadata"]["name"] for o in find(objs, "ClusterRole")}
    accounts = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in find(objs, "ServiceAccount")}
    bindings = find(objs, "ClusterRoleBinding")
    assert bindings, f"{overlay} grants its service account nothing"
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "ClusterRole" and binding["roleRef"]["name"] in roles
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            assert (subject.get("namespace"), subject["name"]) in accounts, f"{_label(binding)}: {subject}"
    bound = {(s["namespace"], s["name"]) for b in bindings for s in b["subjects"]}
    users = {
        (w["metadata"]["namespace"], pod_spec(w)["serviceAccountName"]) for w in objs if w["kind"] in WORKLOAD_KINDS
    }
    assert users <= bound, f"{overlay}: a workload's service account has no role"


def test_device_plugin_daemonset_args_parse_and_point_at_its_mounts() -> None:
    ds = one(render("device-plugin"), "DaemonSet", "fakegpu-device-plugin")
    args = parse_cli(fakegpu_argv(only_container(ds)))
    assert args.command == "plugin"
    assert args.label_node, "--label-node: the GFD labels are what users select nodes by"
    mounts = mounts_by_path(ds)
    assert str(args.config_dir) in mounts and "configMap" in mounts[str(args.config_dir)]
    assert str(Path(args.kubelet_dir) / "device-plugins") in mounts
    assert "hostPath" in mounts[str(args.cdi_root)], "CDI specs must reach the node's container runtime"
    assert args.admin_socket is not None and str(args.admin_socket.parent) in mounts
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {"fakegpu.io/device-plugin": "true"}
    # A stop while the node still opts in is a restart in place: the labels stay for the next pod.
    env = {e["name"]: e.get("value") for e in only_container(ds).get("env", [])}
    policy = cleanup_on_exit(args, env)
    assert policy.mode == "unless-node-label" and {policy.key: policy.value} == spec["nodeSelector"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in spec["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]


def test_dra_daemonset_args_parse_and_point_at_its_mounts() -> None:
    ds = one(render("dra"), "DaemonSet", "fakegpu-dra")
    args = parse_cli(fakegpu_argv(only_container(ds)))
    assert args.command == "dra"
    mounts = mounts_by_path(ds)
    kubelet = Path(args.kubelet_dir)
    for path in (
        args.plugins_registry_dir or kubelet / "plugins_registry",
        args.plugins_dir or kubelet / "plugins",
        args.cdi_root,
    ):
        assert str(path) in mounts and "hostPath" in mounts[str(path)], f"{path} is not mounted from the host"
    assert args.admin_socket is not None and str(args.admin_socket.parent) in mounts
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {"fakegpu.io/dra": "true"}
    assert spec["priorityClassName"] == "system-node-critical"


def test_kwok_deployment_args_parse_and_avoid_kwok_nodes() -> None:
    deployment = one(render("kwok"), "Deployment", "fakegpu-virtual-nodes")
    assert deployment["spec"]["replicas"] == 1, "two controllers would fight over the same nodes"
    spec = pod_spec(deployment)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms and all(
        {"key": "type", "operator": "NotIn", "values": ["kwok"]} in t["matchExpressions"] for t in terms
    )
    for toleration in spec.get("tolerations", []):
        assert toleration.get("key") not in (None, "kwok.x-k8s.io/node"), f"tolerates KWOK nodes: {toleration}"
    args = parse_cli(fakegpu_argv(only_container(deployment)))
    assert args.command == "virtual-nodes"
    assert args.watch and not args.delete
    # deploy/README.md names the nodes and the teardown command after these arguments. Imported here: the
    # virtual-nodes command is younger than the other overlays' tests, which must not depend on it.
    node_name = importlib.import_module("fakegpu.virtual_nodes.names").node_name
    readme = (DEPLOY / "README.md").read_text()
    first, last = node_name(args.name_prefix, 0), node_name(args.name_prefix, args.count - 1)
    assert re.search(rf"`{re.escape(first)}` …\s+`{re.escape(last)}`", readme), f"README should name {first} … {last}"
    assert f"fakegpu virtual-nodes --delete --name-prefix {args.name_prefix}\n" in readme


@pytest.mark.parametrize(
    ("overlay", "kind", "name"),
    [
        ("device-plugin", "DaemonSet", "fakegpu-device-plugin"),
        ("dra", "DaemonSet", "fakegpu-dra"),
        ("compute-domains", "Deployment", "fakegpu-compute-domain-controller"),
    ],
)
def test_daemons_probe_the_health_endpoint_they_serve(overlay: str, kind: str, name: str) -> None:
    """Readiness is /readyz, liveness /healthz, on the port --health-address listens on (not loopback: the
    kubelet probes the pod IP), declared as a named container port. fakegpu's own: NVIDIA's device plugin
    DaemonSet has no probe (NVIDIA/k8s-device-plugin deployments/static/nvidia-device-plugin.yml) and its DRA
    driver probes a gRPC health service (NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/health.go)."""
    health = importlib.import_module("fakegpu.telemetry.health_endpoint")
    container = only_container(one(render(overlay), kind, name))
    address = health.health_address(parse_cli(fakegpu_argv(container)))
    assert address is not None, f"{name} does not serve --health-address"
    assert address.host in ("0.0.0.0", "::"), f"{name}: the kubelet cannot reach {address}"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("readinessProbe", health.READYZ_PATH), ("livenessProbe", health.HEALTHZ_PATH)):
        get = container[probe]["httpGet"]
        assert get["path"] == path, f"{name}: {probe} asks {get['path']}"
        assert ports[get["port"]] == address.port, f"{name}: {probe} probes a port the daemon does not serve on"
    # Liveness must outlast a slow moment; readiness may be quick, it restarts nothing.
    live, ready = container["livenessProbe"], container["readinessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] >= 30
    assert ready["periodSeconds"] * ready["failureThreshold"] <= live["periodSeconds"] * live["failureThreshold"]
