"""``/healthz`` and ``/readyz`` of a daemon, for the kubelet's liveness and readiness probes.

Its own listener (``--health-address``), not the metrics one: the probes must answer whether or not metrics
are turned on, and they must answer from the daemon's first moment, before it has read its Node's config
label or served anything (the metrics endpoint starts only with the face). NVIDIA's DRA driver likewise
keeps its probe apart from metrics (``--healthcheck-port``, NVIDIA/k8s-dra-driver-gpu
``cmd/gpu-kubelet-plugin/health.go``); NVIDIA's device plugin has no probe at all.

- ``/healthz`` (liveness) answers 200 ``ok`` whenever the event loop answers at all: it is served on the loop,
  so a loop that is stuck or gone fails the probe by timing out or refusing.
- ``/readyz`` (readiness) answers 200 ``ok`` once the daemon's ``Readiness`` has nothing missing, else 503 with
  a one-line reason (what is not registered or published yet), the text ``kubectl describe pod`` shows.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from http import HTTPStatus

from fakegpu.telemetry.http_endpoint import Answer, HttpEndpoint, ListenAddress, parse_listen_address

HEALTHZ_PATH = "/healthz"
READYZ_PATH = "/readyz"
FLAG = "--health-address"

NotReady = Callable[[], str | None]
"""What is missing before the daemon does its job, as one line, or ``None`` once nothing is."""


class Readiness:
    """What ``/readyz`` reports: a fixed reason until the daemon says what to follow (``follow``), e.g.
    while it waits for its Node's config label before it builds the face whose state decides readiness."""

    def __init__(self, waiting: str) -> None:
        self._check: NotReady = lambda: waiting

    def follow(self, check: NotReady) -> None:
        self._check = check

    def not_ready(self) -> str | None:
        return self._check()


def add_health_address_option(parser: argparse.ArgumentParser) -> None:
    """``--health-address``, parsed by ``health_address`` (one-line errors, as ``--metrics-address``)."""
    parser.add_argument(
        FLAG,
        default=None,
        metavar="HOST:PORT",
        help="serve the kubelet's probes at http://HOST:PORT/healthz (liveness: the daemon runs) and /readyz "
        "(readiness: 200 once every resource is registered with the kubelet, or for dra once the "
        "ResourceSlices are published and the kubelet confirmed the registration; else 503 and the reason); "
        "off unless given; PORT or :PORT listens on 127.0.0.1 only, so in a pod give 0.0.0.0:PORT",
    )


def health_address(args: argparse.Namespace) -> ListenAddress | None:
    value: str | None = args.health_address
    return None if value is None else parse_listen_address(value, FLAG)


def health_endpoint(address: ListenAddress, readiness: Readiness) -> HttpEndpoint:
    """The probes' endpoint at ``address``, answering ``/readyz`` from ``readiness``."""

    def healthz() -> Answer:
        return Answer(HTTPStatus.OK, b"ok\n")

    def readyz() -> Answer:
        reason = readiness.not_ready()
        if reason is None:
            return Answer(HTTPStatus.OK, b"ok\n")
        one_line = " ".join(reason.split())  # an error text may span lines; the probe's message is one
        return Answer(HTTPStatus.SERVICE_UNAVAILABLE, f"not ready: {one_line}\n".encode())

    return HttpEndpoint(
        address,
        {HEALTHZ_PATH: healthz, READYZ_PATH: readyz},
        what="health checks",
        not_found=f"health checks are at {HEALTHZ_PATH} and {READYZ_PATH}",
        flag=FLAG,
    )
