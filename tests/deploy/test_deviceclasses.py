"""The DeviceClasses committed in deploy/overlays/deviceclasses (shared by the dra and kwok overlays) are exactly
what `fakegpu deviceclasses` prints, so the classes a cluster gets cannot drift from the driver's own selectors."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from fakegpu.cli.main import main
from tests.deploy.manifests import DEPLOY, SHARED_DEVICE_CLASSES, find, load_docs, render_dir


def cli_device_classes(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    assert main(["deviceclasses"]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d is not None]
    assert len(docs) == 2
    return docs


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
