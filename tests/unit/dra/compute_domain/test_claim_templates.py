"""The two ResourceClaimTemplates the controller writes for a ComputeDomain, in every resource.k8s.io version.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``templates/compute-domain-workload-claim-template.tmpl.yaml``,
``templates/compute-domain-daemon-resource-claim-template.tmpl.yaml`` and
``cmd/compute-domain-controller/resourceclaimtemplate.go`` (driver 25.12). The resource.k8s.io/v1 bodies as
the API server stores them are checked by tests/integration/test_compute_domain_controller.py; here: the
older layouts, where each template goes, and that a claim made from a template prepares with its domain.
"""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.dra.compute_domain.claim_templates import (
    daemon_template,
    daemon_template_name,
    workload_template,
)
from fakegpu.dra.compute_domain.domain_configs import DomainConfig, domain_configs, pick_config
from fakegpu.dra.compute_domain.resources import (
    CHANNEL_CONFIG_KIND,
    COMPUTE_DOMAIN_FINALIZER,
    COMPUTE_DOMAIN_LABEL,
    DAEMON_CONFIG_KIND,
    TARGET_LABEL,
)

UID = "5e0c1a52-0000-4000-8000-00000000000a"
DRIVER = "compute-domain.nvidia.com"
API_VERSIONS = ("resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1")


def domain(allocation_mode: str | None = None, template: str = "wl-channel", namespace: str = "team") -> dict[str, Any]:
    """A ComputeDomain as the API server returns it (uid set; allocationMode left out unless given)."""
    channel: dict[str, Any] = {"resourceClaimTemplate": {"name": template}}
    if allocation_mode is not None:
        channel["allocationMode"] = allocation_mode
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "cd", "namespace": namespace, "uid": UID},
        "spec": {"numNodes": 2, "channel": channel},
    }


def config_from(template: dict[str, Any]) -> list[dict[str, Any]]:
    """The allocation's device configs of a claim made from ``template``, as the resource-claim controller and
    the scheduler copy them (``source: FromClaim``)."""
    return [{"source": "FromClaim", **entry} for entry in template["spec"]["spec"]["devices"]["config"]]


def test_the_workload_template_lives_in_the_domain_namespace_under_the_name_the_domain_gives():
    template = workload_template(domain(template="imex-0", namespace="ml"), "resource.k8s.io/v1")
    assert (template["metadata"]["namespace"], template["metadata"]["name"]) == ("ml", "imex-0")
    assert template["metadata"]["labels"] == {COMPUTE_DOMAIN_LABEL: UID, TARGET_LABEL: "Workload"}
    assert template["metadata"]["finalizers"] == [COMPUTE_DOMAIN_FINALIZER]


def test_the_daemon_template_lives_in_the_driver_namespace_named_after_the_domain_uid():
    template = daemon_template(domain(namespace="ml"), "nvidia-dra-driver-gpu", "resource.k8s.io/v1")
    assert template["metadata"]["namespace"] == "nvidia-dra-driver-gpu"
    assert template["metadata"]["name"] == daemon_template_name(UID) == f"computedomain-daemon-{UID}"
    assert template["metadata"]["labels"] == {COMPUTE_DOMAIN_LABEL: UID, TARGET_LABEL: "Daemon"}
    assert template["metadata"]["finalizers"] == [COMPUTE_DOMAIN_FINALIZER]


@pytest.mark.parametrize("api_version", API_VERSIONS)
def test_requests_name_their_device_class_as_each_resource_version_spells_it(api_version):
    """resource.k8s.io/v1beta1 has ``deviceClassName`` on the request; v1beta2 and v1 moved it under
    ``exactly`` (beside ``firstAvailable``)."""
    workload = workload_template(domain(), api_version)
    daemon = daemon_template(domain(), "fakegpu", api_version)
    assert workload["apiVersion"] == daemon["apiVersion"] == api_version
    assert workload["kind"] == daemon["kind"] == "ResourceClaimTemplate"
    requests = [t["spec"]["spec"]["devices"]["requests"] for t in (workload, daemon)]
    if api_version == "resource.k8s.io/v1beta1":
        assert requests == [
            [{"name": "channel", "deviceClassName": "compute-domain-default-channel.nvidia.com"}],
            [{"name": "daemon", "deviceClassName": "compute-domain-daemon.nvidia.com"}],
        ]
    else:
        assert requests == [
            [{"name": "channel", "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"}}],
            [{"name": "daemon", "exactly": {"deviceClassName": "compute-domain-daemon.nvidia.com"}}],
        ]


@pytest.mark.parametrize(
    ("given", "expected"), [(None, "Single"), ("", "Single"), ("Single", "Single"), ("All", "All")]
)
def test_the_channel_config_carries_the_domain_allocation_mode_single_by_default(given, expected):
    (entry,) = workload_template(domain(given), "resource.k8s.io/v1")["spec"]["spec"]["devices"]["config"]
    assert entry["opaque"]["parameters"]["allocationMode"] == expected


@pytest.mark.parametrize("api_version", API_VERSIONS)
def test_a_claim_made_from_the_workload_template_prepares_channel_0_of_its_domain(api_version):
    """The template's config and the plugin's decoder agree: the channel request gets a valid
    ComputeDomainChannelConfig naming the domain, with the domain's allocation mode."""
    configs = domain_configs(config_from(workload_template(domain("All"), api_version)), DRIVER, "team/wl")
    config = pick_config(configs, "channel", CHANNEL_CONFIG_KIND)
    assert config == DomainConfig(CHANNEL_CONFIG_KIND, UID, "All", "config[0]")
    config.validate()


@pytest.mark.parametrize("api_version", API_VERSIONS)
def test_a_claim_made_from_the_daemon_template_prepares_the_daemon_of_its_domain(api_version):
    configs = domain_configs(config_from(daemon_template(domain(), "fakegpu", api_version)), DRIVER, "fakegpu/d")
    config = pick_config(configs, "daemon", DAEMON_CONFIG_KIND)
    assert config == DomainConfig(DAEMON_CONFIG_KIND, UID, "", "config[0]")
    config.validate()


def test_two_domains_never_share_a_daemon_template():
    other = domain()
    other["metadata"]["uid"] = "5e0c1a52-0000-4000-8000-00000000000b"
    names = {daemon_template(d, "fakegpu", "resource.k8s.io/v1")["metadata"]["name"] for d in (domain(), other)}
    assert len(names) == 2
