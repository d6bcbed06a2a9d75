"""``fakegpu compute-domain-controller``: NVIDIA's compute-domain controller, emulated, against an API server
with the ComputeDomain CRDs installed (deploy/overlays/compute-domains). Runs until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import os
import re

from fakegpu.cli.slice_commands import API_VERSIONS
from fakegpu.dra.compute_domain.controller import ComputeDomainController
from fakegpu.dra.compute_domain.host_imex import (
    DRIVER_MANAGED,
    HOST_MANAGED,
    ISOLATION_CHANNEL,
    ISOLATION_DOMAIN,
    validate_imex_config,
)
from fakegpu.dra.feature_gates import parse_feature_gates, validate_feature_gates
from fakegpu.kube.client import KUBECONFIG_HELP, client_factory
from fakegpu.runtime.bounded_run import run_bounded
from fakegpu.runtime.daemon_lifecycle import DaemonLifecycle
from fakegpu.telemetry.health_endpoint import FLAG as HEALTH_FLAG
from fakegpu.telemetry.health_endpoint import Readiness, health_address, health_endpoint

DESCRIPTION = """\
Keep NVIDIA ComputeDomains as NVIDIA's compute-domain controller does (driver 25.12): add the finalizer
resource.nvidia.com/computeDomain, create the workload ResourceClaimTemplate the domain names (in its
namespace) and the daemon template computedomain-daemon-<uid> (in --namespace), fold the domain's
ComputeDomainCliques into status.nodes and status.status every --status-interval, and clean all of it up
when the domain is deleted. No IMEX daemon pods are created: fakegpu's compute-domain kubelet plugin
plays each node's daemon."""

DEFAULT_NAMESPACE = "fakegpu"
"""The namespace deploy/ runs fakegpu in, where NVIDIA's chart puts the daemon templates and cliques."""


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _namespace(text: str) -> str:
    if not _DNS_LABEL.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a namespace name (lowercase letters, digits and '-', at most 63, starting and "
            "ending with a letter or digit)"
        )
    return text


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds (a number), got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds, got {text!r}")
    return value


def add_compute_domain_controller_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "compute-domain-controller",
        help="run NVIDIA's compute-domain controller (ComputeDomain templates, status, cleanup)",
        description=DESCRIPTION,
    )
    parser.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
    parser.add_argument(
        "--namespace",
        type=_namespace,
        default=DEFAULT_NAMESPACE,
        help="the driver's namespace: daemon templates and ComputeDomainCliques live here (default %(default)s)",
    )
    parser.add_argument(
        "--status-interval",
        type=_positive_seconds,
        default=2.0,
        metavar="SECONDS",
        help="seconds between status syncs, as NVIDIA's controller (default %(default)s)",
    )
    parser.add_argument(
        "--resource-api-version",
        choices=API_VERSIONS,
        default=None,
        help="resource.k8s.io version of the templates (default: the newest the server serves)",
    )
    parser.add_argument(
        "--feature-gates",
        default=None,
        metavar="NAME=BOOL,...",
        help="NVIDIA's driver feature gates (env FEATURE_GATES); ComputeDomainCliques=false folds no "
        "ComputeDomainCliques into the status (the daemons write status.nodes themselves)",
    )
    parser.add_argument(
        "--imex-mode",
        default=os.environ.get("IMEX_MODE", DRIVER_MANAGED),
        help=f"{DRIVER_MANAGED} (default) or {HOST_MANAGED} (env IMEX_MODE; needs HostManagedIMEXDaemon=true): "
        "no daemon template, the domain is Ready once its workload template exists",
    )
    parser.add_argument(
        "--imex-isolation",
        default=os.environ.get("IMEX_ISOLATION", ISOLATION_DOMAIN),
        help=f"IMEX isolation (env IMEX_ISOLATION): {ISOLATION_DOMAIN} (default); {ISOLATION_CHANNEL} is refused "
        "as NVIDIA refuses it",
    )
    parser.add_argument(
        HEALTH_FLAG,
        default=None,
        metavar="HOST:PORT",
        help="serve the kubelet's probes at http://HOST:PORT/healthz (liveness: the controller runs) and "
        "/readyz (readiness: 200 once it lists and watches ComputeDomains and has finished a pass over them, "
        "while no API call it retries fails; else 503 and the reason); off unless given; PORT or :PORT "
        "listens on 127.0.0.1 only, so in a pod give 0.0.0.0:PORT",
    )


async def serve_compute_domain_controller(args: argparse.Namespace, stop: asyncio.Event | None = None) -> int:
    """Run the controller (and its probes, with ``--health-address``) until a stop signal or ``stop``."""
    address = health_address(args)
    readiness = Readiness("starting")
    source, raw = (
        ("--feature-gates", args.feature_gates)
        if getattr(args, "feature_gates", None) is not None
        else ("FEATURE_GATES", os.environ.get("FEATURE_GATES", ""))
    )
    try:
        gates = parse_feature_gates(raw)
        validate_feature_gates(gates)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None
    mode = getattr(args, "imex_mode", DRIVER_MANAGED)
    validate_imex_config(
        mode, getattr(args, "imex_isolation", ISOLATION_DOMAIN), gates.enabled("HostManagedIMEXDaemon")
    )
    client = client_factory(args.kubeconfig)()
    controller = ComputeDomainController(
        client,
        args.namespace,
        status_interval=args.status_interval,
        resource_api_version=args.resource_api_version,
        cliques=gates.enabled("ComputeDomainCliques"),
        host_managed=mode == HOST_MANAGED,
    )
    readiness.follow(controller.not_ready)
    try:
        async with DaemonLifecycle(stop) as daemon:
            await daemon.serve_first(None if address is None else health_endpoint(address, readiness))
            await daemon.serve(controller)
            await daemon.wait()
    finally:
        await client.close()
    return 0


def run_compute_domain_controller_command(args: argparse.Namespace) -> int:
    return run_bounded(serve_compute_domain_controller(args))
