"""What the emulator needs of a pod spec: its containers in start order, their kind and device requests.

Init containers run to completion before the app containers start; a sidecar is an init container with
``restartPolicy: Always`` that keeps running beside them (KEP-753). Both change what a pod asks of the
node, and the kubelet's device manager lets later containers reuse a finished init container's devices,
so the emulator has to know which container is which.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

ContainerKind = Literal["init", "sidecar", "app"]
KINDS: tuple[ContainerKind, ...] = ("init", "sidecar", "app")

_REQUEST = re.compile(r"(?P<resource>[^=\s]+)=(?P<count>[0-9]+)")


@dataclass(frozen=True)
class ContainerSpec:
    """One container: its name, kind and extended-resource requests (resource -> count)."""

    name: str
    requests: Mapping[str, int] = field(default_factory=dict)
    kind: ContainerKind = "app"

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "requests": dict(self.requests)}


def parse_requests(texts: Iterable[str], where: str) -> dict[str, int]:
    """``["nvidia.com/gpu=2", ...]`` as a request map; ValueError naming ``where`` and the bad text."""
    out: dict[str, int] = {}
    for text in texts:
        match = _REQUEST.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"{where}: expected RESOURCE=COUNT like nvidia.com/gpu=2, found {text!r}")
        resource, count = match["resource"], int(match["count"])
        if count < 1:
            raise ValueError(f"{where}: the count of {resource} must be at least 1, found {count}")
        if resource in out:
            raise ValueError(f"{where}: {resource} is requested twice")
        out[resource] = count
    return out


def effective_requests(containers: Sequence[ContainerSpec]) -> dict[str, int]:
    """What the pod asks of the node per resource, as the scheduler and the kubelet's admission count it:
    the larger of (app containers + sidecars) and the peak during init, where an init container runs
    beside the sidecars started before it."""
    result: dict[str, int] = {}
    resources = {r for c in containers for r in c.requests}
    for resource in resources:
        sidecars = 0
        init_peak = 0
        apps = 0
        for c in containers:
            want = c.requests.get(resource, 0)
            if c.kind == "sidecar":
                sidecars += want
                init_peak = max(init_peak, sidecars)
            elif c.kind == "init":
                init_peak = max(init_peak, want + sidecars)
            else:
                apps += want
        result[resource] = max(apps + sidecars, init_peak)
    return dict(sorted(result.items()))


def check_containers(containers: Sequence[ContainerSpec]) -> None:
    """ValueError for a spec the API server would refuse: no app container, duplicate names, init
    containers after app containers."""
    names = [c.name for c in containers]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"container names must be unique in a pod, found {', '.join(duplicates)} twice")
    if not any(c.kind == "app" for c in containers):
        raise ValueError("a pod needs at least one app container")
    seen_app = False
    for c in containers:
        if c.kind == "app":
            seen_app = True
        elif seen_app:
            raise ValueError(f"{c.kind} container {c.name!r} comes after an app container; init containers go first")
