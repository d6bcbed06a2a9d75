"""Malformed manifests given to the manifest applier fail before anything is created, naming the document,
the object and the field (kubernetes validates pods, Deployments, Jobs and claim templates by field path:
pkg/apis/core/validation/validation.go and pkg/apis/apps/validation/validation.go (v1.36))."""

from __future__ import annotations

import pytest

from fakegpu.testing.manifest_apply import load_documents

POD = """
apiVersion: v1
kind: Pod
metadata: {namespace: demo, name: p}
spec:
  containers: [{name: c}]
  resourceClaims: [{name: gpu}]
"""
DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec: {replicas: 1}
"""
JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: j}
spec:
  parallelism: two
  template: {spec: {containers: [{name: c}]}}
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Pod\nmetadata: {name: [\n", "manifest: not valid YAML at line 3, column 1: "),
        (
            POD,
            "manifest: document 1 (Pod demo/p): spec.resourceClaims[0]: expected exactly one of resourceClaimName, "
            "resourceClaimTemplateName, found {'name': 'gpu'}",
        ),
        (
            "---\nkind: Namespace\nmetadata: {name: x}\n---" + DEPLOYMENT,
            "manifest: document 2 (Deployment default/d): spec.template: expected a mapping, found None",
        ),
        (JOB, "manifest: document 1 (Job default/j): spec.parallelism: expected a non-negative integer, found 'two'"),
    ],
)
def test_a_malformed_document_is_named_with_its_field(text: str, message: str):
    with pytest.raises(ValueError) as refused:
        load_documents(text)
    assert str(refused.value).startswith(message)
