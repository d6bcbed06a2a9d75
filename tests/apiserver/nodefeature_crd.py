"""Node Feature Discovery's NodeFeature CRD, as the tests' API server serves it and the tests validate with.

kubernetes-validate knows only Kubernetes' built-in kinds, so the schema is written out here, field by field,
from kubernetes-sigs/node-feature-discovery ``deployment/helm/node-feature-discovery/crds/nfd-api-crds.yaml``
(controller-gen v0.16.3, the ``nodefeatures.nfd.k8s-sigs.io`` CRD; the Go types are ``api/nfd/v1alpha1/types.go``
at commit a2600b9): namespaced, one served version ``v1alpha1``, no status subresource; ``spec`` required,
holding the optional ``features`` (three maps of feature sets, each set requiring its ``elements``) and the
optional ``labels`` (string to string). Descriptions are left out; the structure, types and required lists
are the CRD's.
"""

from __future__ import annotations

from typing import Any

GROUP = "nfd.k8s-sigs.io"
VERSION = "v1alpha1"
PLURAL = "nodefeatures"
KIND = "NodeFeature"

_STRING_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}


def _feature_set(elements: dict[str, Any]) -> dict[str, Any]:
    """One ``additionalProperties`` feature set: an object whose ``elements`` is required."""
    return {
        "type": "object",
        "additionalProperties": {"type": "object", "required": ["elements"], "properties": {"elements": elements}},
    }


NODE_FEATURE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "properties": {
                "features": {
                    "type": "object",
                    "properties": {
                        "attributes": _feature_set(_STRING_MAP),
                        # FlagFeatureSet elements: name -> Nil, an empty object
                        "flags": _feature_set({"type": "object", "additionalProperties": {"type": "object"}}),
                        "instances": _feature_set(
                            {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["attributes"],
                                    "properties": {"attributes": _STRING_MAP},
                                },
                            }
                        ),
                    },
                },
                "labels": _STRING_MAP,
            },
        },
    },
}


def node_feature_crd() -> dict[str, Any]:
    """The CRD object (names, scope, the one served version with its schema)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": "nodefeature"},
            "scope": "Namespaced",
            "versions": [
                {"name": VERSION, "served": True, "storage": True, "schema": {"openAPIV3Schema": NODE_FEATURE_SCHEMA}}
            ],
        },
    }
