"""GFD's NodeFeature output (``fakegpu labels --use-node-feature-api``) against NFD's NodeFeature CRD.

Follows NVIDIA/k8s-device-plugin ``internal/lm/output.go`` @ v0.20.0 (PR #1597's owner references, merged
2026-01-23, in since v0.19) and ``cmd/gpu-feature-discovery/main.go`` (``--use-node-feature-api``, env
``GFD_USE_NODE_FEATURE_API`` / ``USE_NODE_FEATURE_API``), and kubernetes-sigs/node-feature-discovery
``deployment/helm/node-feature-discovery/crds/nfd-api-crds.yaml`` / ``api/nfd/v1alpha1/types.go`` @ a2600b9.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from fakegpu.cli.main import main
from fakegpu.sharing.node_feature import NODE_NAME_LABEL, node_feature, owner_references
from tests.apiserver import FakeApiServer
from tests.apiserver.crd_schema import custom_schemas

NODE = ("--gpus", "1xh100-80gb", "--node-name", "n1")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """What an API server with NFD's CRD installed answers 422 for (none: it validates)."""
    return [str(e) for e in custom_schemas()["nodefeatures"].errors(obj)]


def test_labels_with_the_node_feature_api_print_the_node_feature_gfd_writes(capsys: pytest.CaptureFixture[str]):
    """``internal/lm/output.go``: name ``nvidia-features-for-<node>``, GFD's namespace, the node-name label NFD
    selects by (``nfd.node.kubernetes.io/node-name``), the empty feature sets of ``NewFeatures()`` and the
    labels GFD would otherwise write to its features file: exactly ``fakegpu labels``' set."""
    plain = json.loads(run(capsys, "labels", *NODE, "--timestamp", "1700000000", "-o", "json"))
    printed = yaml.safe_load(
        run(capsys, "labels", *NODE, "--timestamp", "1700000000", "--use-node-feature-api", "--namespace", "gfd")
    )
    assert printed == {
        "apiVersion": "nfd.k8s-sigs.io/v1alpha1",
        "kind": "NodeFeature",
        "metadata": {"name": "nvidia-features-for-n1", "namespace": "gfd", "labels": {NODE_NAME_LABEL: "n1"}},
        "spec": {"features": {"flags": {}, "attributes": {}, "instances": {}}, "labels": plain},
    }
    assert schema_errors(printed) == []
    as_json = json.loads(run(capsys, "labels", *NODE, "--use-node-feature-api", "-o", "json"))
    assert as_json["metadata"]["namespace"] == "default"  # GFD's --namespace default
    assert schema_errors(as_json) == []


@pytest.mark.parametrize(
    ("env", "node_feature_api"),
    [
        ({"GFD_USE_NODE_FEATURE_API": "true"}, True),
        ({"USE_NODE_FEATURE_API": "1"}, True),
        ({"GFD_USE_NODE_FEATURE_API": "false"}, False),
        ({}, False),
    ],
)
def test_the_node_feature_api_env_vars(capsys, monkeypatch, env, node_feature_api):
    for name in ("GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API", "NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = yaml.safe_load(run(capsys, "labels", *NODE, "-o", "yaml"))
    assert (out.get("kind") == "NodeFeature") is node_feature_api


def test_the_config_file_turns_it_on(capsys, tmp_path):
    """``flags.useNodeFeatureAPI`` (``api/config/v1/flags.go``), the field the chart's config carries."""
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\nflags:\n  useNodeFeatureAPI: true\n")
    out = yaml.safe_load(run(capsys, "labels", *NODE, "--config-file", str(config)))
    assert out["kind"] == "NodeFeature"
    off = yaml.safe_load(run(capsys, "labels", *NODE, "--config-file", str(config), "--use-node-feature-api=false"))
    assert "kind" not in off


def test_the_schema_check_refuses_what_the_crd_refuses():
    """The check is the CRD's: it is not satisfied by anything (each broken copy draws an error)."""
    good = node_feature("n1", "default", {"nvidia.com/gpu.count": "1"})
    assert schema_errors(good) == []
    broken: list[dict[str, Any]] = []
    mutations: tuple[Callable[[dict[str, Any]], object], ...] = (
        lambda o: o.pop("spec"),
        lambda o: o["spec"].__setitem__("labels", {"nvidia.com/gpu.count": 1}),
        lambda o: o["spec"]["features"]["flags"].__setitem__("cpu", {}),  # a feature set without elements
        lambda o: o["spec"]["features"]["instances"].__setitem__("pci", {"elements": [{"vendor": "10de"}]}),
        lambda o: o["spec"].__setitem__("labels", ["nvidia.com/gpu.count=1"]),
    )
    for mutate in mutations:
        obj = copy.deepcopy(good)
        mutate(obj)
        broken.append(obj)
    assert all(schema_errors(obj) for obj in broken), [schema_errors(o) for o in broken]


def test_the_api_server_with_nfds_crd_stores_it_and_refuses_a_broken_one():
    with FakeApiServer("1.36", nfd_crds=True) as server:
        stored = server.create_direct(node_feature("n1", "gfd", {"nvidia.com/gpu.count": "1"}))
        assert stored["spec"]["labels"] == {"nvidia.com/gpu.count": "1"}
        with pytest.raises(ValueError, match="spec"):
            server.create_direct({**node_feature("n2", "gfd", {}), "spec": {"labels": {"a": 1}}})


def test_owner_references_are_the_pods_daemonset_and_the_pod():
    """``getOwnerReferences``: the DaemonSet from the pod's own references, as controller, then the pod;
    a pod no DaemonSet owns gives none. GFD never names the Node as owner."""
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gfd", "uid": "ds-uid", "controller": True}
    assert owner_references("gfd-abcde", "pod-uid", [ds]) == [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gfd", "uid": "ds-uid", "controller": True},
        {"apiVersion": "v1", "kind": "Pod", "name": "gfd-abcde", "uid": "pod-uid"},
    ]
    assert owner_references("standalone", "pod-uid", [{"kind": "ReplicaSet", "name": "x", "uid": "u"}]) == []
    assert owner_references("standalone", "pod-uid", []) == []


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (
            ("--node-name", "n1", "--namespace", "Bad_NS"),
            {},
            "fakegpu: error: --namespace: namespace 'Bad_NS' is not a DNS-1123 label",
        ),
        (("--node-name", "n1"), {"NAMESPACE": "x" * 64}, "fakegpu: error: NAMESPACE: namespace 'xxxx"),
        (
            ("--node-name", "n" * 64),
            {},
            f"fakegpu: error: --node-name: node '{'n' * 64}' gets no valid NodeFeature: its {NODE_NAME_LABEL} label "
            "value",
        ),
        (
            (),
            {"NODE_NAME": "a." + "b" * 240},
            "fakegpu: error: NODE_NAME: node 'a.bbb",
        ),
        (("--node-name", "n1", "-o", "table"), {}, "fakegpu: error: -o table: a NodeFeature (--use-node-feature-api)"),
        (("--node-name", "n1", "-o", "text"), {}, "fakegpu: error: -o text: a NodeFeature (--use-node-feature-api)"),
    ],
)
def test_a_node_feature_the_api_server_would_refuse_is_one_line(capsys, monkeypatch, argv, env, line):
    """The object must pass the API server: ``metadata.namespace`` a DNS-1123 label, ``metadata.name``
    (``nvidia-features-for-<node>``, internal/lm/output.go @ v0.20.0) a DNS-1123 subdomain, and the
    ``nfd.node.kubernetes.io/node-name`` label value at most 63 characters (kubernetes/kubernetes
    staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go at commit 03014f4, IsValidLabelValue); GFD would
    fail at its create. A table or text output cannot hold the object: refused, not YAML in its place."""
    for name in ("NAMESPACE", "NODE_NAME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["labels", "--gpus", "1xh100-80gb", "--use-node-feature-api", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(line) and err.count("\n") == 1, err


def test_a_long_node_name_still_prints_its_plain_labels(capsys, monkeypatch):
    """Without the NodeFeature nothing holds the node name in a label value: the plain labels print."""
    monkeypatch.delenv("NAMESPACE", raising=False)
    assert "nvidia.com/gpu.count" in run(capsys, "labels", "--gpus", "1xh100-80gb", "--node-name", "n" * 64)
