"""``-o`` is table|json|yaml wherever a table makes sense, and YAML never turns a label value into a number."""

from __future__ import annotations

import json

import pytest
import yaml

from fakegpu.cli.main import main
from fakegpu.cli.yaml_output import dump_yaml, looks_like_another_type


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


NODE = ("--gpus", "1xh100-80gb", "--node-name", "n1")


@pytest.mark.parametrize("command", ["devices", "labels"])
def test_table_json_yaml_agree(capsys: pytest.CaptureFixture[str], command: str) -> None:
    as_json = json.loads(run(capsys, command, *NODE, "-o", "json"))
    assert yaml.safe_load(run(capsys, command, *NODE, "-o", "yaml")) == as_json
    assert run(capsys, command, *NODE, "-o", "table") == run(capsys, command, *NODE)


def test_labels_text_is_an_alias_of_table(capsys: pytest.CaptureFixture[str]) -> None:
    table = run(capsys, "labels", *NODE, "-o", "table")
    assert run(capsys, "labels", *NODE, "-o", "text") == table
    assert "nvidia.com/gpu.count=1\n" in table


def test_label_values_that_look_like_numbers_are_quoted(capsys: pytest.CaptureFixture[str]) -> None:
    """``nvidia.com/cuda.driver.rev: 08`` is the integer 8 to a YAML 1.2 reader (kubectl kustomize)."""
    out = run(capsys, "labels", *NODE, "-o", "yaml")
    assert 'nvidia.com/cuda.driver.rev: "08"\n' in out
    assert 'nvidia.com/gpu.count: "1"\n' in out
    assert "nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3\n" in out
    devices = run(capsys, "devices", *NODE, "-o", "yaml")
    assert 'nvidia.com/cuda.driver.rev: "08"' in devices


@pytest.mark.parametrize(
    ("text", "other_type"),
    [
        ("08", True),
        ("8", True),
        ("12.8", True),
        ("1e3", True),
        ("0x1F", True),
        ("0o17", True),
        (".inf", True),
        ("true", True),
        ("yes", True),
        ("off", True),
        ("null", True),
        ("~", True),
        ("", True),
        ("1_000", True),
        ("1:20", True),
        ("570.172.08", False),
        ("Tesla-T4", False),
        ("GPU-94137062", False),
        ("v1", False),
    ],
)
def test_what_counts_as_another_type(text: str, other_type: bool) -> None:
    assert looks_like_another_type(text) is other_type
    assert yaml.safe_load(dump_yaml({"k": text})) == {"k": text}


@pytest.mark.parametrize("command", ["slices", "deviceclasses"])
def test_api_objects_as_yaml_or_a_json_list(capsys: pytest.CaptureFixture[str], command: str) -> None:
    argv = (command, "--node-name", "n1") if command == "slices" else (command,)
    documents = list(yaml.safe_load_all(run(capsys, *argv)))
    assert run(capsys, *argv, "-o", "yaml") == run(capsys, *argv)
    listed = json.loads(run(capsys, *argv, "-o", "json"))
    assert (listed["kind"], listed["items"]) == ("List", documents)


def test_deviceclasses_driver_name_renames_the_classes(capsys: pytest.CaptureFixture[str]) -> None:
    classes = list(yaml.safe_load_all(run(capsys, "deviceclasses", "--driver-name", "gpu.example.com")))
    assert [c["metadata"]["name"] for c in classes] == ["gpu.example.com", "mig.example.com", "vfio.gpu.example.com"]
    for c in classes:
        assert "device.driver == 'gpu.example.com'" in c["spec"]["selectors"][0]["cel"]["expression"]
    other = list(yaml.safe_load_all(run(capsys, "deviceclasses", "--driver-name", "fake.dev")))
    assert [c["metadata"]["name"] for c in other] == ["gpu.fake.dev", "mig.fake.dev", "vfio.fake.dev"]
