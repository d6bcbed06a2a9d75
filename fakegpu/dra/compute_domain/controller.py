"""NVIDIA's compute-domain controller, emulated (driver 25.12, driver-managed IMEX, gates
IMEXDaemonsWithDNSNames and ComputeDomainCliques on: ``kubernetes-sigs/dra-driver-nvidia-gpu``
``cmd/compute-domain-controller/computedomain.go`` ``onAddOrUpdate`` and ``cdstatus.go``).

For every ComputeDomain it adds the finalizer ``resource.nvidia.com/computeDomain``, creates the workload
ResourceClaimTemplate (the domain's namespace) and the daemon template (the driver's namespace), and every
status interval folds the daemons of the domain's ComputeDomainCliques into ``status.nodes`` and
``status.status``. A domain being deleted loses its templates, node labels and cliques, then its finalizer.

Unlike NVIDIA's controller it creates no IMEX daemon DaemonSet: fakegpu's compute-domain kubelet plugin
plays each node's daemon (it writes the clique entries, or the status entry of a node off the fabric).

Domains come from one list-then-watch (``fakegpu.kube.watch_loop``); the work runs in the one reconcile loop
(``fakegpu.kube.reconcile_loop``), and a domain whose sync fails waits out its own backoff
(``fakegpu.kube.backoff``) while the others go on. Nothing here ends the process but cancellation.

``not_ready`` is the ``/readyz`` answer: ready means watching and reconciling, so an API server that
refuses the controller (a forbidden list, a failing watch, a domain whose sync fails) keeps it not ready
with the reason, and ``kubectl rollout status`` waits instead of reporting success.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import AsyncIterable, Sequence
from typing import Any, NoReturn, cast

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources import resource_v1, resource_v1beta1, resource_v1beta2
from lightkube.resources.core_v1 import Event, Node
from lightkube.types import PatchType

from fakegpu.dra.compute_domain.claim_templates import daemon_template, daemon_template_name, workload_template
from fakegpu.dra.compute_domain.domain_events import (
    COLLISION_REASON,
    NOT_READY_REASON,
    READY_REASON,
    domain_event,
)
from fakegpu.dra.compute_domain.domain_status import clique_nodes, describe_nodes, desired_status, merged_nodes
from fakegpu.dra.compute_domain.resources import (
    COMPUTE_DOMAIN_FINALIZER,
    COMPUTE_DOMAIN_LABEL,
    READY,
    ComputeDomain,
    ComputeDomainClique,
)
from fakegpu.kube.backoff import jittered_pause, retry_note
from fakegpu.kube.client import api_failure, client_target
from fakegpu.kube.discovery import served_api_version, serves_slices
from fakegpu.kube.reconcile_loop import reconcile_forever
from fakegpu.kube.watch_loop import collect, expired, list_then_watch

log = logging.getLogger(__name__)

STATUS_SYNC_INTERVAL = 2.0
"""Seconds between status syncs, as NVIDIA's ``cdStatusSyncInterval``."""
NOT_FOUND = 404
ALREADY_EXISTS = 409
CONFLICT = 409
TEMPLATE_KINDS: dict[str, Any] = {
    "resource.k8s.io/v1": resource_v1.ResourceClaimTemplate,
    "resource.k8s.io/v1beta2": resource_v1beta2.ResourceClaimTemplate,
    "resource.k8s.io/v1beta1": resource_v1beta1.ResourceClaimTemplate,
}
"""The lightkube class of ResourceClaimTemplates in each resource.k8s.io version."""

Obj = dict[str, Any]


def _missing(exc: ApiError) -> bool:
    return exc.status.code == NOT_FOUND


def _as_dict(obj: Any) -> Obj:
    """A lightkube object as the plain dict the API server sent."""
    return dict(obj.to_dict())


def _name(obj: Any) -> str:
    return str(obj.metadata.name)


class TemplateCollision(Exception):
    """The workload template's name is taken by a template that is not this domain's."""


def collision_message(namespace: str, name: str, owner: str | None) -> str:
    """Why the domain stays NotReady while a template it needs is another's (``owner``: that template's
    domain label, None or "" when it has none)."""
    return (
        f"ResourceClaimTemplate '{namespace}/{name}' already exists and belongs "
        f"{f'to ComputeDomain {owner}' if owner else 'to no ComputeDomain'}; the domain stays NotReady "
        "until it is gone"
    )


def status_event(domain: Obj, status: str, nodes: Sequence[Obj], num_nodes: int) -> Obj:
    """The Event recorded when the domain's status turns to ``status``: Normal when Ready, else a Warning."""
    ready = status == READY
    message = f"ComputeDomain is {status}: {describe_nodes(nodes, num_nodes)}"
    return domain_event(domain, READY_REASON if ready else NOT_READY_REASON, message, warning=not ready)


class ComputeDomainController:
    """One controller for every ComputeDomain of the cluster; ``run()`` until cancelled (or ``start``/``stop``
    as a daemon service)."""

    def __init__(
        self,
        client: AsyncClient,
        driver_namespace: str,
        *,
        status_interval: float = STATUS_SYNC_INTERVAL,
        resource_api_version: str | None = None,
        cliques: bool = True,
        host_managed: bool = False,
    ) -> None:
        """``resource_api_version`` (``resource.k8s.io/v1``, ...) is the version templates are written in;
        None asks the server for the newest it serves. ``cliques`` is the gate ComputeDomainCliques: off, the
        daemons write ``status.nodes`` themselves and the controller reads no ComputeDomainCliques
        (``cmd/compute-domain-controller/cdstatus.go`` at commit 3fe9487). ``host_managed`` (``--imex-mode
        hostManaged``): only the workload template and the finalizer, no daemon template, and the domain is Ready
        once its template exists (``onAddOrUpdateHostManaged``, ``calculateGlobalStatus`` on main)."""
        if status_interval <= 0:
            raise ValueError(f"status interval must be positive, got {status_interval}")
        if resource_api_version is not None and resource_api_version not in TEMPLATE_KINDS:
            raise ValueError(f"unsupported resource API version {resource_api_version!r}")
        self._client = client
        self._namespace = driver_namespace
        self._interval = status_interval
        self._api_version = resource_api_version
        self._cliques = cliques and not host_managed
        self._host_managed = host_managed
        self._domains: dict[str, tuple[str, str]] = {}
        """uid -> (namespace, name) of every domain the watch saw."""
        self._setup_needed: set[str] = set()
        self._announced: set[str] = set()
        self._collisions: set[str] = set()
        self._failures: dict[str, int] = {}
        self._retry_at: dict[str, float] = {}
        self._errors: dict[str, str] = {}
        """uid -> why its last sync failed, while it waits out its backoff."""
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.passes = 0
        """Passes over every domain finished: once it grew by two, one began after whatever came before."""
        self._listed_at: int | None = None
        """``passes`` when the domains were last listed; None until a list succeeds, or while the watch fails."""
        self._problem: str | None = None
        """The failure being retried before the domains can be followed (version discovery, list, watch)."""

    # ----------------------------------------------------------------------------------- readiness

    def not_ready(self) -> str | None:
        """What keeps the controller from watching and reconciling, as one line; None once the domains were
        listed, their watch is not failing, a pass over them finished after the list, and no domain's sync
        is failing."""
        if self._problem is not None:
            return self._problem
        if self._api_version is None:
            return "finding the resource.k8s.io version the API server serves"
        if self._listed_at is None:
            return "listing ComputeDomains"
        if self.passes <= self._listed_at:
            return "reconciling the ComputeDomains listed"
        if self._errors:
            failing = sorted(self._errors.items(), key=lambda item: self._domains.get(item[0], ("", "")))
            uid, error = failing[0]
            namespace, name = self._domains.get(uid, ("?", "?"))
            more = f" (and {len(failing) - 1} more)" if len(failing) > 1 else ""
            return f"syncing ComputeDomain {namespace}/{name} failed{more}: {error}"
        return None

    # ----------------------------------------------------------------------------------- service

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run_task(), name="compute-domain-controller")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run_task(self) -> None:
        try:
            await self.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug, not the API server (whose failures are retried): say so loudly
            log.exception("compute-domain controller stopped")
            raise

    async def run(self) -> NoReturn:
        """Follow the domains and keep each as it should be, for good."""
        if self._api_version is None:
            self._api_version = await self._discover_api_version()
        log.info(
            "compute-domain controller: driver namespace %s, templates in %s, status every %g s",
            self._namespace,
            self._api_version,
            self._interval,
        )
        async with asyncio.TaskGroup() as group:
            group.create_task(self._follow_domains())
            group.create_task(reconcile_forever(self._dirty, self._interval, self.sync_all, self._sync_failed))
        raise AssertionError("the controller's loops never return")  # pragma: no cover

    async def _discover_api_version(self) -> str:
        failures = 0
        while True:
            try:
                version = await served_api_version(lambda v: serves_slices(self._client, v))
            except Exception as exc:
                problem = api_failure(exc, client_target(self._client))
            else:
                if version is not None:
                    self._problem = None
                    return version
                problem = "the API server serves no resource.k8s.io version fakegpu knows"
            self._problem = f"finding the resource.k8s.io version: {problem}"
            failures += 1
            pause = jittered_pause(failures)
            log.warning("compute-domain controller: %s (%s)", problem, retry_note(failures, pause))
            await asyncio.sleep(pause)

    # ----------------------------------------------------------------------------------- watch

    async def _list_domains(self) -> tuple[list[Any], str]:
        return await collect(self._client.list(ComputeDomain, namespace="*"))

    def _watch_domains(self, version: str) -> AsyncIterable[tuple[str, Any]]:
        return self._client.watch(ComputeDomain, namespace="*", resource_version=version)

    async def _follow_domains(self) -> NoReturn:
        await list_then_watch(
            self._list_domains,
            self._watch_domains,
            on_list=self._listed,
            on_event=self._changed,
            on_failure=self._watch_failed,
        )

    def _listed(self, domains: Sequence[Any]) -> None:
        self._problem = None
        self._listed_at = self.passes
        self._domains = {}
        for domain in domains:
            self._remember(domain)
        for uid in set(self._failures) - set(self._domains):
            self._forget(uid)
        self._dirty.set()

    def _changed(self, event: str, domain: Any) -> None:
        if event == "DELETED":
            uid = domain.metadata.uid
            if uid in self._domains:
                self._forget(uid)
            return
        self._remember(domain)
        self._dirty.set()

    def _remember(self, domain: Any) -> None:
        meta = domain.metadata
        self._domains[meta.uid] = (meta.namespace, meta.name)
        self._setup_needed.add(meta.uid)

    def _forget(self, uid: str) -> None:
        self._domains.pop(uid, None)
        for table in (self._failures, self._retry_at, self._errors):
            table.pop(uid, None)
        for seen in (self._setup_needed, self._announced, self._collisions):
            seen.discard(uid)

    def _watch_failed(self, exc: Exception, pause: float) -> None:
        problem = api_failure(exc, client_target(self._client))
        if not expired(exc):  # 410: the watch fell behind, which a new list (at once) mends
            self._listed_at = None
            self._problem = f"following ComputeDomains: {problem}"
        log.warning(
            "compute-domain controller: following ComputeDomains failed, listing again in %.1f s: %s",
            pause,
            problem,
        )

    # ----------------------------------------------------------------------------------- sync

    def _sync_failed(self, exc: Exception, attempt: int, pause: float) -> None:
        log.warning("compute-domain controller: sync failed (%s): %s", retry_note(attempt, pause), exc)

    async def sync_all(self) -> None:
        """One pass over every known domain; a domain that fails backs off on its own."""
        loop = asyncio.get_running_loop()
        for uid, (namespace, name) in list(self._domains.items()):
            if self._retry_at.get(uid, 0.0) > loop.time():
                continue
            try:
                await self._sync_domain(uid, namespace, name)
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                if exc.status.code != CONFLICT:
                    self._failed(uid, namespace, name, exc)
                    continue
                # Written meanwhile (the watch will say so too): read it again on the next pass, no backoff.
                log.debug("ComputeDomain %s/%s changed while syncing; syncing again", namespace, name)
                self._dirty.set()
            except Exception as exc:
                self._failed(uid, namespace, name, exc)
            else:
                self._failures.pop(uid, None)
                self._retry_at.pop(uid, None)
                self._errors.pop(uid, None)
        self.passes += 1

    def _failed(self, uid: str, namespace: str, name: str, exc: Exception) -> None:
        loop = asyncio.get_running_loop()
        failures = self._failures[uid] = self._failures.get(uid, 0) + 1
        pause = jittered_pause(failures)
        self._retry_at[uid] = loop.time() + pause
        error = self._errors[uid] = api_failure(exc, client_target(self._client))
        log.warning("ComputeDomain %s/%s: %s (%s)", namespace, name, error, retry_note(failures, pause))

    async def _sync_domain(self, uid: str, namespace: str, name: str) -> None:
        try:
            domain = _as_dict(await self._client.get(ComputeDomain, name, namespace=namespace))
        except ApiError as exc:
            if not _missing(exc):
                raise
            self._forget(uid)
            return
        if domain["metadata"]["uid"] != uid:  # deleted and made again under the same name: a new domain
            self._forget(uid)
            return
        finalizers = domain["metadata"].get("finalizers") or []
        if domain["metadata"].get("deletionTimestamp"):
            if COMPUTE_DOMAIN_FINALIZER in finalizers:
                await self._tear_down(domain)
            self._forget(uid)
            return
        if COMPUTE_DOMAIN_FINALIZER not in finalizers:
            domain["metadata"]["finalizers"] = [*finalizers, COMPUTE_DOMAIN_FINALIZER]
            domain = _as_dict(await self._client.replace(ComputeDomain.from_dict(domain)))
        if uid not in self._announced:
            self._announced.add(uid)
            log.info(
                "ComputeDomain %s/%s (%s): no IMEX daemon pods; the compute-domain kubelet plugins emulate "
                "each node's daemon",
                namespace,
                name,
                uid,
            )
        if uid in self._setup_needed and await self._ensure_templates(domain):
            self._setup_needed.discard(uid)
        await self._sync_status(domain, blocked=uid in self._setup_needed)

    # ----------------------------------------------------------------------------------- templates

    @property
    def _template_kind(self) -> Any:
        assert self._api_version is not None, "run() resolves the resource API version first"
        return TEMPLATE_KINDS[self._api_version]

    async def _ensure_templates(self, domain: Obj) -> bool:
        """Both templates exist for the domain; False when the workload template's name is taken."""
        assert self._api_version is not None
        if not self._host_managed:
            await self._ensure_template(domain, daemon_template(domain, self._namespace, self._api_version))
        try:
            await self._ensure_template(domain, workload_template(domain, self._api_version))
        except TemplateCollision as exc:
            uid = domain["metadata"]["uid"]
            if uid not in self._collisions:
                self._collisions.add(uid)
                log.error("ComputeDomain %s/%s: %s", domain["metadata"]["namespace"], domain["metadata"]["name"], exc)
                await self._record(domain_event(domain, COLLISION_REASON, str(exc), warning=True))
            return False
        self._collisions.discard(domain["metadata"]["uid"])
        return True

    async def _ensure_template(self, domain: Obj, body: Obj) -> None:
        kind, meta = self._template_kind, body["metadata"]
        try:
            existing = await self._client.get(kind, meta["name"], namespace=meta["namespace"])
        except ApiError as exc:
            if not _missing(exc):
                raise
            try:
                await self._client.create(kind.from_dict(body))
            except ApiError as create_exc:
                if create_exc.status.code != ALREADY_EXISTS:
                    raise RuntimeError(
                        f"error creating ResourceClaimTemplate '{meta['namespace']}/{meta['name']}': "
                        f"{create_exc.status.message}"
                    ) from create_exc
                existing = await self._client.get(kind, meta["name"], namespace=meta["namespace"])
            else:
                log.info("created ResourceClaimTemplate %s/%s", meta["namespace"], meta["name"])
                return
        owner = (existing.metadata.labels or {}).get(COMPUTE_DOMAIN_LABEL)
        if owner != domain["metadata"]["uid"]:
            raise TemplateCollision(collision_message(meta["namespace"], meta["name"], owner))

    async def _remove_template(self, namespace: str, name: str, uid: str) -> None:
        """Delete the domain's template and drop its finalizer; a template of someone else is left alone."""
        kind = self._template_kind
        try:
            existing = await self._client.get(kind, name, namespace=namespace)
        except ApiError as exc:
            if _missing(exc):
                return
            raise
        if (existing.metadata.labels or {}).get(COMPUTE_DOMAIN_LABEL) != uid:
            return
        if existing.metadata.deletionTimestamp is None:
            with contextlib.suppress(ApiError):
                await self._client.delete(kind, name, namespace=namespace)
        finalizers = existing.metadata.finalizers or []
        if COMPUTE_DOMAIN_FINALIZER in finalizers:
            try:
                current = await self._client.get(kind, name, namespace=namespace)
            except ApiError as exc:
                if _missing(exc):
                    return
                raise
            current.metadata.finalizers = [
                f for f in current.metadata.finalizers or [] if f != COMPUTE_DOMAIN_FINALIZER
            ]
            try:
                await self._client.replace(current)
            except ApiError as exc:
                if not _missing(exc):
                    raise
        log.info("deleted ResourceClaimTemplate %s/%s", namespace, name)

    # ----------------------------------------------------------------------------------- deletion

    async def _tear_down(self, domain: Obj) -> None:
        meta = domain["metadata"]
        uid = meta["uid"]
        await self._remove_template(meta["namespace"], domain["spec"]["channel"]["resourceClaimTemplate"]["name"], uid)
        await self._remove_template(self._namespace, daemon_template_name(uid), uid)
        async for node in self._client.list(Node, labels={COMPUTE_DOMAIN_LABEL: uid}):
            patch = {"metadata": {"labels": {COMPUTE_DOMAIN_LABEL: None}}}
            await self._client.patch(Node, _name(node), patch, patch_type=PatchType.MERGE)
        async for clique in self._client.list(
            ComputeDomainClique, namespace=self._namespace, labels={COMPUTE_DOMAIN_LABEL: uid}
        ):
            try:
                await self._client.delete(ComputeDomainClique, _name(clique), namespace=self._namespace)
            except ApiError as exc:
                if not _missing(exc):
                    raise
        meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != COMPUTE_DOMAIN_FINALIZER]
        try:
            await self._client.replace(ComputeDomain.from_dict(domain))
        except ApiError as exc:
            if not _missing(exc):
                raise
        log.info("ComputeDomain %s/%s (%s) cleaned up", meta["namespace"], meta["name"], uid)

    # ----------------------------------------------------------------------------------- status

    async def _sync_status(self, domain: Obj, *, blocked: bool) -> None:
        uid = domain["metadata"]["uid"]
        current: Obj = domain.get("status") or {}
        num_nodes = int(domain["spec"].get("numNodes") or 0)
        if self._host_managed:
            nodes: list[Obj] = []
        elif self._cliques:
            cliques = [
                _as_dict(c)
                async for c in self._client.list(
                    ComputeDomainClique, namespace=self._namespace, labels={COMPUTE_DOMAIN_LABEL: uid}
                )
            ]
            nodes = merged_nodes(clique_nodes(cliques), current.get("nodes") or [])
        else:
            nodes = [dict(n) for n in current.get("nodes") or []]
        # host-managed: no daemons to count, Ready once admitted with its template
        desired = desired_status(nodes, 0 if self._host_managed else num_nodes, blocked=blocked)
        if desired == current:
            return
        updated = copy.deepcopy(domain)
        updated["status"] = desired
        await self._client.replace(ComputeDomain.Status.from_dict(updated))
        if desired["status"] != current.get("status"):
            event = status_event(domain, desired["status"], nodes, num_nodes)
            meta = domain["metadata"]
            log.info("ComputeDomain %s/%s: %s", meta["namespace"], meta["name"], event["message"])
            await self._record(event)

    async def _record(self, event: Obj) -> None:
        """Events are a courtesy: one that cannot be written is logged, never retried."""
        try:
            await self._client.create(cast(Event, Event.from_dict(event)))
        except ApiError as exc:
            log.warning("could not record event %s: %s", event["reason"], exc.status.message)
