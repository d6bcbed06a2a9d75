"""DeviceClasses matching NVIDIA's Helm chart, so claims written for NVIDIA's driver work unchanged.

A claim names a class (``gpu.nvidia.com`` for whole GPUs, ``mig.nvidia.com`` for MIG devices,
``vfio.gpu.nvidia.com`` for VFIO passthrough, which fakegpu does not publish); the class's CEL selector
picks this driver's devices by their ``type`` attribute. NVIDIA's compute-domain
driver has two more (``compute_domain_device_classes``), for ComputeDomains' IMEX daemons and channels.
"""

from __future__ import annotations

from typing import Any

from fakegpu.dra.compute_domain.devices import CHANNEL_TYPE, COMPUTE_DOMAIN_DRIVER, DAEMON_TYPE
from fakegpu.dra.compute_domain.resources import DAEMON_CLASS, DEFAULT_CHANNEL_CLASS
from fakegpu.dra.resource_slices import check_driver_name
from fakegpu.kube.discovery import SUPPORTED_API_VERSIONS
from fakegpu.sharing.label_syntax import key_problem

GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
VFIO_CLASS = "vfio.gpu.nvidia.com"
VFIO_TYPE = "vfio"
EXTENDED_RESOURCE_NAME = "nvidia.com/gpu"
"""What NVIDIA's chart maps to the whole-GPU class."""


def selector_expression(driver: str, device_type: str) -> str:
    """NVIDIA's CEL selector: this driver's devices of one ``type`` (its attributes live in the driver's domain)."""
    return f"device.driver == '{driver}' && device.attributes['{driver}'].type == '{device_type}'"


def class_names(driver: str) -> tuple[str, str]:
    """The whole-GPU and MIG DeviceClass names for ``driver``: NVIDIA's for ``gpu.nvidia.com``, and for
    another driver the same pattern in its domain (``gpu.example.com``: ``gpu.example.com``,
    ``mig.example.com``), so classes of two drivers never share a name."""
    domain = driver.removeprefix("gpu.")
    return f"gpu.{domain}", f"mig.{domain}"


def device_classes(
    driver: str = "gpu.nvidia.com",
    api_version: str = "resource.k8s.io/v1",
    extended_resource_name: str | None = EXTENDED_RESOURCE_NAME,
) -> list[dict[str, Any]]:
    """The whole-GPU and MIG DeviceClasses for ``driver`` (``gpu.nvidia.com`` and ``mig.nvidia.com`` for
    NVIDIA's driver name; ``class_names`` for another).

    ``extended_resource_name`` goes on the whole-GPU class only, and only for ``resource.k8s.io/v1``: as
    in NVIDIA's chart (its gpu.nvidia.com DeviceClass, since v25.12.0), pods asking for ``nvidia.com/gpu`` are
    then served by DRA on clusters with the DRAExtendedResource feature (beta, on by default from 1.36) on
    nodes that do not advertise the resource through a device plugin. It is left out where the cluster is
    served an older version, which cannot carry it, and with ``None``."""
    check_driver_name(driver)
    if api_version not in SUPPORTED_API_VERSIONS:
        raise ValueError(
            f"unsupported API version {api_version!r}; expected one of {', '.join(SUPPORTED_API_VERSIONS)}"
        )
    if extended_resource_name is not None and (
        "/" not in extended_resource_name or key_problem(extended_resource_name) is not None
    ):
        raise ValueError(f"extended resource name {extended_resource_name!r} must look like <domain>/<name>")
    classes = []
    for name, device_type in zip(class_names(driver), ("gpu", "mig"), strict=True):
        spec: dict[str, Any] = {"selectors": [{"cel": {"expression": selector_expression(driver, device_type)}}]}
        if device_type == "gpu" and extended_resource_name and api_version == "resource.k8s.io/v1":
            spec["extendedResourceName"] = extended_resource_name
        classes.append({"apiVersion": api_version, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec})
    return classes


def vfio_device_class(driver: str = "gpu.nvidia.com", api_version: str = "resource.k8s.io/v1") -> dict[str, Any]:
    """NVIDIA's VFIO passthrough class (``vfio.gpu.nvidia.com``; ``vfio.<driver>`` for another driver name),
    which its chart installs with the GPU and MIG classes whatever the gates say. fakegpu publishes no
    ``vfio`` devices, so a claim naming it waits for a device as it does on NVIDIA's driver without
    PassthroughSupport, instead of failing on a missing class."""
    check_driver_name(driver)
    if api_version not in SUPPORTED_API_VERSIONS:
        raise ValueError(
            f"unsupported API version {api_version!r}; expected one of {', '.join(SUPPORTED_API_VERSIONS)}"
        )
    name = VFIO_CLASS if driver == "gpu.nvidia.com" else f"vfio.{driver}"
    spec = {"selectors": [{"cel": {"expression": selector_expression(driver, VFIO_TYPE)}}]}
    return {"apiVersion": api_version, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


COMPUTE_DOMAIN_CLASSES = (DAEMON_CLASS, DEFAULT_CHANNEL_CLASS)
"""The DeviceClasses of NVIDIA's compute-domain driver (its chart's ``deviceclass-compute-domain-*.yaml``)."""


def compute_domain_device_classes(api_version: str = "resource.k8s.io/v1") -> list[dict[str, Any]]:
    """NVIDIA's two ComputeDomain DeviceClasses: ``compute-domain-daemon.nvidia.com`` (a node's IMEX daemon
    device) and ``compute-domain-default-channel.nvidia.com`` (IMEX channel 0, the workload template's class).
    Selectors exactly as the chart's; no config, no extended resource."""
    if api_version not in SUPPORTED_API_VERSIONS:
        raise ValueError(
            f"unsupported API version {api_version!r}; expected one of {', '.join(SUPPORTED_API_VERSIONS)}"
        )
    driver = COMPUTE_DOMAIN_DRIVER
    expressions = {
        DAEMON_CLASS: selector_expression(driver, DAEMON_TYPE),
        DEFAULT_CHANNEL_CLASS: f"{selector_expression(driver, CHANNEL_TYPE)} && device.attributes['{driver}'].id == 0",
    }
    return [
        {
            "apiVersion": api_version,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expressions[name]}}]},
        }
        for name in COMPUTE_DOMAIN_CLASSES
    ]
