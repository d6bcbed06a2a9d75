"""The DeviceClasses of the dra-extended mode: what is wanted, and what to write next to what exists."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from fakegpu.virtual_nodes.extended_classes import ClassPlan, delete_selector, plan_classes, wanted_classes

V1 = "resource.k8s.io/v1"


def wanted(api_version: str = V1) -> list[dict[str, Any]]:
    return wanted_classes(["device-plugin", "dra-extended"], "gpu.nvidia.com", api_version)


def listed(obj: dict[str, Any], version: str = "5", **labels: str) -> dict[str, Any]:
    """``obj`` as the API server lists it, with server metadata and ``labels`` in place of its own."""
    out = copy.deepcopy(obj)
    out["metadata"].update(uid="u-1", resourceVersion=version, creationTimestamp="2026-01-01T00:00:00Z")
    out["metadata"]["labels"] = dict(labels)
    return out


@pytest.mark.parametrize("modes", [[], ["device-plugin"], ["dra", "device-plugin"]])
def test_no_classes_without_a_dra_extended_pool(modes):
    assert wanted_classes(modes, "gpu.nvidia.com", V1) == []
    assert plan_classes([], [listed(wanted()[0])]) == ClassPlan()


def test_the_wanted_classes_are_labelled_valid_and_carry_the_extended_resource_name_on_v1():
    classes = wanted()
    assert [c["metadata"]["name"] for c in classes] == ["gpu.nvidia.com", "mig.nvidia.com"]
    assert all(c["metadata"]["labels"] == {"fakegpu.io/virtual-node": "true"} for c in classes)
    assert classes[0]["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "extendedResourceName" not in classes[1]["spec"]  # MIG devices have no extended resource
    for obj in classes:
        kubernetes_validate.validate(obj, "1.36.0", strict=True)
    older = wanted("resource.k8s.io/v1beta2")
    assert all("extendedResourceName" not in c["spec"] for c in older)
    assert wanted_classes(["dra-extended"], "gpu.example.com", V1)[0]["spec"]["selectors"][0]["cel"][
        "expression"
    ].startswith("device.driver == 'gpu.example.com'")


def test_missing_classes_are_created_and_present_ones_left_as_they_are():
    plan = plan_classes(wanted(), [])
    assert [c["metadata"]["name"] for c in plan.create] == ["gpu.nvidia.com", "mig.nvidia.com"]
    assert plan.replace == [] and plan.warnings == []
    existing = [listed(c, **{"fakegpu.io/virtual-node": "true"}) for c in wanted()]
    again = plan_classes(wanted(), existing)
    assert again.empty and again.warnings == []


def test_our_class_that_differs_is_replaced_with_the_listed_resource_version():
    ours = [listed(c, version=str(i), **{"fakegpu.io/virtual-node": "true"}) for i, c in enumerate(wanted())]
    del ours[0]["spec"]["extendedResourceName"]  # written by an older run against v1beta2, say
    plan = plan_classes(wanted(), ours)
    assert plan.create == [] and plan.warnings == []
    (replaced,) = plan.replace
    assert replaced["metadata"]["name"] == "gpu.nvidia.com" and replaced["metadata"]["resourceVersion"] == "0"
    assert replaced["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert replaced["metadata"]["labels"] == {"fakegpu.io/virtual-node": "true"}


@pytest.mark.parametrize(("theirs", "said"), [(None, "not set"), ("example.com/gpu", "example.com/gpu")])
def test_someone_elses_class_is_never_overwritten_and_a_missing_extended_name_is_warned_about(theirs, said):
    gpu, mig = (listed(c) for c in wanted())  # not labelled as ours: NVIDIA's chart, say
    gpu["spec"].pop("extendedResourceName")
    if theirs is not None:
        gpu["spec"]["extendedResourceName"] = theirs
    plan = plan_classes(wanted(), [gpu, mig])
    assert plan.empty
    (warning,) = plan.warnings
    assert "gpu.nvidia.com" in warning and said in warning and "left alone" in warning
    assert "\n" not in warning


def test_someone_elses_class_with_the_same_extended_name_needs_no_warning():
    plan = plan_classes(wanted(), [listed(c) for c in wanted()])
    assert plan.empty and plan.warnings == []


def test_an_api_version_without_the_field_says_nvidia_gpu_requests_are_not_served():
    plan = plan_classes(wanted("resource.k8s.io/v1beta1"), [])
    assert len(plan.create) == 2
    (warning,) = plan.warnings
    assert "resource.k8s.io/v1beta1" in warning and "nvidia.com/gpu requests will not be served" in warning


def test_the_delete_selector_selects_the_tools_classes():
    key, value = delete_selector().split("=")
    assert all(c["metadata"]["labels"][key] == value for c in wanted())
