"""Pod annotations by (namespace, name), fetched ahead of time so a synchronous renderer can read them.

The fake DCGM exporter takes a pod's target utilisation from its ``fakegpu.io/gpu-utilization``
annotation, which the kubelet's PodResources API does not carry: the pods holding devices are looked up
ahead of each render. A Prometheus scrape times out after 10 s by default, so the lookups must never be
what makes a scrape slow, whatever the API server does (``CachedLookups``):

- answers are kept for ``ttl`` seconds; only missing or stale entries are fetched;
- the fetches of one round run concurrently under one total ``deadline`` (2 s), never one after the other;
- a lookup that fails (unreachable or slow API server, an error status) keeps serving the last answer
  and is not tried again before its backoff (1 s, doubling up to 60 s) has passed, so an API server
  that is down costs at most one deadline per backoff period, not one per scrape;
- the first failure is logged once as a warning, and the recovery once at info.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Pod

from fakegpu.kube.backoff import retry_pause

log = logging.getLogger(__name__)

DEFAULT_TTL = 30.0
DEFAULT_DEADLINE = 2.0
"""Total time one round of lookups may take: well inside Prometheus's default 10 s scrape timeout."""
BACKOFF_INITIAL = 1.0
BACKOFF_MAX = 60.0

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def describe_error(exc: BaseException) -> str:
    """An exception as one short reason; the type's name when its text is empty (``TimeoutError()``)."""
    if isinstance(exc, ApiError):
        status = exc.status
        text = status.message or str(exc)
        return text if text else f"{type(exc).__name__} (HTTP {status.code})"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass
class _Entry(Generic[V]):
    value: V | None = None
    fetched: float | None = None
    """When ``value`` was read (monotonic); None while nothing was ever read."""
    retry_at: float = 0.0
    backoff: float = 0.0
    failures: int = 0
    """Failed reads in a row: the pause before the next one follows ``kube.backoff``."""


class CachedLookups(Generic[K, V]):
    """Values by key, fetched ahead of time by ``prefetch`` and read synchronously with ``get``.

    ``fetch`` reads one key (raising on failure); ``what`` names the lookups and ``name`` a key in the log
    lines. See the module docstring for the timing rules.
    """

    def __init__(
        self,
        fetch: Callable[[K], Awaitable[V]],
        *,
        what: str,
        name: Callable[[K], str] = str,
        ttl: float = DEFAULT_TTL,
        deadline: float = DEFAULT_DEADLINE,
        backoff_initial: float = BACKOFF_INITIAL,
        backoff_max: float = BACKOFF_MAX,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fetch = fetch
        self.what = what
        self.name = name
        self.ttl = ttl
        self.deadline = deadline
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.clock = clock
        self._entries: dict[K, _Entry[V]] = {}
        self._warned = False
        self.failures = 0
        """Lookups that failed or ran out of time, since the start (for tests and status)."""

    def get(self, key: K) -> V | None:
        """The last value read for ``key``, None when it was never read."""
        entry = self._entries.get(key)
        return entry.value if entry is not None else None

    def _due(self, key: K, now: float) -> bool:
        entry = self._entries.get(key)
        if entry is None:
            return True
        if now < entry.retry_at:
            return False  # failed lately: keep the last value until the backoff has passed
        return entry.fetched is None or now - entry.fetched > self.ttl

    async def prefetch(self, keys: Iterable[K]) -> None:
        """Fetch the missing and stale keys concurrently, within ``deadline`` in all; forget other keys."""
        keys = set(keys)
        for key in [k for k in self._entries if k not in keys]:
            del self._entries[key]
        now = self.clock()
        due = [k for k in keys if self._due(k, now)]
        if not due:
            return
        pending = set(due)

        async def one(key: K) -> None:
            try:
                value = await self.fetch(key)
            except Exception as exc:  # the renderer keeps serving the last answer
                pending.discard(key)
                self._failed(key, describe_error(exc))
                return
            pending.discard(key)
            self._succeeded(key, value)

        try:
            async with asyncio.timeout(self.deadline):
                await asyncio.gather(*(one(k) for k in due))
        except TimeoutError:
            for key in list(pending):
                self._failed(key, f"no answer within {self.deadline:g}s")

    def _succeeded(self, key: K, value: V) -> None:
        entry = self._entries.setdefault(key, _Entry())
        entry.value, entry.fetched, entry.retry_at, entry.backoff, entry.failures = value, self.clock(), 0.0, 0.0, 0
        if self._warned:
            self._warned = False
            log.info("%s work again", self.what)

    def _failed(self, key: K, why: str) -> None:
        self.failures += 1
        entry = self._entries.setdefault(key, _Entry())
        entry.failures += 1
        entry.backoff = retry_pause(entry.failures, first=self.backoff_initial, cap=self.backoff_max)
        entry.retry_at = self.clock() + entry.backoff
        if not self._warned:
            self._warned = True
            log.warning(
                "%s failed for %s (%s); keeping the last answer, retrying in %gs",
                self.what,
                self.name(key),
                why,
                entry.backoff,
            )


class PodAnnotations:
    """``(namespace, pod name) -> annotations`` from the API server, through ``CachedLookups``."""

    def __init__(
        self,
        make_client: Callable[[], AsyncClient],
        ttl: float = DEFAULT_TTL,
        timeout: float = DEFAULT_DEADLINE,
        *,
        backoff_initial: float = BACKOFF_INITIAL,
        backoff_max: float = BACKOFF_MAX,
    ) -> None:
        self.make_client = make_client
        self._client: AsyncClient | None = None
        self.lookups: CachedLookups[tuple[str, str], dict[str, str]] = CachedLookups(
            self._read,
            what="pod annotation lookups",
            name=lambda pod: f"pod {pod[0]}/{pod[1]}",
            ttl=ttl,
            deadline=timeout,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
        )

    def __call__(self, namespace: str, name: str) -> Mapping[str, str]:
        return self.lookups.get((namespace, name)) or {}

    async def _read(self, pod: tuple[str, str]) -> dict[str, str]:
        namespace, name = pod
        if self._client is None:
            self._client = self.make_client()
        try:
            found = await self._client.get(Pod, name, namespace=namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return {}  # gone, or not a pod of this cluster: no annotations
            raise
        return dict((found.metadata and found.metadata.annotations) or {})

    async def prefetch(self, pods: Iterable[tuple[str, str]]) -> None:
        await self.lookups.prefetch(p for p in pods if p[1])

    async def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._client.close(), 2.0)
            self._client = None
