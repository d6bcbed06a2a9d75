"""The compute-domain driver's opaque configs: ``ComputeDomainChannelConfig`` and ``ComputeDomainDaemonConfig``.

Follows NVIDIA's ``api/nvidia.com/resource/v1beta1`` config types (kubernetes-sigs/dra-driver-nvidia-gpu at
commit 0807eed) and ``cmd/compute-domain-kubelet-plugin/device_state.go``: strict decoding
(an unknown field or kind is a permanent ``error decoding config parameters: ...``), class configs before claim
configs (later wins), an empty ``requests`` list matching every request, and NVIDIA's defaults at the lowest
precedence: a default channel config and a default daemon config, both with an empty ``domainID``, so a
hand-written claim without a config fails validation with ``domainID cannot be empty``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fakegpu.dra.claim_error import ClaimError
from fakegpu.dra.compute_domain.resources import API_VERSION, CHANNEL_CONFIG_KIND, DAEMON_CONFIG_KIND
from fakegpu.dra.opaque_config import names_request

ALLOCATION_MODES: Final = ("Single", "All")
_LABEL_VALUE: Final = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_FIELDS: Final = {
    CHANNEL_CONFIG_KIND: ("apiVersion", "kind", "domainID", "allocationMode"),
    DAEMON_CONFIG_KIND: ("apiVersion", "kind", "domainID"),
}


@dataclass(frozen=True)
class DomainConfig:
    """One decoded config: which kind, the domain it names and (channels) the allocation mode."""

    kind: str
    domain_id: str
    allocation_mode: str = ""
    where: str = "default config"

    def validate(self) -> None:
        """NVIDIA's ``ValidateDomainID``; errors wrapped ``error validating config: ...`` (retryable upstream)."""
        problem = domain_id_problem(self.domain_id)
        if problem is not None:
            raise ClaimError(f"error validating config: {problem}")
        if self.kind == CHANNEL_CONFIG_KIND and self.allocation_mode not in ("", *ALLOCATION_MODES):
            raise ClaimError(
                f"error validating config: unknown allocationMode {self.allocation_mode!r} "
                f"(expected one of {', '.join(ALLOCATION_MODES)})"
            )


def domain_id_problem(domain_id: str) -> str | None:
    """Why ``domain_id`` cannot name a domain (NVIDIA's texts), or None: it names a directory and a label."""
    if not domain_id:
        return "domainID cannot be empty"
    if domain_id in (".", "..") or "/" in domain_id or "\x00" in domain_id:
        return f"domainID {domain_id!r} is not a valid single path component: must not contain '/' or be '.' or '..'"
    if len(domain_id) > 63 or not _LABEL_VALUE.fullmatch(domain_id):
        return (
            "domainID must be a valid label value: a valid label must be an empty string or consist of alphanumeric "
            "characters, '-', '_' or '.', and must start and end with an alphanumeric character (at most 63)"
        )
    return None


@dataclass(frozen=True)
class ConfigEntry:
    requests: tuple[str, ...]
    config: DomainConfig


DEFAULTS: Final = (
    ConfigEntry((), DomainConfig(DAEMON_CONFIG_KIND, "")),
    ConfigEntry((), DomainConfig(CHANNEL_CONFIG_KIND, "", "Single")),
)
"""``DefaultComputeDomainDaemonConfig()`` and ``DefaultComputeDomainChannelConfig()``: lowest precedence."""


def _decode(params: Any, where: str) -> DomainConfig:
    def fail(detail: str) -> ClaimError:
        return ClaimError(f"error decoding config parameters: {where}: {detail}")

    if not isinstance(params, Mapping):
        raise fail("parameters must be an object")
    kind = params.get("kind")
    if params.get("apiVersion") != API_VERSION or kind not in _FIELDS:
        raise fail(
            f"runtime object is not a recognized configuration: apiVersion {params.get('apiVersion')!r}, kind "
            f"{kind!r} (expected {API_VERSION} {CHANNEL_CONFIG_KIND} or {DAEMON_CONFIG_KIND})"
        )
    for key in params:
        if key not in _FIELDS[kind]:
            raise fail(f'json: unknown field "{key}"')
    for key in ("domainID", "allocationMode"):
        if key in params and not isinstance(params[key], str):
            raise fail(f"{key} must be a string, found {params[key]!r}")
    return DomainConfig(kind, params.get("domainID", ""), params.get("allocationMode", ""), where)


def domain_configs(entries: Any, driver: str, claim_name: str) -> list[ConfigEntry]:
    """This driver's configs in precedence order (defaults, class configs, claim configs; later wins)."""
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise ClaimError(f"claim {claim_name}: status.allocation.devices.config must be a list")
    by_source: dict[str, list[ConfigEntry]] = {"FromClass": [], "FromClaim": []}
    for i, entry in enumerate(entries):
        where = f"config[{i}]"
        if not isinstance(entry, Mapping):
            raise ClaimError(f"claim {claim_name}: {where} must be an object")
        source = entry.get("source")
        opaque = entry.get("opaque")
        if source not in by_source or not isinstance(opaque, Mapping) or opaque.get("driver") != driver:
            continue
        requests = entry.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(r, str) for r in requests):
            raise ClaimError(f"claim {claim_name}: {where}: requests must be a list of request names")
        by_source[source].append(ConfigEntry(tuple(requests), _decode(opaque.get("parameters"), where)))
    return [*DEFAULTS, *by_source["FromClass"], *by_source["FromClaim"]]


def pick_config(configs: Sequence[ConfigEntry], request: str, kind: str) -> DomainConfig:
    """The config for a result of ``request`` that needs ``kind``: the highest-precedence entry naming the
    request (of the wrong kind: ``cannot apply <kind> to request: <request>``), else the highest-precedence
    all-requests entry of the right kind."""
    for entry in reversed(configs):
        if entry.requests and names_request(entry.requests, request):
            if entry.config.kind != kind:
                raise ClaimError(f"cannot apply {entry.config.kind} to request: {request}")
            return entry.config
        if not entry.requests and entry.config.kind == kind:
            return entry.config
    raise AssertionError("the default configs match every request")  # pragma: no cover
