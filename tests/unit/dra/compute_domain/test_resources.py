"""The ComputeDomain resources and values fakegpu reads and writes agree with the CRDs it ships
(deploy/overlays/compute-domains, NVIDIA's ``api/nvidia.com/resource/v1beta1`` as driver 25.12 installs it):
the same group, version, kind, plural and scope, and status and allocation-mode values the schemas accept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fakegpu.dra.compute_domain.domain_configs import ALLOCATION_MODES
from fakegpu.dra.compute_domain.resources import API_VERSION, NOT_READY, READY, ComputeDomain, ComputeDomainClique

OVERLAY = Path(__file__).resolve().parents[4] / "deploy" / "overlays" / "compute-domains"


def crd(plural: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((OVERLAY / f"{plural}-crd.yaml").read_text())
    return loaded


def schema(plural: str) -> dict[str, Any]:
    (version,) = crd(plural)["spec"]["versions"]
    properties: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]
    return properties


@pytest.mark.parametrize(
    ("resource", "plural"), [(ComputeDomain, "computedomains"), (ComputeDomainClique, "computedomaincliques")]
)
def test_each_resource_is_the_crd_it_names(resource, plural):
    info = resource._api_info
    spec = crd(plural)["spec"]
    (version,) = spec["versions"]
    assert f"{info.resource.group}/{info.resource.version}" == f"{spec['group']}/{version['name']}" == API_VERSION
    assert (info.resource.kind, info.plural) == (spec["names"]["kind"], spec["names"]["plural"])
    assert spec["scope"] == "Namespaced"


def test_the_domain_status_is_written_through_the_subresource_the_crd_declares():
    (version,) = crd("computedomains")["spec"]["versions"]
    assert "status" in version["subresources"]
    assert ComputeDomain.Status._api_info.action == "status"


def test_the_status_values_written_are_the_ones_the_crds_accept():
    cd_status = schema("computedomains")["status"]["properties"]
    assert {READY, NOT_READY} == set(cd_status["status"]["enum"])
    assert {READY, NOT_READY} == set(cd_status["nodes"]["items"]["properties"]["status"]["enum"])
    daemon = schema("computedomaincliques")["daemons"]["items"]["properties"]
    assert {READY, NOT_READY} == set(daemon["status"]["enum"])


def test_the_allocation_modes_decoded_are_the_ones_a_domain_may_have():
    channel = schema("computedomains")["spec"]["properties"]["channel"]["properties"]
    assert set(ALLOCATION_MODES) == set(channel["allocationMode"]["enum"])
