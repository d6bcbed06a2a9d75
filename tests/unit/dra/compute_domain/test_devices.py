"""The compute-domain plugin's ResourceSlice: one pool per node, ``channel-0`` and ``daemon``, in every
resource.k8s.io version, valid against each version's schema.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/compute-domain-kubelet-plugin/deviceinfo.go`` and
``driver.go``: two devices with the attributes ``type`` and ``id`` only (the clique is read from the node at
prepare time, not published). The v1 slice as the API server stores it is checked by
tests/integration/test_compute_domain_plugin.py.
"""

from __future__ import annotations

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from fakegpu.cli.compute_domain_controller_command import DEFAULT_NAMESPACE as CONTROLLER_NAMESPACE
from fakegpu.dra.compute_domain.devices import COMPUTE_DOMAIN_DRIVER, compute_domain_devices, compute_domain_slice_spec
from fakegpu.dra.compute_domain.kubelet_plugin import ComputeDomainSettings, compute_domain_specs
from fakegpu.dra.compute_domain.resources import DRIVER_NAMESPACE
from fakegpu.dra.resource_slices import SliceOptions, slice_objects, spec_devices
from fakegpu.sharing.inputs import InventoryInputs, load_node

NODE = "gb200-rack0-1"
NODE_UID = "8d1f0c4e-0000-4000-8000-000000000001"
FIRST_MINOR = {"resource.k8s.io/v1": 34, "resource.k8s.io/v1beta2": 33, "resource.k8s.io/v1beta1": 32}
"""The oldest Kubernetes that serves each version: its schema is the strictest a slice meets."""


def test_two_devices_with_type_and_id_only():
    assert compute_domain_devices() == [
        {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
        {"name": "daemon", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}},
    ]


@pytest.mark.parametrize(("api_version", "minor"), FIRST_MINOR.items())
def test_the_slice_is_valid_in_every_version_and_owned_by_its_node(api_version, minor):
    node = load_node(InventoryInputs(node_name=NODE, gpus=("4xgb200",)))
    opts = SliceOptions(driver=COMPUTE_DOMAIN_DRIVER, server_minor=minor, api_version=api_version)
    (obj,) = slice_objects(node, opts, [compute_domain_slice_spec(NODE, api_version)], node_uid=NODE_UID)
    kubernetes_validate.validate(obj, f"1.{minor}.0", strict=True)
    assert obj["metadata"]["ownerReferences"][0]["name"] == NODE
    assert obj["spec"]["driver"] == COMPUTE_DOMAIN_DRIVER
    assert obj["spec"]["nodeName"] == NODE
    assert obj["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert spec_devices(obj["spec"]) == compute_domain_devices()


def test_v1beta1_wraps_each_device_in_basic():
    spec = compute_domain_slice_spec(NODE, "resource.k8s.io/v1beta1")
    assert [d["name"] for d in spec["devices"]] == ["channel-0", "daemon"]
    assert spec["devices"][0] == {
        "name": "channel-0",
        "basic": {"attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
    }


def test_the_pool_generation_is_the_callers():
    assert compute_domain_slice_spec(NODE, "resource.k8s.io/v1", generation=7)["pool"]["generation"] == 7


def test_the_published_slice_ignores_gpu_health():
    """NVIDIA taints no channel: an unhealthy GPU leaves the compute-domain slice as it is (the node's
    daemon reports NotReady instead). The publisher sets the generation, so the plugin's spec has 0."""
    node = load_node(InventoryInputs(node_name=NODE, gpus=("4xgb200",)))
    opts = SliceOptions(driver=COMPUTE_DOMAIN_DRIVER)
    healthy = compute_domain_specs(node, opts, {})
    unhealthy = compute_domain_specs(node, opts, {node.gpus[0].uuid: 79})
    assert healthy == unhealthy == [compute_domain_slice_spec(NODE, opts.api_version, generation=0)]


def test_the_plugin_defaults_to_the_namespace_the_controller_defaults_to():
    """The controller and the node plugins must agree where the cliques live (``fakegpu dra
    --compute-domains`` and ``fakegpu compute-domain-controller``, both without ``--namespace``)."""
    assert ComputeDomainSettings().namespace == DRIVER_NAMESPACE == CONTROLLER_NAMESPACE == "fakegpu"
