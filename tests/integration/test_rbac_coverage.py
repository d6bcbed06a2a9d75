"""The RBAC in ``deploy/`` covers every API call each component makes, and grants nothing it does not use.

The calls are not a hand-kept list. Each component runs its real code paths against the in-process API
server, which records every request; the requests become RBAC attributes (verb, API group, resource,
subresource) exactly as the API server's authorizer sees them. A static pass over the source then makes
sure every lightkube call site in the component was among the recorded ones, so a new call that no run
exercised fails here instead of in a cluster with ``forbidden``.

The ComputeDomain controller runs with its Deployment's arguments as its ServiceAccount, under the rendered
RBAC: the API server refuses it (403) anything the rules do not grant, as a real one does, and only its own
requests are counted, not those of the compute-domain plugin the test runs beside it to bring a domain to
Ready.
"""

from __future__ import annotations

import ast
import asyncio
import copy
import functools
import importlib
import io
import socket
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fakegpu.cli.cleanup_command import run_cleanup
from fakegpu.cli.compute_domain_controller_command import serve_compute_domain_controller
from fakegpu.cli.main import full_parser as cli_parser
from fakegpu.cli.virtual_nodes_command import run_virtual_nodes
from fakegpu.control.client import admin_call
from fakegpu.dra.compute_domain.kubelet_plugin import ComputeDomainSettings
from fakegpu.dra.compute_domain.resources import ComputeDomain
from fakegpu.dra.daemon import DraDriver, DraSettings
from fakegpu.fakeplugin.daemon import NodeSettings, run_plugin_daemon
from fakegpu.fakeplugin.node_sync import ConfigSelection
from fakegpu.kube.pod_annotations import PodAnnotations
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.gpu_faults import GpuFault
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.telemetry.http_endpoint import ListenAddress
from fakegpu.telemetry.telemetry_settings import TelemetrySettings
from tests.apiserver import FakeApiServer, RequestRecord, serving
from tests.apiserver.authorization import Attributes
from tests.claim_builders import allocated_claim, channel_claim, compute_domain
from tests.daemon_tasks import stop_and_wait
from tests.deploy.manifests import fakegpu_argv, one, only_container, render
from tests.dra_kubelet_client import prepare, unprepare
from tests.eventually import eventually
from tests.http_get import http_get

ROOT = Path(__file__).resolve().parents[2]
NODE = "node-a"

#: lightkube client method -> the verb the API server authorizes for it
CLIENT_VERBS = {
    "get": "get",
    "list": "list",
    "watch": "watch",
    "create": "create",
    "replace": "update",
    "patch": "patch",
    "apply": "patch",
    "delete": "delete",
    "deletecollection": "deletecollection",
}
#: grants made on purpose for calls these runs cannot make, each with its reason
RESERVED = {
    ("dra", "resource.k8s.io", "resourceclaims/driver", "associated-node:update"): (
        "1.36 DRAResourceClaimGranularStatusAuthorization: a driver writing status.devices needs it"
    ),
    ("dra", "resource.k8s.io", "resourceclaims/driver", "associated-node:patch"): (
        "1.36 DRAResourceClaimGranularStatusAuthorization: a driver writing status.devices needs it"
    ),
}


@dataclass(frozen=True, order=True)
class Access:
    verb: str
    group: str
    resource: str  # "nodes", or "nodes/status" for a subresource

    def __str__(self) -> str:
        return f"{self.verb} {self.resource}.{self.group or 'core'}"


def request_access(request: RequestRecord) -> Access | None:
    """The authorizer's view of one request; None for discovery and other non-resource URLs."""
    parts = [p for p in request.path.split("/") if p]
    if parts[:1] == ["api"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"]:
        group, rest = parts[1] if len(parts) > 1 else "", parts[3:]
    else:
        return None
    if len(rest) >= 2 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return None
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    named = len(rest) > 1
    watch = request.query.get("watch") in ("true", "1")
    verb = {
        "GET": "watch" if watch else ("get" if named else "list"),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
    }[request.method]
    return Access(verb, group, resource)


# --- what the source calls ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CallSite:
    where: str
    verb: str
    resource: tuple[str, str] | None  # (group, plural) when the first argument names a lightkube class

    def __str__(self) -> str:
        return f"{self.where}: {self.verb} {'/'.join(self.resource) if self.resource else '(resource from a variable)'}"


def _lightkube_classes(tree: ast.Module) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lightkube.resources"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                found[alias.asname or alias.name] = getattr(module, alias.name)
    return found


def client_call_sites(packages: Iterable[str]) -> list[CallSite]:
    """Every ``<...>client.<verb>(...)`` call of lightkube's client in the given packages or files."""
    sites = []
    for package in packages:
        base = ROOT / package
        for path in sorted(base.rglob("*.py")) if base.is_dir() else [base]:
            tree = ast.parse(path.read_text(), filename=str(path))
            classes = _lightkube_classes(tree)
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    continue
                if node.func.attr not in CLIENT_VERBS or not ast.unparse(node.func.value).endswith("client"):
                    continue
                resource = None
                if node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in classes:
                    info = classes[node.args[0].id]._api_info
                    resource = (info.resource.group, info.plural + (f"/{info.action}" if info.action else ""))
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                sites.append(CallSite(where, CLIENT_VERBS[node.func.attr], resource))
    return sites


# --- what deploy/ grants -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str]

    def allows(self, access: Access) -> bool:
        return (
            (access.group in self.groups or "*" in self.groups)
            and (access.resource in self.resources or "*" in self.resources)
            and (access.verb in self.verbs or "*" in self.verbs)
        )


def granted_rules(objects: list[dict[str, Any]]) -> list[Rule]:
    """The rules bound to the ServiceAccount the overlay's workload runs as."""
    workloads = [o for o in objects if o["kind"] in ("DaemonSet", "Deployment")]
    assert len(workloads) == 1, f"expected one workload, found {[o['metadata']['name'] for o in workloads]}"
    (workload,) = workloads
    namespace = workload["metadata"].get("namespace", "default")
    account = workload["spec"]["template"]["spec"].get("serviceAccountName", "default")
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"] in ("ClusterRole", "Role")}
    rules = []
    for binding in (o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        subjects = binding.get("subjects") or []
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s.get("namespace", namespace) == namespace
            for s in subjects
        ):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        rules += [
            Rule(
                frozenset(r.get("apiGroups", [])),
                frozenset(r.get("resources", [])),
                frozenset(r.get("verbs", [])),
                frozenset(r.get("resourceNames", [])),
            )
            for r in role.get("rules", [])
        ]
    assert rules, f"no role is bound to ServiceAccount {namespace}/{account}"
    return rules


def account_user(objects: list[dict[str, Any]]) -> str:
    """The user the API server sees for the ServiceAccount the overlay's workload runs as."""
    (workload,) = [o for o in objects if o["kind"] in ("DaemonSet", "Deployment")]
    namespace = workload["metadata"].get("namespace", "default")
    account = workload["spec"]["template"]["spec"].get("serviceAccountName", "default")
    return f"system:serviceaccount:{namespace}:{account}"


def enforced(rules: list[Rule]) -> Callable[[Attributes], bool]:
    """The rules as the API server's RBAC authorizer applies them (``resourceNames`` included)."""

    def allows(request: Attributes) -> bool:
        access = Access(request.verb, request.group, request.resource)
        return any(rule.allows(access) and (not rule.names or request.name in rule.names) for rule in rules)

    return allows


def grants(rules: list[Rule]) -> set[Access]:
    return {Access(v, g, r) for rule in rules for g in rule.groups for r in rule.resources for v in rule.verbs}


# --- running each component ----------------------------------------------------------------------------


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    """With NVIDIA's CRDs, for ``fakegpu dra --compute-domains`` (``exercise_compute_domains``), and NFD's, for
    the device plugin's NodeFeature (``exercise_device_plugin``)."""
    with serving(NODE, nvidia_crds=True, nfd_crds=True, strict=False) as server:
        yield server


async def exercise_device_plugin(apiserver: FakeApiServer, root: Path) -> None:
    """``fakegpu plugin --label-node --config-dir``: read the node, follow it, label it, switch configs, then
    to GFD's NodeFeature output (create, update, and delete on exit)."""

    configs = root / "configs"
    configs.mkdir()
    (configs / "default").write_text("version: v1\n")
    (configs / "ts").write_text(
        "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"
    )
    (configs / "nfd").write_text("version: v1\nflags:\n  useNodeFeatureAPI: true\n")
    (configs / "nfd-ts").write_text(
        "version: v1\nflags:\n  useNodeFeatureAPI: true\n"
        "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"
    )
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    stop = asyncio.Event()
    settings = NodeSettings(
        label_node=True,
        selection=ConfigSelection(configs),
        kubeconfig=str(apiserver.kubeconfig(root / "kubeconfig")),
        resync_interval=0.2,
        pod_name="train",
    )
    inputs = InventoryInputs(node_name=NODE, gpus=("2xa100-40gb",))
    apiserver.create_direct(_pod("train"))
    dcgm = ListenAddress("127.0.0.1", _free_port())
    admin = root / "plugin-admin.sock"
    task = asyncio.create_task(
        run_plugin_daemon(
            inputs,
            KubeletPaths(root / "kubelet"),
            stop=stop,
            node=settings,
            telemetry=TelemetrySettings(dcgm_address=dcgm),
            admin_socket=admin,
        )
    )
    try:
        await kubelet.wait_for(lambda: kubelet.allocatable().get("nvidia.com/gpu") == 2, 10.0, "devices")
        # The fake dcgm-exporter reads the annotations of the pods holding GPUs.
        assert (await kubelet.run_pod("uid-train", {"c": {"nvidia.com/gpu": 1}}, name="train")).admitted
        status, _, body = await http_get(f"http://{dcgm.host}:{dcgm.port}/metrics")
        assert status == 200 and 'pod="train"' in body
        node = apiserver.get_object("nodes", NODE)
        assert node is not None
        node["metadata"]["labels"]["nvidia.com/device-plugin.config"] = "ts"
        apiserver.update_direct(node)
        await kubelet.wait_for(lambda: kubelet.allocatable().get("nvidia.com/gpu") == 4, 5.0, "shared")
        await eventually(
            lambda: (
                (apiserver.get_object("nodes", NODE) or {})["metadata"]["labels"].get("nvidia.com/gpu.replicas") == "2"
            ),
            "labels",
        )
        for config, replicas in (("nfd", "1"), ("nfd-ts", "2")):
            node = apiserver.get_object("nodes", NODE)
            assert node is not None
            node["metadata"]["labels"]["nvidia.com/device-plugin.config"] = config
            apiserver.update_direct(node)
            await eventually(_replicas_are(apiserver, replicas), f"NodeFeature of {config}")
        # A GPU fault is an Event on the Node (create), the same one again counted on it (patch).
        await admin_call(admin, "xid", target="0", xid=48)
        await eventually(lambda: apiserver.count("create", "events") == 1, "the fault's Event")
        await admin_call(admin, "xid", target="0", xid=48)
        await eventually(lambda: apiserver.count("patch", "events") == 1, "the repeat counted")
    finally:
        try:
            await stop_and_wait(stop, task)
        finally:
            await kubelet.stop()
    assert apiserver.objects("nodefeatures") == [], "the NodeFeature stayed after the stop"


def _replicas_are(apiserver: FakeApiServer, replicas: str) -> Callable[[], bool]:
    """Whether the NodeFeature's labels say ``replicas``."""

    def check() -> bool:
        found = apiserver.objects("nodefeatures")
        return bool(found) and found[0]["spec"]["labels"].get("nvidia.com/gpu.replicas") == replicas

    return check


async def exercise_dra(apiserver: FakeApiServer, root: Path) -> None:
    """``fakegpu dra``: discover, publish, prepare and unprepare a claim, re-create a deleted slice, shrink."""

    inputs = InventoryInputs(node_name=NODE, gpus=("2xh100-80gb",))
    live = LiveInventory(load_inventory(inputs))
    driver = DraDriver(
        live,
        KubeletPaths(root / "kubelet"),
        DraSettings(cdi_root=root / "cdi", resync_interval=0.2, mig_mode="dynamic"),
        apiserver.client,
    )
    await driver.start()
    try:
        await driver.wait_published()
        claim = apiserver.create_direct(allocated_claim("c", NODE))
        uid = claim["metadata"]["uid"]
        await prepare(driver.plugin.dra_socket, [("default", "c", uid)])
        await unprepare(driver.plugin.dra_socket, [("default", "c", uid)])
        published = apiserver.objects("resourceslices")
        apiserver.delete_direct("resourceslices", published[0]["metadata"]["name"])
        await eventually(lambda: len(apiserver.objects("resourceslices")) == len(published), "slice re-created")
        # A smaller inventory republishes in fewer slices and deletes the stale ones.
        before = len(apiserver.objects("resourceslices"))
        live.replace(load_inventory(InventoryInputs(node_name=NODE, gpus=("1xh100-80gb",))))
        await eventually(lambda: 0 < len(apiserver.objects("resourceslices")) < before, "republished")
        assert await driver.publisher.delete_all() > 0
        # A GPU fault is an Event on the Node (create), the same one again counted on it (patch).
        created = apiserver.count("create", "events")
        live.strike_gpu("0", GpuFault(kind="ecc-correctable", count=10))
        await eventually(lambda: apiserver.count("create", "events") == created + 1, "the fault's Event")
        live.strike_gpu("0", GpuFault(kind="ecc-correctable", count=10))
        await eventually(lambda: apiserver.count("patch", "events") == 1, "the fault's Event, counted twice")
        # With --dcgm-address, each scrape looks up the annotations of the pods holding prepared devices.
        annotations = PodAnnotations(apiserver.client)
        apiserver.create_direct(_pod("user"))
        await annotations.prefetch({("default", "user")})
        assert annotations("default", "user") == {"fakegpu.io/gpu-utilization": "50"}
        await annotations.close()
    finally:
        await driver.stop()
    await exercise_compute_domains(apiserver, root)


async def exercise_compute_domains(apiserver: FakeApiServer, root: Path) -> None:
    """``fakegpu dra --compute-domains`` on a node of an NVLink clique (the emulated daemon writes its
    ComputeDomainClique) and on one without (it writes the domain's status), each preparing a channel claim
    until the node is Ready and unpreparing it (the node label set and cleared)."""
    domain = apiserver.create_direct(compute_domain("cd"))["metadata"]["uid"]
    fabric = (
        "version: v1\nfabric: {clusterUUID: 1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10, cliqueID: 1}\ngpus: [{model: b200}]\n"
    )
    plain = "version: v1\ngpus: [{model: h100-80gb}]\n"
    for i, node_spec in enumerate((fabric, plain)):
        await _compute_domain_round(apiserver, root, i, node_spec, domain)


async def _compute_domain_round(apiserver: FakeApiServer, root: Path, i: int, node_spec: str, domain: str) -> None:
    spec = root / f"cd-node-{i}.yaml"
    spec.write_text(node_spec)
    live = LiveInventory(load_inventory(InventoryInputs(node_name=NODE, node_spec=str(spec))))
    settings = DraSettings(cdi_root=root / "cdi", compute_domains=ComputeDomainSettings(start_delay=0.0))
    driver = DraDriver(live, KubeletPaths(root / f"kubelet-cd-{i}"), settings, apiserver.client)
    plugin = driver.compute_domains
    assert plugin is not None
    await driver.start()
    try:
        await plugin.wait_published()
        claim = apiserver.create_direct(channel_claim(f"wl-{i}", NODE, domain))
        ref = ("default", f"wl-{i}", claim["metadata"]["uid"])

        async def ready() -> bool:
            return (await prepare(plugin.plugin.dra_socket, [ref])).claims[ref[2]].error == ""

        await eventually(ready, "channel claim prepared")
        await unprepare(plugin.plugin.dra_socket, [ref])
        await eventually(lambda: plugin.daemon.joined is None, "the emulated daemon left the domain")
    finally:
        await driver.stop()


ACCOUNT_TOKEN = "component-service-account"
"""The bearer token of the component that runs as its ServiceAccount (``Component.as_account``)."""
CONTROLLER_NAMESPACE = "fakegpu"


def controller_argv(apiserver: FakeApiServer, root: Path) -> list[str]:
    """The Deployment's own command line, with its ServiceAccount's token in a kubeconfig (as in the pod), its
    probes on a free loopback port (the pod's 0.0.0.0:8081 is the host's here) and a quicker status sync."""
    (deployment,) = [o for o in render("compute-domains") if o["kind"] == "Deployment"]
    argv = fakegpu_argv(only_container(deployment))
    argv[argv.index("--health-address") + 1] = f"127.0.0.1:{_free_port()}"
    kubeconfig = apiserver.kubeconfig(root / "controller-kubeconfig", token=ACCOUNT_TOKEN)
    return [*argv, "--kubeconfig", str(kubeconfig), "--status-interval", "0.1"]


async def exercise_compute_domain_controller(apiserver: FakeApiServer, root: Path) -> None:
    """``fakegpu compute-domain-controller`` run with the Deployment's arguments, as its ServiceAccount: learn
    the resource.k8s.io version, take a ComputeDomain to Ready (the compute-domain plugin of a node on an
    NVLink clique, unrestricted, plays the node's IMEX daemon once a channel claim is prepared) with the
    controller's /readyz answering 200, then delete it while the node still holds it: the templates, the
    node's label and the clique go, then the finalizer."""
    spec = root / "fabric-node.yaml"
    spec.write_text(
        "version: v1\nfabric: {clusterUUID: 1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10, cliqueID: 1}\ngpus: [{model: b200}]\n"
    )
    live = LiveInventory(load_inventory(InventoryInputs(node_name=NODE, node_spec=str(spec))))
    plugin_settings = ComputeDomainSettings(namespace=CONTROLLER_NAMESPACE, start_delay=0.0)
    driver = DraDriver(
        live,
        KubeletPaths(root / "kubelet"),
        DraSettings(cdi_root=root / "cdi", compute_domains=plugin_settings),
        apiserver.client,
    )
    plugin = driver.compute_domains
    assert plugin is not None
    args = cli_parser().parse_args(controller_argv(apiserver, root))
    assert args.namespace == CONTROLLER_NAMESPACE
    await driver.start()
    stop = asyncio.Event()
    controller = asyncio.create_task(serve_compute_domain_controller(args, stop))
    try:
        await plugin.wait_published()
        body = compute_domain("cd")
        body["spec"]["numNodes"] = 1
        uid = apiserver.create_direct(body)["metadata"]["uid"]

        def domain_status() -> str | None:
            assert apiserver.forbidden == [], "the controller's ServiceAccount was refused"
            return ((apiserver.get_object("computedomains", "cd", "default") or {}).get("status") or {}).get("status")

        await eventually(
            lambda: domain_status() == "NotReady", "the domain taken up, NotReady", 10.0, assertions_mean_not_yet=False
        )
        claim = apiserver.create_direct(channel_claim("wl", NODE, uid))
        ref = ("default", "wl", claim["metadata"]["uid"])

        async def prepared() -> bool:
            return (await prepare(plugin.plugin.dra_socket, [ref])).claims[ref[2]].error == ""

        await eventually(prepared, "the channel claim prepared")
        await eventually(lambda: domain_status() == "Ready", "the domain Ready", 10.0, assertions_mean_not_yet=False)
        status, _, answer = await http_get(f"http://{args.health_address}/readyz")
        assert (status, answer) == (200, "ok\n"), "the Deployment's readiness probe fails"
        admin = apiserver.client()  # as the user deleting the domain: the API server keeps it for the finalizer
        try:
            await admin.delete(ComputeDomain, "cd", namespace="default")
        finally:
            await admin.close()
        await eventually(
            lambda: apiserver.get_object("computedomains", "cd", "default") is None, "the domain cleaned up", 10.0
        )
        assert apiserver.objects("resourceclaimtemplates") == apiserver.objects("computedomaincliques") == []
        labels = (apiserver.get_object("nodes", NODE) or {})["metadata"]["labels"]
        assert "resource.nvidia.com/computeDomain" not in labels
    finally:
        try:
            assert await stop_and_wait(stop, controller) == [0]
        finally:
            await driver.stop()


async def exercise_virtual_nodes(apiserver: FakeApiServer, root: Path) -> None:
    """``fakegpu virtual-nodes``: bring up (creating and adopting, in the dra-extended mode so the DeviceClasses
    are ensured: one of ours that drifted is replaced), watch and repair, then ``--delete`` (a leftover slice
    whose node is gone is deleted by collection)."""
    apiserver.create_direct(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com", "labels": {"fakegpu.io/virtual-node": "true"}},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
        }
    )
    apiserver.create_direct(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "kwok-gpu-0001", "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "10"}},
        }
    )
    client = apiserver.client()
    common = [
        "virtual-nodes",
        "--gpu-mode",
        "dra-extended",
        "--count",
        "3",
        "--name-prefix",
        "kwok-gpu-",
        "--gpus",
        "1xh100-80gb",
    ]
    try:
        assert await run_virtual_nodes(cli_parser().parse_args(common), client=client, out=io.StringIO()) == 0
        # Someone changes the plan's capacity: a re-run with other GPUs rewrites labels, status and slices.
        stop = asyncio.Event()
        out = io.StringIO()
        args = cli_parser().parse_args([*common[:-1], "2xh100-80gb", "--watch", "--resync-interval", "0.3"])
        task = asyncio.create_task(run_virtual_nodes(args, client=client, stop=stop, out=out, err=out))
        await eventually(lambda: apiserver.open_watches >= 2 or task.done(), "watching")
        gone = apiserver.objects("resourceslices")[0]["metadata"]["name"]
        apiserver.delete_direct("resourceslices", gone)
        await eventually(lambda: len(apiserver.objects("resourceslices")) == 3, "slice recreated")
        apiserver.delete_direct("nodes", "kwok-gpu-0000")
        await eventually(lambda: len(apiserver.objects("resourceslices")) == 2, "slices of a deleted node removed")
        stop.set()
        assert await asyncio.wait_for(task, 5.0) == 0, out.getvalue()
        leftover = copy.deepcopy(apiserver.objects("resourceslices")[0])
        leftover["metadata"] = {
            "name": "kwok-gpu-gone-slice",
            "labels": {"fakegpu.io/virtual-node": "true", "fakegpu.io/virtual-node-prefix": "kwok-gpu"},
        }
        leftover["spec"]["nodeName"] = leftover["spec"]["pool"]["name"] = "kwok-gpu-gone"
        apiserver.create_direct(leftover)
        # A server that refuses collection deletes of nodes (405) gets them one by one.
        apiserver.fail_next("deletecollection", "nodes", 405)
        args = cli_parser().parse_args(["virtual-nodes", "--name-prefix", "kwok-gpu-", "--delete"])
        assert await run_virtual_nodes(args, client=client, out=io.StringIO()) == 0
        await exercise_virtual_imex_daemons(apiserver, client)
    finally:
        await client.close()


async def exercise_virtual_imex_daemons(apiserver: FakeApiServer, client: Any) -> None:
    """``--watch`` on an NVL72 rack plays the nodes' IMEX daemons: it follows pods and claims, labels the node
    of a channel claim and writes its entry into the domain's ComputeDomainClique."""
    nvl = ["--gpus", "4xgb200", "--racks", "1", "--nodes-per-rack", "2", "--gpu-mode", "dra", "--name-prefix", "nvl-"]
    stop = asyncio.Event()
    out = io.StringIO()
    args = cli_parser().parse_args(["virtual-nodes", *nvl, "--watch"])
    task = asyncio.create_task(run_virtual_nodes(args, client=client, stop=stop, out=out, err=out))

    def daemons(count: int) -> bool:
        return sum(len(c.get("daemons") or []) for c in apiserver.objects("computedomaincliques")) == count

    for i in range(2):  # the first daemon creates the clique, the second patches it
        name = f"worker-{i}"
        pod = apiserver.create_direct(_pod(name))
        claim = channel_claim(f"{name}-channel", f"nvl-000{i}", "domain-uid")
        claim["status"]["reservedFor"] = [{"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}]
        apiserver.create_direct(claim)
        pod["spec"].update(
            nodeName=f"nvl-000{i}", resourceClaims=[{"name": "ch", "resourceClaimName": f"{name}-channel"}]
        )
        apiserver.update_direct(pod)
        await eventually(functools.partial(daemons, i + 1), f"the daemon of nvl-000{i}")
        assert not task.done(), out.getvalue()
    stop.set()
    assert await asyncio.wait_for(task, 5.0) == 0, out.getvalue()
    args = cli_parser().parse_args(["virtual-nodes", "--name-prefix", "nvl-", "--delete"])
    assert await run_virtual_nodes(args, client=client, out=io.StringIO()) == 0


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": {"fakegpu.io/gpu-utilization": "50"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Component:
    overlay: str
    packages: tuple[str, ...]
    as_account: bool = False
    """Runs with ``ACCOUNT_TOKEN``, as the overlay's ServiceAccount under its rendered RBAC."""


COMPONENTS = {
    "compute-domains": (
        Component(
            "compute-domains",
            (
                "fakegpu/cli/compute_domain_controller_command.py",
                "fakegpu/dra/compute_domain/controller.py",
                "fakegpu/dra/compute_domain/claim_templates.py",
                "fakegpu/dra/compute_domain/domain_events.py",
                "fakegpu/dra/compute_domain/domain_status.py",
                "fakegpu/kube/client.py",
                "fakegpu/kube/discovery.py",
                "fakegpu/kube/watch_loop.py",
                "fakegpu/kube/reconcile_loop.py",
            ),
            as_account=True,
        ),
        exercise_compute_domain_controller,
    ),
    "device-plugin": (
        Component(
            "device-plugin",
            (
                "fakegpu/fakeplugin",
                "fakegpu/kube/client.py",
                "fakegpu/kube/node_events.py",
                "fakegpu/kube/node_watch.py",
                "fakegpu/kube/pod_annotations.py",
            ),
        ),
        exercise_device_plugin,
    ),
    "dra": (
        Component(
            "dra",
            (
                "fakegpu/dra",
                "fakegpu/kube/client.py",
                "fakegpu/kube/node_events.py",
                "fakegpu/kube/discovery.py",
                "fakegpu/kube/pod_annotations.py",
                "fakegpu/kube/node_watch.py",
            ),
        ),
        exercise_dra,
    ),
    "kwok": (
        Component("kwok", ("fakegpu/virtual_nodes", "fakegpu/kube/client.py", "fakegpu/kube/discovery.py")),
        exercise_virtual_nodes,
    ),
}


@pytest.mark.parametrize("name", sorted(COMPONENTS))
async def test_rbac_covers_every_call_the_component_makes(name, apiserver, root):
    component, exercise = COMPONENTS[name]
    objects = render(component.overlay)
    rules = granted_rules(objects)
    user = None
    if component.as_account:
        user = account_user(objects)
        apiserver.authorize(ACCOUNT_TOKEN, user, enforced(rules))
    await exercise(apiserver, root)
    made = {a for a in (request_access(r) for r in apiserver.requests if r.user == user) if a is not None}
    assert made, "the run made no API calls: the exercise is broken"
    missing = sorted(str(a) for a in made if not any(rule.allows(a) for rule in rules))
    assert missing == [], f"deploy/overlays/{component.overlay} lacks RBAC for calls the code makes: {missing}"

    # Every call site in the source was exercised: its verb (and resource, where the source names it) was
    # among the recorded calls. Otherwise this test would vouch for calls it never saw.
    unexercised = [
        str(site)
        for site in client_call_sites(component.packages)
        if not any(
            a.verb == site.verb and (site.resource is None or (a.group, a.resource) == site.resource) for a in made
        )
    ]
    assert unexercised == [], f"call sites no run exercised; extend exercise_{name.replace('-', '_')}: {unexercised}"

    # Least privilege: nothing granted that the code did not use (wildcards count as unused grants).
    assert not any("*" in r.groups | r.resources | r.verbs for r in rules), "wildcards in RBAC"
    unused = sorted(
        str(a)
        for a in grants(rules) - made
        if (name, a.group, a.resource, a.verb) not in RESERVED
        # watch needs list, as the reflector-style list-then-watch does: covered if watch was used
        and not (a.verb == "list" and Access("watch", a.group, a.resource) in made)
    )
    assert unused == [], f"deploy/overlays/{component.overlay} grants what the code never uses: {unused}"


def test_the_claim_status_grant_is_limited_to_this_driver():
    """The reserved 1.36 status verbs name the driver, so they reach no other driver's claims."""
    rules = one(render("dra"), "ClusterRole", "fakegpu-dra")["rules"]
    (status,) = [r for r in rules if r["resources"] == ["resourceclaims/driver"]]
    assert (status["apiGroups"], status["resourceNames"]) == (["resource.k8s.io"], ["gpu.nvidia.com"])


#: what deploy/README.md ("Teardown") tells an admin to grant whoever runs ``fakegpu cleanup``
CLEANUP_GRANTS = {Access("get", "", "nodes"), Access("patch", "", "nodes"), Access("patch", "", "nodes/status")}
#: and on top for ``fakegpu cleanup --wait``, which follows the Node
CLEANUP_WAIT_GRANTS = {Access("list", "", "nodes"), Access("watch", "", "nodes")}
CLEANUP_MODULES = ["fakegpu/cli/cleanup_command.py", "fakegpu/cli/node_status_wait.py", "fakegpu/kube/node_watch.py"]


async def cleanup_calls(apiserver: FakeApiServer, *flags: str) -> set[Access]:
    """The calls one ``fakegpu cleanup --skip-host --yes`` run makes on a Node with leftovers."""
    node = apiserver.get_object("nodes", NODE)
    assert node is not None
    node["metadata"]["labels"]["nvidia.com/gpu.count"] = "2"
    node["metadata"]["annotations"] = {"fakegpu.io/managed-labels": "nvidia.com/gpu.count"}
    node["status"] = {"capacity": {"nvidia.com/gpu": "2"}, "allocatable": {"nvidia.com/gpu": "0"}}
    apiserver.update_direct(node)
    seen = len(apiserver.requests)
    client = apiserver.client()
    try:
        args = cli_parser().parse_args(["cleanup", "--node", NODE, "--skip-host", "--yes", *flags])
        assert await run_cleanup(args, client=client, out=io.StringIO()) == 0
    finally:
        await client.close()
    return {a for a in (request_access(r) for r in apiserver.requests[seen:]) if a is not None}


async def test_cleanup_makes_exactly_the_calls_the_teardown_documents(apiserver):
    """``fakegpu cleanup`` runs with the admin's credentials, under no overlay's ServiceAccount (``kubectl
    delete -k`` has deleted those by then), so no overlay grants it anything; the README names the calls
    instead, and this keeps that list exact: every call made is on it, everything on it is made."""
    made = await cleanup_calls(apiserver)
    assert made == CLEANUP_GRANTS
    waited = await cleanup_calls(apiserver, "--wait", "--settle", "0.2")
    assert waited == CLEANUP_GRANTS | CLEANUP_WAIT_GRANTS
    sites = client_call_sites(CLEANUP_MODULES)
    assert sites and all(
        any(a.verb == s.verb and (s.resource is None or (a.group, a.resource) == s.resource) for a in waited)
        for s in sites
    ), [str(s) for s in sites]
    readme = " ".join((ROOT / "deploy/README.md").read_text().split())
    assert "grant exactly `get` and `patch` on `nodes` and `patch` on `nodes/status`" in readme
    assert "`--wait` also needs `list` and `watch` on `nodes`" in readme
