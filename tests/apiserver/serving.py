"""One started FakeApiServer with a node, stopped afterwards and checked: the common test fixture body."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .fake_apiserver import FakeApiServer


@contextlib.contextmanager
def serving(
    node: str | None = None,
    version: str = "1.36",
    *,
    labels: dict[str, str] | None = None,
    strict: bool = True,
    nvidia_crds: bool = False,
    nfd_crds: bool = False,
) -> Iterator[FakeApiServer]:
    """``node`` is added with ``labels`` (a user's own labels, which fakegpu must leave alone). With
    ``strict``, fail if the code under test sent an object the server rejected or broke the server. With
    ``nvidia_crds``, the server serves NVIDIA's ComputeDomain CRDs; with ``nfd_crds``, NFD's NodeFeature.

    A request cut off by a driver's shutdown arrives with no body; anything else is a real rejection.
    """
    server = FakeApiServer(version, nvidia_crds=nvidia_crds, nfd_crds=nfd_crds).start()
    if node is not None:
        server.add_node(node, labels or {})
    try:
        yield server
    finally:
        server.stop()
        if strict:
            rejected = [r for r in server.rejections if r.body]
            assert rejected == [], f"the code sent objects the API server rejected: {rejected}"
            assert server.errors == [], server.errors
