"""How every fakegpu process finds its API server, and how its failures name that server.

Every API-server failure a command or daemon reports (``fakegpu dra``'s ResourceSlices, ``virtual-nodes``,
the device plugin's node sync) goes through ``api_failure``, so it names the server and the kubeconfig
that pointed there: an error from the wrong cluster, or from a kubeconfig that was not the one meant,
shows at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml
from lightkube import AsyncClient, ConfigError, KubeConfig
from lightkube.config.kubeconfig import SingleConfig

from fakegpu.sharing.errors import SpecError

KUBECONFIG_HELP = "kubeconfig file (default: in-cluster config, then $KUBECONFIG, then ~/.kube/config)"
"""Every command's ``--kubeconfig`` help: the order ``load_config`` tries."""


def load_config(kubeconfig: str | None) -> KubeConfig:
    """The cluster config: a named file, else in-cluster, then ``$KUBECONFIG`` / ``~/.kube/config``.

    Every way it can fail is a bad input with one line naming the file, never a traceback.
    """
    source = kubeconfig or "kubeconfig (in-cluster, $KUBECONFIG or ~/.kube/config)"
    try:
        config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
        _check_files(config, kubeconfig or str(config.fname or source))
        return config
    except SpecError:
        raise
    except ConfigError as exc:
        raise SpecError(source, str(exc)) from None
    except OSError as exc:
        raise SpecError(source, exc.strerror or str(exc)) from None
    except yaml.YAMLError as exc:
        raise SpecError(source, f"not valid YAML: {str(exc).splitlines()[0]}") from None
    except (AttributeError, TypeError, ValueError, KeyError):
        raise SpecError(source, "not a usable kubeconfig (expected clusters, users and a current context)") from None


def _check_files(config: KubeConfig, source: str) -> None:
    """Every file the current context names exists, else the field, the file and the kubeconfig are named.

    Otherwise the first client fails deep in TLS setup with a bare ``[Errno 2] No such file or directory``
    (Python's ``ssl`` names no file), long after the command started.
    """
    single = config.get()
    if single is None:
        return  # no current context: lightkube reports that itself when a client is made
    user = single.user
    named = {
        "certificate-authority": single.cluster.certificate_auth,
        "client-certificate": user.client_cert if user else None,
        "client-key": user.client_key if user else None,
        "tokenFile": user.token_file if user else None,
    }
    for field, name in named.items():
        if not name:
            continue
        path = Path(single.abs_file(name))
        if not path.is_file():
            problem = "does not exist" if not path.exists() else "is not a file"
            raise SpecError(source, f"{field} {path} {problem}")


IN_CLUSTER = "in-cluster service account"
"""How a config read from the pod's service account (no file) is named."""


@dataclass(frozen=True)
class ApiTarget:
    """The API server a process talks to and the kubeconfig that named it."""

    server: str
    kubeconfig: str

    def __str__(self) -> str:
        return f"API server {self.server}, kubeconfig {self.kubeconfig}"


def api_target(config: SingleConfig | None) -> ApiTarget | None:
    """The target of a config's current context (``KubeConfig.get()``, ``AsyncClient.config``); None without one."""
    if config is None:
        return None
    return ApiTarget(config.cluster.server, str(config.fname) if config.fname else IN_CLUSTER)


def api_failure(exc: BaseException | str, target: ApiTarget | None) -> str:
    """One line for a failed API-server call: the error (on one line; its type when it has no text), then
    ``(API server https://..., kubeconfig /path)`` when the target is known."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if target is None else f"{text} ({target})"


def client_target(client: AsyncClient) -> ApiTarget | None:
    """The target of a client (None for a stand-in without a config, as some tests pass)."""
    config = getattr(client, "config", None)
    return api_target(config) if isinstance(config, SingleConfig) else None


def client_factory(kubeconfig: str | None) -> Callable[[], AsyncClient]:
    """Checks the config now (so a bad one stops the command before it serves) and builds clients later.

    A factory rather than a client, so a daemon that never needs the API server never opens a connection.
    """
    config = load_config(kubeconfig)

    def make() -> AsyncClient:
        return AsyncClient(config=config)

    return make
