"""How every fakegpu process finds its API server."""

from __future__ import annotations

from collections.abc import Callable

import yaml
from lightkube import AsyncClient, ConfigError, KubeConfig

from fakegpu.sharing.errors import SpecError


def load_config(kubeconfig: str | None) -> KubeConfig:
    """The cluster config: a named file, else in-cluster, then ``$KUBECONFIG`` / ``~/.kube/config``.

    Every way it can fail is a bad input with one line naming the file, never a traceback.
    """
    source = kubeconfig or "kubeconfig (in-cluster, $KUBECONFIG or ~/.kube/config)"
    try:
        return KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
    except ConfigError as exc:
        raise SpecError(source, str(exc)) from None
    except OSError as exc:
        raise SpecError(source, exc.strerror or str(exc)) from None
    except yaml.YAMLError as exc:
        raise SpecError(source, f"not valid YAML: {str(exc).splitlines()[0]}") from None
    except (AttributeError, TypeError, ValueError, KeyError):
        raise SpecError(source, "not a usable kubeconfig (expected clusters, users and a current context)") from None


def client_factory(kubeconfig: str | None) -> Callable[[], AsyncClient]:
    """Checks the config now (so a bad one stops the command before it serves) and builds clients later.

    A factory rather than a client, so a daemon that never needs the API server never opens a connection.
    """
    config = load_config(kubeconfig)

    def make() -> AsyncClient:
        return AsyncClient(config=config)

    return make
