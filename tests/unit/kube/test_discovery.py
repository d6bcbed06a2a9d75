"""Which Kubernetes minor and which resource.k8s.io version slices are published for: one table, one newest
layout, used by the DRA daemon, the virtual nodes and the command line alike."""

from __future__ import annotations

import argparse

import pytest

from fakegpu.cli.slice_commands import server_minor
from fakegpu.kube.discovery import (
    API_PREFERENCE,
    NEWEST_LAYOUT,
    OLDEST_MINOR,
    SLICE_KINDS,
    SUPPORTED_API_VERSIONS,
    DiscoveryError,
    layout_minor,
    minor_from_kubelet_version,
    minor_from_version_document,
    served_api_version,
)

V1, V1BETA2, V1BETA1 = "resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1"


def test_every_supported_version_has_a_lightkube_kind_newest_first():
    assert list(SLICE_KINDS) == list(SUPPORTED_API_VERSIONS) == API_PREFERENCE == [V1, V1BETA2, V1BETA1]
    assert all(SLICE_KINDS[v]._api_info.resource.version == v.rsplit("/", 1)[1] for v in SLICE_KINDS)


@pytest.mark.parametrize(
    ("minor", "api_version", "layout"),
    [
        (36, V1, 36),
        (NEWEST_LAYOUT + 5, V1, NEWEST_LAYOUT),  # newer servers get the newest layout fakegpu knows
        (NEWEST_LAYOUT + 5, None, NEWEST_LAYOUT),
        (38, V1BETA1, 37),  # the last minor serving v1beta1
        (30, V1BETA1, 32),  # the first one
        (33, V1, 34),
        (33, None, 33),
    ],
)
def test_the_layout_is_clamped_to_what_serves_the_version_and_what_fakegpu_knows(minor, api_version, layout):
    assert layout_minor(minor, api_version) == layout


@pytest.mark.parametrize(("version", "minor"), [("v1.36.2", 36), ("1.35.0-gke.1", 35), ("v2.1.0", None), ("x", None)])
def test_the_kubelet_version_stands_in_for_the_servers(version, minor):
    assert minor_from_kubelet_version(version) == minor


def test_the_version_document_gives_the_minor():
    assert minor_from_version_document({"major": "1", "minor": "36"}) == 36
    assert minor_from_version_document({"major": "1", "minor": "36+"}) == 36
    with pytest.raises(DiscoveryError, match=r"reports version '2'.'0'; expected 1.<minor>"):
        minor_from_version_document({"major": "2", "minor": "0"})
    with pytest.raises(DiscoveryError):
        minor_from_version_document(["not", "a", "mapping"])


async def test_the_newest_served_version_wins():
    asked: list[str] = []

    async def serves(version: str) -> bool:
        asked.append(version)
        return version == V1BETA2

    assert await served_api_version(serves) == V1BETA2
    assert asked == [V1, V1BETA2]

    async def none(version: str) -> bool:
        return False

    assert await served_api_version(none) is None


def test_the_command_line_accepts_exactly_the_known_versions():
    assert server_minor(f"1.{OLDEST_MINOR}") == OLDEST_MINOR == 32
    assert server_minor(f"1.{NEWEST_LAYOUT}") == NEWEST_LAYOUT
    with pytest.raises(argparse.ArgumentTypeError, match=f"expected 1.{OLDEST_MINOR}-1.{NEWEST_LAYOUT} or newer"):
        server_minor(f"1.{OLDEST_MINOR - 1}")
    # A newer server gets the newest layout, as discovery gives it (issue 15: one range, what kubectl prints).
    assert server_minor(f"v1.{NEWEST_LAYOUT + 1}.0") == NEWEST_LAYOUT
