"""Pod annotations by (namespace, name), fetched ahead of time so a synchronous renderer can read them.

The fake DCGM exporter takes a pod's target utilisation from its ``fakegpu.io/gpu-utilization``
annotation, which the kubelet's PodResources API does not carry: the pods holding devices are looked up
once per scrape (cached for ``ttl`` seconds), and a lookup that fails keeps the last answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Pod

log = logging.getLogger(__name__)


class PodAnnotations:
    def __init__(self, make_client: Callable[[], AsyncClient], ttl: float = 30.0, timeout: float = 5.0) -> None:
        self.make_client = make_client
        self.ttl = ttl
        self.timeout = timeout
        self._cache: dict[tuple[str, str], tuple[float, dict[str, str]]] = {}
        self._client: AsyncClient | None = None
        self._warned = False

    def __call__(self, namespace: str, name: str) -> Mapping[str, str]:
        entry = self._cache.get((namespace, name))
        return entry[1] if entry else {}

    async def prefetch(self, pods: Iterable[tuple[str, str]]) -> None:
        pods = set(pods)
        now = time.monotonic()
        wanted = {p for p in pods if p[1] and (p not in self._cache or now - self._cache[p][0] > self.ttl)}
        if not wanted:
            return
        if self._client is None:
            self._client = self.make_client()
        for namespace, name in sorted(wanted):
            try:
                pod = await asyncio.wait_for(self._client.get(Pod, name, namespace=namespace), self.timeout)
                found = dict((pod.metadata and pod.metadata.annotations) or {})
            except ApiError as exc:
                if exc.status.code != 404:
                    self._warn(namespace, name, exc.status.message or str(exc))
                    continue
                found = {}
            except Exception as exc:  # the exporter keeps serving with the last answer
                self._warn(namespace, name, f"{type(exc).__name__}: {exc}")
                continue
            self._cache[(namespace, name)] = (now, found)
        for key in [k for k in self._cache if k not in pods]:
            del self._cache[key]

    def _warn(self, namespace: str, name: str, why: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning(
                "reading pod %s/%s for its annotations failed (%s); keeping the last answer", namespace, name, why
            )

    async def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._client.close(), 2.0)
            self._client = None
