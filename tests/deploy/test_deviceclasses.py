"""The DeviceClasses committed in deploy/overlays/deviceclasses (shared by the dra and kwok overlays) are exactly
what `fakegpu deviceclasses` prints, so the classes a cluster gets cannot drift from the driver's own selectors."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from fakegpu.cli.main import main
from tests.deploy.manifests import DEPLOY, SHARED_DEVICE_CLASSES, find, load_docs, render_dir


def cli_device_classes(capsys: pytest.CaptureFixture[str], *flags: str) -> list[dict[str, Any]]:
    assert main(["deviceclasses", "--compute-domains", *flags]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d is not None]
    assert len(docs) == 5
    return docs


def test_compute_domain_classes_come_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    """The overlay holds NVIDIA's GPU classes and, since ComputeDomains, its two compute-domain classes
    (``--compute-domains``); without the flag ``fakegpu deviceclasses`` prints the GPU classes alone."""
    assert main(["deviceclasses"]) == 0
    plain = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d is not None]
    assert [d["metadata"]["name"] for d in plain] == ["gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"]
    assert cli_device_classes(capsys)[:3] == plain


def test_gpu_classes_are_the_charts_three(capsys: pytest.CaptureFixture[str]) -> None:
    """kubernetes-sigs/dra-driver-nvidia-gpu site/content/docs/reference/helm-values.md at commit 20c35fe (main,
    v0.5.0 docs): `resources.gpus.enabled` registers the `gpu.nvidia.com`, `mig.nvidia.com` and `vfio.gpu.nvidia.com`
    DeviceClasses, each selecting the driver's devices of one `type` (resourceslice-attributes.md: gpu, mig,
    vfio); only the whole-GPU class maps `nvidia.com/gpu` (deviceclass-gpu.yaml since v25.12.0)."""
    classes = {c["metadata"]["name"]: c["spec"] for c in cli_device_classes(capsys)}
    for name, device_type in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig"), ("vfio.gpu.nvidia.com", "vfio")):
        (selector,) = classes[name]["selectors"]
        assert selector["cel"]["expression"] == (
            f"device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '{device_type}'"
        )
    assert [n for n, spec in classes.items() if "extendedResourceName" in spec] == ["gpu.nvidia.com"]
    assert classes["gpu.nvidia.com"]["extendedResourceName"] == "nvidia.com/gpu"


def test_committed_device_classes_equal_the_cli_output(capsys: pytest.CaptureFixture[str]) -> None:
    committed = load_docs(DEPLOY / SHARED_DEVICE_CLASSES / "deviceclasses.yaml")
    assert committed == cli_device_classes(capsys)


def test_rendered_device_classes_keep_name_and_spec(capsys: pytest.CaptureFixture[str]) -> None:
    rendered = {c["metadata"]["name"]: c for c in find(render_dir(SHARED_DEVICE_CLASSES), "DeviceClass")}
    expected = {c["metadata"]["name"]: c for c in cli_device_classes(capsys)}
    assert rendered.keys() == expected.keys()
    for name, cls in rendered.items():
        assert cls["apiVersion"] == expected[name]["apiVersion"]
        assert cls["spec"] == expected[name]["spec"]
        assert "namespace" not in cls["metadata"]


def test_compute_domain_classes_select_as_nvidia_chart(capsys: pytest.CaptureFixture[str]) -> None:
    """The selectors of NVIDIA's chart (templates/deviceclass-compute-domain-*.yaml, as rendered in
    nvidia-dra-driver-gpu), character for character; no config and no extended resource."""
    classes = {c["metadata"]["name"]: c for c in cli_device_classes(capsys)}
    assert classes["compute-domain-daemon.nvidia.com"]["spec"] == {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'compute-domain.nvidia.com' && "
                    "device.attributes['compute-domain.nvidia.com'].type == 'daemon'"
                }
            }
        ]
    }
    assert classes["compute-domain-default-channel.nvidia.com"]["spec"] == {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'compute-domain.nvidia.com' && "
                    "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
                    "device.attributes['compute-domain.nvidia.com'].id == 0"
                }
            }
        ]
    }


def test_compute_domain_classes_follow_the_resource_api_version(capsys: pytest.CaptureFixture[str]) -> None:
    classes = cli_device_classes(capsys, "--resource-api-version", "resource.k8s.io/v1beta1")
    assert {c["apiVersion"] for c in classes} == {"resource.k8s.io/v1beta1"}
