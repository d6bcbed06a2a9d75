"""The compute-domain driver's opaque configs: strict decoding, precedence, request matching, validation.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``api/nvidia.com/resource/v1beta1`` (the ComputeDomain config
types and ``ValidateDomainID``) and ``cmd/compute-domain-kubelet-plugin/device_state.go`` (configs walked
from the highest precedence down, class configs before claim configs, NVIDIA's default configs last).
"""

from __future__ import annotations

from typing import Any

import pytest

from fakegpu.dra.claim_error import ClaimError
from fakegpu.dra.compute_domain.domain_configs import (
    DEFAULTS,
    ConfigEntry,
    DomainConfig,
    domain_configs,
    domain_id_problem,
    pick_config,
)

DRIVER = "compute-domain.nvidia.com"
API = "resource.nvidia.com/v1beta1"
CHANNEL = "ComputeDomainChannelConfig"
DAEMON = "ComputeDomainDaemonConfig"
UID = "5e0c1a52-0000-4000-8000-00000000000a"
OTHER = "5e0c1a52-0000-4000-8000-00000000000b"


def params(kind: str = CHANNEL, domain_id: Any = UID, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind, "domainID": domain_id, **extra}


def entry(parameters: Any, requests: Any = ("channel",), source: str = "FromClaim", driver: str = DRIVER) -> Any:
    """An allocation's device config entry (``requests`` a tuple becomes a list, anything else is kept)."""
    return {
        "source": source,
        "requests": list(requests) if isinstance(requests, tuple) else requests,
        "opaque": {"driver": driver, "parameters": parameters},
    }


def decode_error(*entries: Any) -> str:
    with pytest.raises(ClaimError) as info:
        domain_configs(list(entries), DRIVER, "team/wl")
    return str(info.value)


# --- domainID ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("domain_id", [UID, "a", "a.b_c-d", "A" * 63])
def test_a_domain_id_that_is_a_path_component_and_a_label_value_is_accepted(domain_id):
    assert domain_id_problem(domain_id) is None


def test_an_empty_domain_id_is_refused_with_nvidia_text():
    assert domain_id_problem("") == "domainID cannot be empty"


@pytest.mark.parametrize("domain_id", [".", "..", "a/b", "/", "a\x00b"])
def test_a_domain_id_that_is_no_single_path_component_is_refused(domain_id):
    """The ID names the daemon's directory ``<plugin dir>/domains/<domainID>``: it must not climb out."""
    problem = domain_id_problem(domain_id)
    assert problem == (
        f"domainID {domain_id!r} is not a valid single path component: must not contain '/' or be '.' or '..'"
    )


@pytest.mark.parametrize("domain_id", ["A" * 64, "-a", "a-", ".a", "a b", "é"])
def test_a_domain_id_that_is_no_label_value_is_refused(domain_id):
    """The ID is also the node label's value: at most 63 characters, alphanumeric at both ends."""
    problem = domain_id_problem(domain_id)
    assert problem is not None and problem.startswith("domainID must be a valid label value")


def test_validation_wraps_the_problem_and_checks_the_allocation_mode():
    with pytest.raises(ClaimError, match=r"^error validating config: domainID cannot be empty$"):
        DomainConfig(CHANNEL, "").validate()
    with pytest.raises(ClaimError) as info:
        DomainConfig(CHANNEL, UID, "Some").validate()
    assert str(info.value) == "error validating config: unknown allocationMode 'Some' (expected one of Single, All)"
    for mode in ("", "Single", "All"):
        DomainConfig(CHANNEL, UID, mode).validate()


def test_the_defaults_have_no_domain_so_a_claim_without_config_fails_validation():
    """``DefaultComputeDomainChannelConfig()`` and ``DefaultComputeDomainDaemonConfig()``: an empty domainID."""
    configs = domain_configs(None, DRIVER, "team/wl")
    assert configs == list(DEFAULTS)
    for request, kind in (("channel", CHANNEL), ("daemon", DAEMON)):
        config = pick_config(configs, request, kind)
        assert (config.kind, config.domain_id, config.where) == (kind, "", "default config")
        with pytest.raises(ClaimError, match="domainID cannot be empty"):
            config.validate()


# --- strict decoding --------------------------------------------------------------------------------------


def test_a_decoded_config_keeps_its_fields_and_says_where_it_came_from():
    configs = domain_configs([entry(params(allocationMode="All"), ("channel",))], DRIVER, "team/wl")
    assert configs[-1] == ConfigEntry(("channel",), DomainConfig(CHANNEL, UID, "All", "config[0]"))


def test_a_daemon_config_has_no_allocation_mode():
    """Strict decoding by kind: a field of the channel config is unknown to the daemon config."""
    message = decode_error(entry(params(DAEMON, allocationMode="All"), ("daemon",)))
    assert message == 'error decoding config parameters: config[0]: json: unknown field "allocationMode"'


@pytest.mark.parametrize(
    ("parameters", "detail"),
    [
        (None, "parameters must be an object"),
        (["x"], "parameters must be an object"),
        (
            params(kind="GpuConfig"),
            f"runtime object is not a recognized configuration: apiVersion {API!r}, kind 'GpuConfig' "
            f"(expected {API} {CHANNEL} or {DAEMON})",
        ),
        (
            {"apiVersion": "resource.nvidia.com/v1", "kind": CHANNEL},
            "runtime object is not a recognized configuration: apiVersion 'resource.nvidia.com/v1', kind "
            f"'{CHANNEL}' (expected {API} {CHANNEL} or {DAEMON})",
        ),
        ({"kind": CHANNEL}, "runtime object is not a recognized configuration: apiVersion None"),
        (params(domain_id=5), "domainID must be a string, found 5"),
        (params(allocationMode=None), "allocationMode must be a string, found None"),
    ],
)
def test_parameters_that_cannot_be_decoded_are_refused(parameters, detail):
    message = decode_error(entry(parameters))
    assert message.startswith(f"error decoding config parameters: config[0]: {detail}")


def test_the_entry_index_counts_every_entry_of_the_allocation():
    """``config[i]`` points into ``status.allocation.devices.config``, other drivers' entries included."""
    message = decode_error(entry(params(), driver="gpu.nvidia.com"), entry(params(), source="FromClass"), entry({}))
    assert message.startswith("error decoding config parameters: config[2]: ")


def test_the_allocation_configs_must_be_a_list_of_objects():
    with pytest.raises(ClaimError) as info:
        domain_configs({"requests": []}, DRIVER, "team/wl")
    assert str(info.value) == "claim team/wl: status.allocation.devices.config must be a list"
    assert decode_error(entry(params()), "oops") == "claim team/wl: config[1] must be an object"


@pytest.mark.parametrize("requests", ["channel", [1], ["channel", None]])
def test_requests_must_be_a_list_of_names(requests):
    message = decode_error(entry(params(), requests))
    assert message == "claim team/wl: config[0]: requests must be a list of request names"


def test_entries_of_other_drivers_and_unknown_sources_are_not_decoded():
    """Another driver's parameters are its own business, even unparseable ones."""
    entries = [
        entry({"whatever": True}, driver="gpu.nvidia.com"),
        entry({"whatever": True}, source="FromSomewhere"),
        {"source": "FromClaim", "requests": [], "opaque": None},
        {"source": "FromClaim", "requests": []},
    ]
    assert domain_configs(entries, DRIVER, "team/wl") == list(DEFAULTS)


# --- precedence and request matching ----------------------------------------------------------------------


def test_class_configs_come_before_claim_configs_whatever_their_order():
    entries = [entry(params(domain_id=UID)), entry(params(domain_id=OTHER), source="FromClass")]
    configs = domain_configs(entries, DRIVER, "team/wl")
    assert [c.config.domain_id for c in configs] == ["", "", OTHER, UID]
    assert pick_config(configs, "channel", CHANNEL).domain_id == UID, "the claim's config wins"


def test_an_entry_naming_another_request_is_passed_over():
    configs = domain_configs([entry(params(domain_id=OTHER), ("other",)), entry(params(), ())], DRIVER, "team/wl")
    assert pick_config(configs, "channel", CHANNEL).domain_id == UID


def test_a_config_of_the_wrong_kind_named_for_the_request_is_an_error():
    configs = domain_configs([entry(params(DAEMON), ("daemon", "channel"))], DRIVER, "team/wl")
    with pytest.raises(ClaimError, match=r"^cannot apply ComputeDomainDaemonConfig to request: channel$"):
        pick_config(configs, "channel", CHANNEL)
    assert pick_config(configs, "daemon", DAEMON).domain_id == UID


def test_an_all_requests_config_of_the_wrong_kind_is_skipped():
    """It applies to the daemon request only; the channel falls through to the default (and fails validation)."""
    configs = domain_configs([entry(params(DAEMON), ())], DRIVER, "team/wl")
    assert pick_config(configs, "daemon", DAEMON).domain_id == UID
    assert pick_config(configs, "channel", CHANNEL).where == "default config"


def test_the_highest_precedence_match_wins_be_it_named_or_for_all_requests():
    """The walk stops at the first entry that applies: a claim's all-requests config beats a class config
    naming the request, and the other way round."""
    named_in_class = entry(params(domain_id=OTHER), ("channel",), source="FromClass")
    for_all_in_claim = entry(params(), ())
    configs = domain_configs([named_in_class, for_all_in_claim], DRIVER, "team/wl")
    assert pick_config(configs, "channel", CHANNEL).domain_id == UID
    configs = domain_configs([entry(params(), (), source="FromClass"), entry(params(domain_id=OTHER))], DRIVER, "x/y")
    assert pick_config(configs, "channel", CHANNEL).domain_id == OTHER


def test_a_subrequest_of_a_prioritized_list_takes_its_parent_request_config():
    """A result of a ``firstAvailable`` request is named ``<request>/<subrequest>``; configs name the parent."""
    configs = domain_configs([entry(params(domain_id=OTHER), ("channel",))], DRIVER, "team/wl")
    assert pick_config(configs, "channel/fast", CHANNEL).domain_id == OTHER
    assert pick_config(configs, "channels/fast", CHANNEL).where == "default config"
