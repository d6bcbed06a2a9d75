"""How every fakegpu process finds its API server."""

from __future__ import annotations

from collections.abc import Callable

from lightkube import AsyncClient, KubeConfig


def client_factory(kubeconfig: str | None) -> Callable[[], AsyncClient]:
    """In-cluster config by default (the DaemonSet case), else KUBECONFIG/~/.kube/config, or a file.

    A factory rather than a client, so a daemon that never needs the API server never builds one.
    """

    def make() -> AsyncClient:
        if kubeconfig:
            return AsyncClient(config=KubeConfig.from_file(kubeconfig))
        return AsyncClient()

    return make
