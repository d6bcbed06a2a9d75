"""The fake API server's Node rule, as the real one has it (``ValidateNodeResources``): ``pods`` and extended
resources are whole numbers, no quantity is negative. A virtual node with ``pods: 1.5`` would be refused."""

from __future__ import annotations

from typing import Any

import pytest

from tests.apiserver.k8s_validation import is_integer_resource_name, validate_node


def node(part: str, resources: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "status": {part: resources}}


@pytest.mark.parametrize("part", ["capacity", "allocatable"])
@pytest.mark.parametrize("pods", ["1.5", "1500m", "0.0001", "1e-3", 2.5])
def test_a_fractional_pod_count_is_refused(part, pods):
    (error,) = validate_node(node(part, {"pods": pods}))
    assert str(error) == f'status.{part}.pods: Invalid value: "{pods}": must be an integer'


@pytest.mark.parametrize("pods", ["110", "1k", "1e3", "2000m", 7])
def test_whole_pod_counts_pass_however_written(pods):
    assert validate_node(node("capacity", {"pods": pods})) == []


def test_extended_resources_are_integers_and_cpu_is_not():
    errors = validate_node(
        node("allocatable", {"cpu": "500m", "memory": "1.5Gi", "nvidia.com/gpu": "0.5", "example.com/fpga": "2"})
    )
    assert [str(e) for e in errors] == ['status.allocatable.nvidia.com/gpu: Invalid value: "0.5": must be an integer']
    assert is_integer_resource_name("nvidia.com/mig-1g.5gb")
    assert not is_integer_resource_name("kubernetes.io/batteries")
    assert not is_integer_resource_name("hugepages-2Mi")


def test_negative_and_malformed_quantities_are_refused():
    errors = validate_node(node("capacity", {"cpu": "-1", "memory": "lots"}))
    assert [e.field for e in errors] == ["status.capacity.cpu", "status.capacity.memory"]
    assert "must be greater than or equal to 0" in str(errors[0])
