"""deploy/README.md's teardown block, checked against what the overlays, examples and daemons create: every
object is deleted by one of its commands, every opt-in label is removed by a command, ComputeDomains go while
their controller still runs, and no command fails on a cluster where a part was never applied (on a real
Kubernetes v1.36.2 cluster the block hung on a ComputeDomain's finalizer and failed with NotFound without the
kwok overlay). tests/integration/test_teardown_run.py runs its Kubernetes-object steps against the fake API
server with the controller."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from fakegpu.sharing.named_configs import DEFAULT_CONFIG_LABEL
from tests.deploy.manifests import (
    APPLIED,
    DEPLOY,
    EXAMPLES,
    ROOT,
    Obj,
    all_rendered,
    fakegpu_argv,
    load_docs,
    one,
    only_container,
    pod_spec,
    render,
)
from tests.deploy.teardown_block import README, Step, steps

DOMAINS = "computedomains.resource.nvidia.com"
# API groups every cluster this README targets serves (Kubernetes 1.36, DRA on): anything else comes from an
# overlay's CRD or a feature gate, and a command naming it must be guarded.
BUILT_IN_GROUPS = frozenset({"", "apps", "batch", "resource.k8s.io", "rbac.authorization.k8s.io"})
# What each tolerant verb needs so that an absent object or part is not an error.
_LABEL_REMOVAL = re.compile(r"[\w./-]+-")


def group_of(obj: Obj) -> str:
    api_version: str = obj["apiVersion"]
    return api_version.rpartition("/")[0]


def plural(kind: str) -> str:
    lower = kind.lower()
    return lower + ("es" if lower.endswith("s") else "s")


def names_type(token: str, obj: Obj) -> bool:
    """Whether a kubectl type argument (``job``, ``computedomains.resource.nvidia.com``) means obj's kind."""
    name, _, group = token.partition(".")
    return name in (obj["kind"].lower(), plural(obj["kind"])) and (not group or group == group_of(obj))


def _in_namespace(step: Step, obj: Obj, namespaced: bool) -> bool:
    if not namespaced or step.has("--all-namespaces", "-A"):
        return True
    wanted = step.value("-n") or step.value("--namespace") or "default"
    return wanted == (obj["metadata"].get("namespace") or "default")


def _names(step: Step, obj: Obj) -> bool:
    """``kubectl delete TYPE NAME...``, ``TYPE/NAME...`` or ``TYPE --all``."""
    args = step.positionals[1:]
    if not args:
        return False
    name = obj["metadata"]["name"]
    if "/" in args[0]:
        return any(names_type(a.split("/")[0], obj) and a.split("/")[1] == name for a in args)
    return any(names_type(t, obj) for t in args[0].split(",")) and (name in args[1:] or step.has("--all"))


def deletes(step: Step, obj: Obj, source: Path) -> bool:
    """Whether ``step`` deletes ``obj``, which comes from ``source`` (an applied directory or a manifest file)."""
    if not step.kubectl("delete"):
        return False
    namespaced = "namespace" in obj["metadata"] or obj["kind"] not in CLUSTER_KINDS
    kustomized, filename = step.value("-k"), step.value("-f")
    if kustomized is not None:
        return (ROOT / kustomized).resolve() == source.resolve()
    if filename is not None:
        path = (ROOT / filename).resolve()
        recursive = step.has("-R", "--recursive")
        return path in (source, source.parent) or (recursive and path in source.parents)
    return _in_namespace(step, obj, namespaced) and _names(step, obj)


CLUSTER_KINDS = frozenset({"Namespace", "ClusterRole", "ClusterRoleBinding", "DeviceClass", "CustomResourceDefinition"})


def example_sources() -> list[tuple[Path, Obj]]:
    return [(path, obj) for path in sorted(EXAMPLES.rglob("*.yaml")) for obj in load_docs(path)]


def crd_types() -> dict[str, str]:
    """``<plural>.<group>`` -> CRD name for every CRD an overlay installs."""
    return {
        f"{c['spec']['names']['plural']}.{c['spec']['group']}": c["metadata"]["name"]
        for _, c in all_rendered()
        if c["kind"] == "CustomResourceDefinition"
    }


def index(predicate: object, what: str) -> int:
    matching = [i for i, s in enumerate(steps()) if callable(predicate) and predicate(s)]
    assert matching, f"deploy/README.md teardown: no command that {what}"
    return matching[0]


def test_every_object_the_overlays_render_is_deleted() -> None:
    for directory, obj in all_rendered():
        assert any(deletes(s, obj, DEPLOY / directory) for s in steps()), (
            f"teardown leaves {obj['kind']} {obj['metadata']['name']} of deploy/{directory}"
        )


def test_every_example_object_is_deleted() -> None:
    for path, obj in example_sources():
        assert any(deletes(s, obj, path) for s in steps()), (
            f"teardown leaves {obj['kind']} {obj['metadata']['name']} of {path.relative_to(ROOT)}"
        )


def test_the_checks_see_a_command_missing() -> None:
    # The coverage checks above must fail for a block without the command they rely on.
    dra = DEPLOY / "overlays" / "dra"
    daemonset = one(render("dra"), "DaemonSet", "fakegpu-dra")
    without = [s for s in steps() if s.value("-k") != "deploy/overlays/dra"]
    assert not any(deletes(s, daemonset, dra) for s in without)
    assert any(deletes(s, daemonset, dra) for s in steps())


def test_compute_domains_of_every_namespace_go_while_their_controller_runs() -> None:
    first = index(lambda s: s.kubectl("delete") and s.value("-k") is not None, "deletes an applied directory")
    domains = index(
        lambda s: s.kubectl("delete") and s.positionals[1:2] == (DOMAINS,) and s.has("--all"),
        "deletes every ComputeDomain",
    )
    step = steps()[domains]
    assert step.has("--all-namespaces", "-A"), "ComputeDomains of every namespace"
    assert not step.has("--wait=false"), "waited for until the controller has dropped the finalizers"
    assert domains < first, "before the controller's overlay (or any other) goes"


def test_opt_in_labels_are_removed_from_every_node_by_a_command() -> None:
    opt_in = {DEFAULT_CONFIG_LABEL}
    for _, obj in all_rendered():
        if obj["kind"] not in ("DaemonSet", "Deployment"):
            continue
        spec = pod_spec(obj)
        opt_in |= set(spec.get("nodeSelector") or {})
        terms = (
            ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms") or []
        for term in terms:
            opt_in |= {e["key"] for e in term.get("matchExpressions", []) if e["operator"] in ("In", "Exists")}
    assert {"fakegpu.io/device-plugin", "fakegpu.io/dra"} <= opt_in
    removed = {
        a[:-1]
        for s in steps()
        if s.kubectl("label") and s.positionals[1:2] == ("nodes",) and s.has("--all")
        for a in s.positionals[2:]
        if _LABEL_REMOVAL.fullmatch(a)
    }
    assert opt_in <= removed, f"opt-in labels no command removes from every node: {sorted(opt_in - removed)}"


def test_every_node_fakegpu_ran_on_is_cleaned() -> None:
    (cluster,) = load_docs(DEPLOY / "kind" / "cluster.yaml")
    opted_in = {
        f"{cluster['name']}-{n['role']}{'' if i == 0 else i + 1}": set(n.get("labels") or {})
        for i, n in enumerate(x for x in cluster["nodes"] if x["role"] == "worker")
    }
    assert len(opted_in) == 2
    for s in steps():
        if s.fakegpu("cleanup"):
            assert s.has("--yes") and s.has("--wait"), f"{s.line}: once, removing, waiting out the grace period"
    for node, labels in opted_in.items():
        host = [s for s in steps() if s.kubectl("debug") and s.positionals[1:2] == (f"node/{node}",)]
        assert host, f"no host cleanup on {node}"
        inner = shlex.join(host[0].argv[host[0].argv.index("--") + 1 :])
        assert f"fakegpu cleanup --node {node} --skip-api --host-root /host --yes" == inner
        if "fakegpu.io/device-plugin" in labels:
            assert any(s.fakegpu("cleanup") and s.value("--node") == node for s in steps()), f"{node}'s Node status"


def test_every_virtual_node_prefix_is_deleted_after_its_controller() -> None:
    prefixes = set(re.findall(r"^fakegpu virtual-nodes .*--name-prefix (\S+)", README.read_text(), flags=re.M))
    kwok = only_container(one(render("kwok"), "Deployment", "fakegpu-virtual-nodes"))
    argv = fakegpu_argv(kwok)
    prefixes.add(argv[argv.index("--name-prefix") + 1])
    deleted = {
        s.value("--name-prefix"): i for i, s in enumerate(steps()) if s.fakegpu("virtual-nodes") and s.has("--delete")
    }
    assert prefixes <= set(deleted), f"virtual nodes left: {sorted(prefixes - set(deleted))}"
    controller = index(
        lambda s: s.kubectl("delete") and s.positionals[1:] == ("deployment", "fakegpu-virtual-nodes"),
        "stops the virtual-nodes controller",
    )
    assert steps()[controller].value("--cascade") == "foreground", "its pod is gone before the nodes are deleted"
    assert all(controller < i for i in deleted.values())


def test_daemons_are_opted_out_before_their_rbac_goes() -> None:
    labels = index(lambda s: s.kubectl("label"), "removes the opt-in labels")
    waited = index(lambda s: s.kubectl("wait") and s.value("--for") == "delete", "waits for the daemons' pods")
    for overlay in ("dra", "device-plugin"):
        deleted = index(lambda s, o=overlay: s.value("-k") == f"deploy/overlays/{o}", f"deletes {overlay}")
        assert labels < waited < deleted


def _types_named(step: Step) -> set[str]:
    """``<plural>.<group>`` of everything a delete names, through files or type arguments."""
    named: set[str] = set()
    if not step.kubectl("delete"):
        return named
    if (filename := step.value("-f")) is not None:
        path = ROOT / filename
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        named |= {f"{plural(o['kind'])}.{group_of(o)}" for f in files for o in load_docs(f)}
    elif step.value("-k") is None:
        for arg in step.positionals[1:]:
            for token in arg.split("/")[0].split(","):
                if "." in token:
                    named.add(token)
    return named


def test_no_command_depends_on_a_part_never_applied() -> None:
    crds = crd_types()
    for s in steps():
        if s.argv[0] == "kubectl":
            verb = s.positionals[0]
            assert verb in ("delete", "label", "wait", "debug"), f"{s.line}: kubectl {verb} fails without its object"
            if verb == "delete":
                assert s.has("--ignore-not-found") or s.has("--all"), f"{s.line}: fails with NotFound"
            if verb == "label":
                assert s.has("--all") and all(_LABEL_REMOVAL.fullmatch(a) for a in s.positionals[2:]), s.line
            if verb == "wait":
                assert s.value("--for") == "delete", f"{s.line}: only --for=delete succeeds when nothing matches"
        else:
            assert s.fakegpu("cleanup") or s.fakegpu("virtual-nodes") or s.argv[:2] == ("kind", "delete"), s.line
        for named in _types_named(s):
            if named.split(".", 1)[1] in BUILT_IN_GROUPS:
                continue
            guard = s.guard or ""
            needed = crds.get(named, named.split(".")[0])
            assert needed in guard, f"{s.line}: names {named}, which a cluster may not serve, outside a check for it"


def test_applied_directories_match_the_block() -> None:
    deleted = {s.value("-k") for s in steps() if s.kubectl("delete")} - {None}
    assert deleted == {f"deploy/{d}" for d in APPLIED}


def test_the_readmes_summary_quotes_the_blocks_commands() -> None:
    summary = (ROOT / "README.md").read_text()
    (label,) = [s for s in steps() if s.kubectl("label")]
    assert f"`{label.line}`" in summary
    (cleanup,) = [s for s in steps() if s.fakegpu("cleanup")]
    # The summary quotes the block's API half as it is (--skip-host: from a workstation, the host half would
    # clean the workstation's own directories); the host half is named in words, from `kubectl debug`.
    flags = " ".join(cleanup.argv[4:])
    assert "--skip-host" in flags
    assert f"`fakegpu cleanup --node N {flags}`" in summary


def test_every_step_that_waits_is_bounded() -> None:
    """kubectl's own wait is 168 hours: a delete or wait without ``--timeout`` is a step that can hang the way
    the old block did on the CRD."""
    waiting = [s for s in steps() if s.kubectl("delete") or s.kubectl("wait")]
    assert len(waiting) > 5
    assert [s.line for s in waiting if not s.has("--timeout")] == []
