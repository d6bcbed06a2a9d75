"""GFD's NodeFeature output: the node's labels as one ``nfd.k8s-sigs.io/v1alpha1`` NodeFeature object.

With ``useNodeFeatureAPI`` NVIDIA's GPU Feature Discovery writes no features file; it keeps one
NodeFeature per node, which Node Feature Discovery's master turns into the Node's labels
(``internal/lm/output.go`` in NVIDIA/k8s-device-plugin v0.20.0). The object, as GFD builds it:

- name ``nvidia-features-for-<node>``, in GFD's own namespace (``--namespace`` / ``NAMESPACE``, the pod's);
- ``metadata.labels`` exactly ``{nfd.node.kubernetes.io/node-name: <node>}``, the label NFD selects the
  node's objects by (node-feature-discovery ``api/nfd/v1alpha1``, ``NodeFeatureObjNodeNameLabel``);
- ``spec.features`` the empty feature sets (GFD sends ``NewFeatures()``) and ``spec.labels`` the labels;
- ``ownerReferences`` the DaemonSet that runs the pod (as controller) and the pod itself, read from the
  pod named by ``POD_NAME`` (v0.19, NVIDIA/k8s-device-plugin#1597): the object goes with the DaemonSet.
  No pod name, or a pod no DaemonSet owns, means no owner references, as in GFD. It is not owned by the
  Node.

Pure data: the writer against the API server is ``fakegpu.fakeplugin.node_feature_writer``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.label_syntax import DNS1123_LABEL, MAX_NAME, is_dns1123_subdomain, value_problem

GROUP: Final = "nfd.k8s-sigs.io"
VERSION: Final = "v1alpha1"
KIND: Final = "NodeFeature"
PLURAL: Final = "nodefeatures"
NODE_NAME_LABEL: Final = "nfd.node.kubernetes.io/node-name"
NAME_PREFIX: Final = "nvidia-features-for"
DEFAULT_NAMESPACE: Final = "default"
"""GFD's ``--namespace`` default (``internal/flags/node.go``); NVIDIA's chart sets ``NAMESPACE`` to the pod's."""


def node_feature_name(node_name: str) -> str:
    return f"{NAME_PREFIX}-{node_name}"


def check_node_feature(node_name: str, namespace: str, *, node_from: str, namespace_from: str) -> None:
    """SpecError (naming ``node_from`` or ``namespace_from``) when the API server would refuse the node's
    NodeFeature: a namespace that is no DNS-1123 label, a node name that is no label value (the node-name
    label holds it: at most 63 characters) or that makes the object's name no DNS-1123 subdomain."""
    if len(namespace) > MAX_NAME or not DNS1123_LABEL.fullmatch(namespace):
        raise SpecError(
            namespace_from,
            f"namespace {namespace!r} is not a DNS-1123 label (at most {MAX_NAME} lower-case alphanumerics or "
            "'-', starting and ending alphanumeric): the API server refuses the NodeFeature",
        )
    problems = []
    label_problem = value_problem(node_name)
    if label_problem is not None:
        problems.append(f"its {NODE_NAME_LABEL} label value {label_problem}")
    name = node_feature_name(node_name)
    if not is_dns1123_subdomain(name):
        problems.append(f"its name {name!r} is not a DNS-1123 subdomain of at most 253 characters")
    if problems:
        raise SpecError(node_from, f"node {node_name!r} gets no valid NodeFeature: {'; '.join(problems)}")


def empty_features() -> dict[str, dict[str, Any]]:
    """``NewFeatures()``: every feature set present and empty (the CRD requires none, GFD sends all three)."""
    return {"flags": {}, "attributes": {}, "instances": {}}


def node_feature(
    node_name: str,
    namespace: str,
    labels: Mapping[str, str],
    owner_references: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The NodeFeature GFD keeps for ``node_name``, as a plain object (keys sorted in ``spec.labels``)."""
    metadata: dict[str, Any] = {
        "name": node_feature_name(node_name),
        "namespace": namespace,
        "labels": {NODE_NAME_LABEL: node_name},
    }
    if owner_references:
        metadata["ownerReferences"] = [dict(ref) for ref in owner_references]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": metadata,
        "spec": {"features": empty_features(), "labels": dict(sorted(labels.items()))},
    }


def owner_references(pod_name: str, pod_uid: str, pod_owners: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """GFD's owners for its NodeFeature: the pod's DaemonSet (the controller) and the pod; none without one.

    The DaemonSet reference is copied from the pod's own (first ``kind: DaemonSet`` entry) with
    ``controller: true``; the pod's carries no controller flag."""
    daemonset = next((ref for ref in pod_owners if ref.get("kind") == "DaemonSet"), None)
    if daemonset is None:
        return []
    return [
        {
            "apiVersion": daemonset.get("apiVersion", "apps/v1"),
            "kind": "DaemonSet",
            "name": daemonset.get("name", ""),
            "uid": daemonset.get("uid", ""),
            "controller": True,
        },
        {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid},
    ]
