"""``fakegpu plugin --label-node`` with GFD's ``useNodeFeatureAPI``: the labels as the node's NodeFeature.

Follows NVIDIA/k8s-device-plugin @ v0.20.0: ``internal/lm/output.go`` (get ``nvidia-features-for-<node>``,
create it when missing, update its node-name label, spec and owner references only when they differ; owners
the DaemonSet of the pod ``POD_NAME`` names, as controller, and that pod) and ``cmd/gpu-feature-discovery/
main.go`` (``flags.useNodeFeatureAPI``, ``--sleep-interval`` paced relabelling). The daemon runs in-process
against the kubelet emulator and the tests' API server serving NFD's NodeFeature CRD, which checks every
write against the CRD's schema (``tests/apiserver/nodefeature_crd.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu.cli.main import full_parser
from fakegpu.cli.node_options import node_settings
from fakegpu.fakeplugin.cleanup_policy import CleanupOnExit
from fakegpu.fakeplugin.node_sync import ConfigSelection
from fakegpu.sharing.node_feature import NODE_NAME_LABEL
from tests.apiserver import FakeApiServer
from tests.apiserver.serving import serving
from tests.eventually import eventually
from tests.integration.plugin_daemon_runs import plugin_daemon_running
from tests.integration.test_plugin_node_sync import (
    LABEL,
    NODE,
    TIME_SLICING_4,
    daemon,  # noqa: F401 (a fixture)
    node_labels,
    resynced,
    set_label,
    settings,
    write_configs,
)

NAMESPACE = "gpu-operator"
NAME = f"nvidia-features-for-{NODE}"
POD = "gfd-x7k2p"
DAEMONSET_UID = "0b7c35e8-2a41-4d4c-9a1e-5d0f3c6b8e21"
NFD = {"version": "v1", "flags": {"useNodeFeatureAPI": True}}


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    """NFD's CRD installed, and GFD's pod, which a DaemonSet owns, in its namespace."""
    with serving(NODE, labels={"team": "ml"}, nfd_crds=True) as server:
        server.create_direct(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": POD,
                    "namespace": NAMESPACE,
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "DaemonSet",
                            "name": "gpu-feature-discovery",
                            "uid": DAEMONSET_UID,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {"containers": [{"name": "gfd", "image": "fakegpu:dev"}], "nodeName": NODE},
            }
        )
        yield server


def node_feature(apiserver: FakeApiServer) -> dict[str, Any] | None:
    return apiserver.get_object("nodefeatures", NAME, NAMESPACE)


def feature_labels(apiserver: FakeApiServer) -> dict[str, str]:
    return dict(((node_feature(apiserver) or {}).get("spec") or {}).get("labels") or {})


def gfd_settings(apiserver: FakeApiServer, root: Path, configs: dict[str, Any], **kw: Any) -> Any:
    selection = ConfigSelection(write_configs(root / "configs", configs))
    return settings(apiserver, root, label_node=True, selection=selection, namespace=NAMESPACE, pod_name=POD, **kw)


async def test_the_labels_go_to_the_node_feature_and_not_the_node(daemon, apiserver, root):  # noqa: F811
    await daemon(gfd_settings(apiserver, root, {"default": NFD, "ts": {**TIME_SLICING_4, **NFD}}))
    await eventually(lambda: feature_labels(apiserver).get("nvidia.com/gpu.count") == "2", "the NodeFeature")
    obj = node_feature(apiserver)
    assert obj is not None
    pod = apiserver.get_object("pods", POD, NAMESPACE)
    assert pod is not None
    assert obj["metadata"]["labels"] == {NODE_NAME_LABEL: NODE}
    assert obj["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "gpu-feature-discovery",
            "uid": DAEMONSET_UID,
            "controller": True,
        },
        {"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": pod["metadata"]["uid"]},
    ]
    assert obj["spec"]["features"] == {"flags": {}, "attributes": {}, "instances": {}}
    assert feature_labels(apiserver)["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert not [k for k in node_labels(apiserver) if k.startswith("nvidia.com/")], "GFD labels on the Node"
    # In sync: nothing rewritten until something changes.
    writes = apiserver.count("create", "nodefeatures") + apiserver.count("update", "nodefeatures")
    await resynced(root)
    assert apiserver.count("create", "nodefeatures") + apiserver.count("update", "nodefeatures") == writes == 1
    # A new config is a new run: the same object, updated.
    set_label(apiserver, LABEL, "ts")
    await eventually(lambda: feature_labels(apiserver).get("nvidia.com/gpu.replicas") == "4", "updated labels")
    assert (node_feature(apiserver) or {})["metadata"]["uid"] == obj["metadata"]["uid"]
    assert apiserver.count("update", "nodefeatures") == 1


async def test_turning_it_on_takes_the_plugins_labels_off_the_node(daemon, apiserver, root):  # noqa: F811
    await daemon(gfd_settings(apiserver, root, {"default": {"version": "v1"}, "nfd": NFD}))
    await eventually(lambda: node_labels(apiserver).get("nvidia.com/gpu.count") == "2", "labels on the Node")
    assert node_feature(apiserver) is None
    set_label(apiserver, LABEL, "nfd")
    await eventually(lambda: feature_labels(apiserver).get("nvidia.com/gpu.count") == "2", "the NodeFeature")
    await eventually(lambda: "nvidia.com/gpu.count" not in node_labels(apiserver), "the Node's GFD labels gone")
    assert node_labels(apiserver)["team"] == "ml"


async def test_without_a_pod_name_there_are_no_owners(daemon, apiserver, root):  # noqa: F811
    node = gfd_settings(apiserver, root, {"default": NFD})
    await daemon(settings(apiserver, root, label_node=True, selection=node.selection, namespace=NAMESPACE))
    await eventually(lambda: feature_labels(apiserver).get("nvidia.com/gpu.count") == "2", "the NodeFeature")
    assert "ownerReferences" not in (node_feature(apiserver) or {})["metadata"]


async def test_a_deleted_node_feature_comes_back_after_the_sleep_interval(daemon, apiserver, root):  # noqa: F811
    paced = {"version": "v1", "flags": {"useNodeFeatureAPI": True, "gfd": {"sleepInterval": "300ms"}}}
    await daemon(gfd_settings(apiserver, root, {"default": paced}))
    await eventually(lambda: node_feature(apiserver) is not None, "the NodeFeature")
    apiserver.delete_direct("nodefeatures", NAME, namespace=NAMESPACE)
    await eventually(lambda: node_feature(apiserver) is not None, "re-created by the next GFD pass")


@pytest.mark.parametrize("to_node_feature", [False, True])
async def test_infinite_labels_once_and_never_restores(daemon, apiserver, root, to_node_feature):  # noqa: F811
    """``--sleep-interval=infinite``: one labelling pass per run; what someone removes afterwards stays removed
    (a finite interval restores it: ``test_a_deleted_node_feature_comes_back_after_the_sleep_interval`` and
    ``test_a_label_someone_removes_is_put_back``)."""
    flags: dict[str, Any] = {"gfd": {"sleepInterval": "infinite"}, "useNodeFeatureAPI": to_node_feature}
    await daemon(gfd_settings(apiserver, root, {"default": {"version": "v1", "flags": flags}}))
    if to_node_feature:
        await eventually(lambda: node_feature(apiserver) is not None, "the NodeFeature")
        apiserver.delete_direct("nodefeatures", NAME, namespace=NAMESPACE)
    else:
        await eventually(lambda: "nvidia.com/gpu.count" in node_labels(apiserver), "the labels")
        set_label(apiserver, "nvidia.com/gpu.count", None)
    await resynced(root)
    await resynced(root)
    assert node_feature(apiserver) is None if to_node_feature else "nvidia.com/gpu.count" not in node_labels(apiserver)


@pytest.mark.parametrize(("policy", "kept"), [("always", False), ("never", True)])
async def test_the_exit_policy_decides_whether_the_node_feature_goes(apiserver, root, policy, kept):
    """``--cleanup-on-exit``, as for the Node's labels. (GFD itself leaves the object to the DaemonSet's
    garbage collection: a difference the README lists.)"""
    node = gfd_settings(apiserver, root, {"default": NFD}, cleanup_on_exit=CleanupOnExit.parse(policy))
    async with plugin_daemon_running(root, NODE, node, lambda: node_feature(apiserver) is not None, "the NodeFeature"):
        pass
    assert (node_feature(apiserver) is not None) is kept


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, ("default", "")),
        ([], {"NAMESPACE": "gpu-operator", "POD_NAME": POD}, ("gpu-operator", POD)),
        (["--namespace", "gfd", "--pod-name", "p"], {"NAMESPACE": "gpu-operator", "POD_NAME": POD}, ("gfd", "p")),
    ],
)
def test_namespace_and_pod_name_come_from_gfds_env(argv, env, expected):
    """GFD's ``--namespace`` / ``NAMESPACE`` (default ``default``, ``internal/flags/node.go``) and the
    ``POD_NAME`` NVIDIA's chart sets from the downward API (``templates/daemonset-gfd.yml``)."""
    args = full_parser().parse_args(["plugin", "--label-node", *argv])
    node = node_settings(args, env)
    assert (node.namespace, node.pod_name) == expected


async def test_a_cluster_without_nfd_is_told_so(root, caplog):
    """Without NFD's CRD the API server answers 404 for nodefeatures: the failed pass says what is missing."""
    caplog.set_level(logging.WARNING)
    with serving(NODE, nfd_crds=False) as server:
        node = gfd_settings(server, root, {"default": NFD})
        async with plugin_daemon_running(
            root, NODE, node, lambda: "is Node Feature Discovery installed?" in caplog.text, "the error"
        ):
            pass
    assert "does not serve nfd.k8s-sigs.io/v1alpha1 nodefeatures" in caplog.text


async def test_without_label_node_the_option_is_named_as_having_no_effect(apiserver, root, caplog):
    """GFD's output options shape what ``--label-node`` publishes (``cmd/gpu-feature-discovery/main.go`` @
    v0.20.0 writes the NodeFeature in its labelling loop); without ``--label-node`` fakegpu writes nothing,
    and says so instead of ignoring the option in silence."""
    caplog.set_level(logging.WARNING)
    selection = ConfigSelection(write_configs(root / "configs", {"default": NFD}))
    node = settings(apiserver, root, label_node=False, selection=selection, namespace=NAMESPACE, pod_name=POD)
    said = "useNodeFeatureAPI has no effect without --label-node"
    async with plugin_daemon_running(root, NODE, node, lambda: said in caplog.text, "the warning"):
        pass
    assert node_feature(apiserver) is None
