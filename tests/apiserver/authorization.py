"""Bearer tokens that stand for a user whose requests are authorized, as a real API server's RBAC does.

A test gives the fake API server a token, the user it stands for (``system:serviceaccount:<ns>:<name>``)
and what that user may do (a predicate over the request's RBAC attributes, e.g. rules rendered from
deploy/); a component whose client sends that token then meets ``403 Forbidden`` for anything else, with
the message a real server writes, while requests without a token stay unrestricted (the test's own
set-up, the other daemons). Discovery and ``/version`` are not authorized, as every authenticated user may
read them (``system:discovery``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

BEARER = "Bearer "


@dataclass(frozen=True)
class Attributes:
    """One request as the authorizer sees it."""

    user: str
    verb: str
    group: str
    resource: str
    """The plural, with ``/<subresource>`` for a subresource: ``computedomains/status``."""
    namespace: str | None
    name: str | None


Allows = Callable[[Attributes], bool]


def forbidden_message(request: Attributes) -> str:
    """The text of a real API server's 403 (``k8s.io/apiserver`` ``forbiddenMessage`` and
    ``NewForbidden``), e.g. ``resourceslices.resource.k8s.io is forbidden: User "..." cannot list resource
    "resourceslices" in API group "resource.k8s.io" at the cluster scope``."""
    plural = request.resource.split("/", 1)[0]
    qualified = f"{plural}.{request.group}" if request.group else plural
    named = f' "{request.name}"' if request.name else ""
    scope = f'in the namespace "{request.namespace}"' if request.namespace else "at the cluster scope"
    return (
        f'{qualified}{named} is forbidden: User "{request.user}" cannot {request.verb} resource '
        f'"{request.resource}" in API group "{request.group}" {scope}'
    )


class Authorizer:
    """The tokens the server knows; a request with an unknown token, or none, is not restricted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[str, tuple[str, Allows]] = {}

    def add(self, token: str, user: str, allows: Allows) -> None:
        """From now on a request bearing ``token`` is ``user``'s and may do only what ``allows`` says; a
        second call for the same token replaces the grants (a role changed in the cluster)."""
        if not token or not user:
            raise ValueError("a token and a user are both needed")
        with self._lock:
            self._users[token] = (user, allows)

    def user(self, authorization: str | None) -> tuple[str, Allows] | None:
        """The user behind an ``Authorization`` header, and its grants; None when unrestricted."""
        if not authorization or not authorization.startswith(BEARER):
            return None
        with self._lock:
            return self._users.get(authorization[len(BEARER) :])
