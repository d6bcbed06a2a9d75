"""The two ResourceClaimTemplates NVIDIA's compute-domain controller writes for a ComputeDomain (driver 25.12,
``kubernetes-sigs/dra-driver-nvidia-gpu`` ``templates/compute-domain-workload-claim-template.tmpl.yaml`` and
``templates/compute-domain-daemon-resource-claim-template.tmpl.yaml``, ``cmd/compute-domain-controller/
resourceclaimtemplate.go``): the workload's, which the domain's pods reference for an IMEX channel, and the
daemons'. Plain dicts, shaped for the resource.k8s.io version the server serves.
"""

from __future__ import annotations

from typing import Any

from fakegpu.dra.compute_domain.devices import COMPUTE_DOMAIN_DRIVER
from fakegpu.dra.compute_domain.resources import (
    API_VERSION,
    CHANNEL_CONFIG_KIND,
    COMPUTE_DOMAIN_FINALIZER,
    COMPUTE_DOMAIN_LABEL,
    DAEMON_CLASS,
    DAEMON_CONFIG_KIND,
    DEFAULT_CHANNEL_CLASS,
    TARGET_LABEL,
)

WORKLOAD_TARGET = "Workload"
DAEMON_TARGET = "Daemon"
CHANNEL_REQUEST = "channel"
DAEMON_REQUEST = "daemon"
DEFAULT_ALLOCATION_MODE = "Single"


def daemon_template_name(domain_uid: str) -> str:
    """``computedomain-daemon-<uid>``: the daemon template's (and, upstream, the DaemonSet's) name."""
    return f"computedomain-daemon-{domain_uid}"


def _request(name: str, device_class: str, api_version: str) -> dict[str, Any]:
    """One exact request; resource.k8s.io/v1beta1 names the class directly, later versions under ``exactly``."""
    if api_version == "resource.k8s.io/v1beta1":
        return {"name": name, "deviceClassName": device_class}
    return {"name": name, "exactly": {"deviceClassName": device_class}}


def _template(
    *,
    api_version: str,
    namespace: str,
    name: str,
    domain_uid: str,
    target: str,
    request: str,
    device_class: str,
    parameters: dict[str, Any],
) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "finalizers": [COMPUTE_DOMAIN_FINALIZER],
            "labels": {COMPUTE_DOMAIN_LABEL: domain_uid, TARGET_LABEL: target},
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [_request(request, device_class, api_version)],
                    "config": [
                        {
                            "requests": [request],
                            "opaque": {"driver": COMPUTE_DOMAIN_DRIVER, "parameters": parameters},
                        }
                    ],
                }
            }
        },
    }


def workload_template(domain: dict[str, Any], api_version: str) -> dict[str, Any]:
    """The template the domain's pods claim channel 0 through, in the domain's namespace under the name its
    ``spec.channel.resourceClaimTemplate.name`` gives. ``allocationMode`` is copied from the domain (the
    exact upstream template line is UNVERIFIED)."""
    meta, channel = domain["metadata"], domain["spec"]["channel"]
    return _template(
        api_version=api_version,
        namespace=meta["namespace"],
        name=channel["resourceClaimTemplate"]["name"],
        domain_uid=meta["uid"],
        target=WORKLOAD_TARGET,
        request=CHANNEL_REQUEST,
        device_class=DEFAULT_CHANNEL_CLASS,
        parameters={
            "apiVersion": API_VERSION,
            "kind": CHANNEL_CONFIG_KIND,
            "domainID": meta["uid"],
            "allocationMode": channel.get("allocationMode") or DEFAULT_ALLOCATION_MODE,
        },
    )


def daemon_template(domain: dict[str, Any], driver_namespace: str, api_version: str) -> dict[str, Any]:
    """The template of the domain's IMEX daemons, in the driver's namespace (its ``daemon`` device)."""
    uid = domain["metadata"]["uid"]
    return _template(
        api_version=api_version,
        namespace=driver_namespace,
        name=daemon_template_name(uid),
        domain_uid=uid,
        target=DAEMON_TARGET,
        request=DAEMON_REQUEST,
        device_class=DAEMON_CLASS,
        parameters={"apiVersion": API_VERSION, "kind": DAEMON_CONFIG_KIND, "domainID": uid},
    )
