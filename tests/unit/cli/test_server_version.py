"""``--server-version``: what ``kubectl version`` prints, one documented range, and a hint for older APIs."""

from __future__ import annotations

import argparse

import pytest
import yaml

from fakegpu.cli.main import full_parser, main
from fakegpu.cli.slice_commands import SERVER_VERSION_HELP, server_minor
from fakegpu.kube.discovery import NEWEST_LAYOUT, OLDEST_MINOR


@pytest.mark.parametrize(
    ("text", "minor"),
    [("v1.36.2", 36), ("1.36.1", 36), ("1.36", 36), ("36", 36), ("v1.35.0-gke.100", 35), ("1.34+", 34)],
)
def test_accepts_what_kubectl_version_prints(text: str, minor: int) -> None:
    assert server_minor(text) == minor


def test_newer_versions_get_the_newest_layout() -> None:
    assert server_minor(f"v1.{NEWEST_LAYOUT + 3}.0") == NEWEST_LAYOUT


@pytest.mark.parametrize("text", ["2.1", "v2.36.0", "latest", "1.", f"1.{OLDEST_MINOR - 1}"])
def test_refuses_anything_else(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        server_minor(text)


def test_one_range_in_every_help() -> None:
    parser = full_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {
        name: action.help
        for name, child in sub.choices.items()
        for action in child._actions
        if "--server-version" in action.option_strings
    }
    assert set(helps) == {"slices", "dra", "virtual-nodes"}
    assert all(h is not None and h.startswith(SERVER_VERSION_HELP) for h in helps.values())
    assert f"1.{OLDEST_MINOR}-1.{NEWEST_LAYOUT}" in SERVER_VERSION_HELP


def test_same_slices_for_every_spelling(capsys: pytest.CaptureFixture[str]) -> None:
    outputs = set()
    for text in ("v1.35.2", "1.35", "35"):
        assert main(["slices", "--gpus", "1xt4", "--node-name", "n1", "--server-version", text]) == 0
        outputs.add(capsys.readouterr().out)
    assert len(outputs) == 1


def test_a_version_without_resource_v1_suggests_the_api_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["slices", "--gpus", "1xt4", "--server-version", "v1.33.4"]) == 2
    assert capsys.readouterr().err == (
        "fakegpu: error: --server-version 1.33: Kubernetes 1.33 does not serve resource.k8s.io/v1; "
        "pass --resource-api-version resource.k8s.io/v1beta2\n"
    )
    argv = ["slices", "--gpus", "1xt4", "--server-version", "1.33", "--resource-api-version", "resource.k8s.io/v1beta2"]
    assert main(argv) == 0
    assert yaml.safe_load_all(capsys.readouterr().out).__next__()["apiVersion"] == "resource.k8s.io/v1beta2"
