"""DeviceClasses: NVIDIA's two classes, valid for every API version, with the driver substituted."""

from __future__ import annotations

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from fakegpu.dra.device_classes import device_classes, vfio_device_class

VERSIONS = ["resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1"]


@pytest.mark.parametrize("server", ["1.34.0", "1.35.0", "1.36.0"])
@pytest.mark.parametrize("api", VERSIONS)
def test_classes_validate(api, server):
    for obj in [
        *device_classes(api_version=api, extended_resource_name="nvidia.com/gpu"),
        vfio_device_class(api_version=api),
    ]:
        kubernetes_validate.validate(obj, server, strict=True)


def test_nvidia_selectors():
    gpu, mig = device_classes(extended_resource_name=None)
    assert gpu == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": "device.driver == 'gpu.nvidia.com' && "
                        "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                    }
                }
            ]
        },
    }
    assert mig["metadata"] == {"name": "mig.nvidia.com"}
    assert mig["spec"]["selectors"][0]["cel"]["expression"] == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
    )


def test_another_driver_name_names_the_classes_in_its_domain_and_selects_its_devices():
    """Classes of two drivers never share a name (issue 15: ``--driver-name`` must rename them)."""
    gpu, mig = device_classes(driver="gpu.fake.example.com")
    assert [gpu["metadata"]["name"], mig["metadata"]["name"]] == ["gpu.fake.example.com", "mig.fake.example.com"]
    expression = mig["spec"]["selectors"][0]["cel"]["expression"]
    assert expression == (
        "device.driver == 'gpu.fake.example.com' && device.attributes['gpu.fake.example.com'].type == 'mig'"
    )
    assert "nvidia" not in expression


def test_extended_resource_name_by_default_only_for_v1_and_only_on_the_gpu_class():
    """NVIDIA's chart (kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu, its gpu class,
    since v25.12.0) sets `extendedResourceName: nvidia.com/gpu` on the gpu.nvidia.com class when the cluster
    serves resource.k8s.io/v1, and on no other class; older API versions cannot carry the field."""
    gpu, mig = device_classes()
    assert gpu["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "extendedResourceName" not in mig["spec"]
    for api in VERSIONS[1:]:
        classes = device_classes(api_version=api)
        assert all("extendedResourceName" not in c["spec"] for c in classes)
        assert all(c["apiVersion"] == api for c in classes)
    assert all("extendedResourceName" not in c["spec"] for c in device_classes(extended_resource_name=None))
    gpu, _ = device_classes(extended_resource_name="example.com/gpu")
    assert gpu["spec"]["extendedResourceName"] == "example.com/gpu"


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="DNS subdomain"):
        device_classes(driver="gpu.nvidia.com' || true || '")
    with pytest.raises(ValueError, match="unsupported API version"):
        device_classes(api_version="resource.k8s.io/v1alpha3")
    with pytest.raises(ValueError, match="extended resource"):
        device_classes(extended_resource_name="gpu")


def test_vfio_class_follows_the_driver_name_and_selects_only_vfio_devices():
    """kubernetes-sigs/dra-driver-nvidia-gpu site/content/docs/reference/helm-values.md at commit 20c35fe (main,
    v0.5.0 docs): the chart installs `vfio.gpu.nvidia.com` with the GPU and MIG classes; its selector picks
    devices of `type` vfio (resourceslice-attributes.md), which fakegpu never publishes, and it maps no extended
    resource."""
    nvidia = vfio_device_class()
    assert nvidia["metadata"]["name"] == "vfio.gpu.nvidia.com"
    assert nvidia["spec"] == {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'vfio'"
                }
            }
        ]
    }
    other = vfio_device_class("gpu.example.com", "resource.k8s.io/v1beta1")
    assert (other["apiVersion"], other["metadata"]["name"]) == ("resource.k8s.io/v1beta1", "vfio.gpu.example.com")
    assert other["metadata"]["name"] not in {c["metadata"]["name"] for c in device_classes("gpu.example.com")}
    with pytest.raises(ValueError, match="unsupported API version"):
        vfio_device_class(api_version="resource.k8s.io/v1alpha3")
    with pytest.raises(ValueError, match="driver name"):
        vfio_device_class("GPU.example.com")
