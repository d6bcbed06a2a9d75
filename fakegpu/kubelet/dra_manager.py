"""The kubelet's DRA manager: prepare a pod's ResourceClaims before its containers start, unprepare a claim
once no pod on the node uses it, and remember both in ``dra_manager_state``.

Follows kubernetes ``pkg/kubelet/cm/dra/manager.go`` (v1.36): a validation pass first (read each claim,
check the pod may use it, find every driver's plugin) that changes nothing, so a pod that cannot start
can be deleted without leaving claims behind; then the pod is added to each claim's users in the claim
info cache (checkpointed), one ``NodePrepareResources`` per driver carries all claims of the pod for it
that are not prepared yet, and a claim prepared for one pod is not prepared again for another. The error
texts are the kubelet's (``prepare dynamic resources: NodePrepareResources failed for ResourceClaim ...``).
Where the kubelet unprepares per pod, the emulator unprepares every claim left without pods, claim by
claim, so one claim that fails does not hold the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.resources import resource_v1

from fakegpu.kubelet.container_claims import ContainerClaim, cdi_ids
from fakegpu.kubelet.dra_plugins import Claim, DraPlugin, DraPluginRegistry, RpcFailed
from fakegpu.kubelet.dra_state import ClaimInfo, read_state, write_state
from fakegpu.kubelet.pod_claims import PodClaim

log = logging.getLogger(__name__)


class PrepareFailed(Exception):
    """A pod's claims could not be prepared; the text is the kubelet's error."""


class UnprepareFailed(Exception):
    """Claims without pods could not be unprepared (yet); the text is the kubelet's error."""


@dataclass(frozen=True)
class Backoff:
    """The delays between attempts: ``initial``, doubling, at most ``cap`` seconds."""

    initial: float = 0.2
    cap: float = 5.0

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.cap < self.initial:
            raise ValueError(f"backoff: need 0 < initial <= cap, found initial={self.initial} cap={self.cap}")

    def delays(self) -> Iterator[float]:
        delay = self.initial
        while True:
            yield delay
            delay = min(delay * 2, self.cap)


@dataclass(frozen=True)
class _Resolved:
    claim: PodClaim
    """With its UID and drivers filled in."""
    plugins: dict[str, DraPlugin]


def _drivers_of(claim: dict[str, Any]) -> tuple[str, ...]:
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return tuple(dict.fromkeys(str(r["driver"]) for r in results if r.get("driver")))


class DraManager:
    def __init__(self, state_path: Path, plugins: DraPluginRegistry, client: AsyncClient | None = None) -> None:
        self.state_path = state_path
        self.plugins = plugins
        self.client = client
        self.claims: dict[tuple[str, str], ClaimInfo] = {}
        """The claim info cache, by (namespace, name) as the kubelet keys it."""
        self.unprepare_error = ""
        """The last error unpreparing claims without pods ("" after a success)."""
        self._lock = asyncio.Lock()

    def restore(self) -> None:
        self.claims = {(c.namespace, c.name): c for c in read_state(self.state_path)}

    def _sync(self) -> None:
        write_state(self.state_path, list(self.claims.values()))

    def orphans(self) -> list[ClaimInfo]:
        """Claims no pod uses any more, still to unprepare."""
        return [c for c in self.claims.values() if not c.pod_uids]

    def cdi_devices(self, claims: Sequence[PodClaim]) -> dict[str, list[str]]:
        """CDI device IDs per claim UID, for those of ``claims`` that are prepared."""
        out = {}
        for claim in claims:
            info = self.claims.get(claim.key)
            if info is not None and info.prepared:
                out[info.uid] = info.cdi_device_ids()
        return out

    def container_cdi_devices(self, namespace: str, refs: Sequence[ContainerClaim]) -> list[str]:
        """The CDI device IDs one container gets: of each claim it names, the devices of the request it names
        (all when it names none), for the claims that are prepared."""
        out: list[str] = []
        for ref in refs:
            info = self.claims.get((namespace, ref.claim))
            if info is not None and info.prepared:
                devices = [dev for d in info.drivers for dev in info.devices.get(d, [])]
                out.extend(i for i in cdi_ids(devices, ref.request) if i not in out)
        return out

    # -- prepare -------------------------------------------------------------------------------
    async def _read_claim(self, pod_uid: str, pod_name: str, claim: PodClaim) -> PodClaim:
        """The claim from the API server: its UID and drivers (as ``prepareResources`` reads them)."""
        assert self.client is not None
        try:
            obj = await self.client.get(resource_v1.ResourceClaim, claim.name, namespace=claim.namespace)
        except Exception as exc:  # lightkube's ApiError, or an unreachable server
            raise PrepareFailed(f"fetch ResourceClaim {claim.name}: {exc}") from None
        raw: dict[str, Any] = obj.to_dict()
        uid = str((raw.get("metadata") or {}).get("uid", ""))
        if claim.uid and uid != claim.uid:
            # fakegpu's text: the kubelet reads claims by name from the pod spec and has no UID to compare.
            raise PrepareFailed(f"ResourceClaim {claim.name}: its UID is {uid}, the pod names {claim.uid}")
        reserved = (raw.get("status") or {}).get("reservedFor") or []
        if not any(r.get("resource") == "pods" and r.get("uid") == pod_uid for r in reserved):
            raise PrepareFailed(f"pod {pod_name} ({pod_uid}) is not allowed to use ResourceClaim {claim.name} ({uid})")
        if not (raw.get("status") or {}).get("allocation"):
            raise PrepareFailed(f"ResourceClaim {claim.name}: not allocated")
        return PodClaim(claim.namespace, claim.name, uid, _drivers_of(raw))

    async def _resolve(self, pod_uid: str, pod_name: str, claims: Sequence[PodClaim]) -> list[_Resolved]:
        resolved = []
        for given in claims:
            claim = given
            if not claim.drivers:
                if self.client is None:
                    raise PrepareFailed(
                        f"ResourceClaim {claim.name}: no drivers given and no API server to read its allocation from"
                    )
                claim = await self._read_claim(pod_uid, pod_name, claim)
            try:
                plugins = {d: self.plugins.get(d) for d in claim.drivers}
            except LookupError as exc:
                raise PrepareFailed(str(exc)) from None
            resolved.append(_Resolved(claim, plugins))
        return resolved

    async def prepare(self, pod_uid: str, pod_name: str, claims: Sequence[PodClaim]) -> dict[str, list[str]]:
        """Prepare the pod's claims; their CDI device IDs per claim UID. PrepareFailed with the kubelet's text."""
        async with self._lock:
            try:
                await self._prepare(pod_uid, pod_name, claims)
            except PrepareFailed as exc:
                raise PrepareFailed(f"prepare dynamic resources: {exc}") from None
            return self.cdi_devices([c for c in claims])

    async def _prepare(self, pod_uid: str, pod_name: str, claims: Sequence[PodClaim]) -> None:
        resolved = await self._resolve(pod_uid, pod_name, claims)
        batches: dict[str, tuple[DraPlugin, list[Claim]]] = {}
        to_prepare: list[ClaimInfo] = []
        for item in resolved:
            claim = item.claim
            info = self.claims.get(claim.key)
            if info is None:
                info = self.claims[claim.key] = ClaimInfo(claim.uid, claim.name, claim.namespace, claim.drivers)
            elif info.uid != claim.uid:
                raise PrepareFailed(
                    f"old ResourceClaim with same name {claim.name} and different UID {info.uid} still exists "
                    "(previous pod force-deleted?!)"
                )
            info.pod_uids.add(pod_uid)
            self._sync()
            if info.prepared:
                continue
            to_prepare.append(info)
            for driver in info.drivers:
                plugin = item.plugins[driver]
                batches.setdefault(driver, (plugin, []))[1].append(info.ref)
        for driver, (plugin, batch) in batches.items():
            try:
                answers = await plugin.prepare(batch)
            except RpcFailed as exc:
                raise PrepareFailed(f"NodePrepareResources: {exc}") from None
            for uid, answer in answers.items():
                requested = next((c for c in batch if c[2] == uid), None)
                if requested is None:
                    raise PrepareFailed(f"NodePrepareResources returned result for unknown claim UID {uid}")
                if answer.error:
                    raise PrepareFailed(f"NodePrepareResources failed for ResourceClaim {requested[1]}: {answer.error}")
                self.claims[(requested[0], requested[1])].devices[driver] = list(answer.devices)
            skipped = len(batch) - len(answers)
            if skipped:
                raise PrepareFailed(f"NodePrepareResources skipped {skipped} ResourceClaims")
        for info in to_prepare:
            info.prepared = True
            log.info("prepared ResourceClaim %s/%s (%s) for pod %s", info.namespace, info.name, info.uid, pod_name)
        self._sync()

    # -- unprepare -----------------------------------------------------------------------------
    def release_pod(self, pod_uid: str) -> list[ClaimInfo]:
        """The pod is gone: it uses its claims no more. Returns the claims now without pods."""
        touched = False
        for info in self.claims.values():
            if pod_uid in info.pod_uids:
                info.pod_uids.discard(pod_uid)
                touched = True
        if touched:
            self._sync()
        return self.orphans()

    async def unprepare_orphans(self) -> list[ClaimInfo]:
        """NodeUnprepareResources, per driver in one call, for every claim without pods; the claims done
        leave the cache. UnprepareFailed names the first error; the claims it concerns stay, to retry."""
        async with self._lock:
            orphans = self.orphans()
            failed: dict[str, str] = {}
            batches: dict[str, list[Claim]] = {}
            for info in orphans:
                for driver in info.drivers:
                    batches.setdefault(driver, []).append(info.ref)
            for driver, batch in batches.items():
                try:
                    answers = await self.plugins.get(driver).unprepare(batch)
                except LookupError as exc:
                    failed.update({uid: str(exc) for _ns, _n, uid in batch})
                    continue
                except RpcFailed as exc:
                    failed.update({uid: f"NodeUnprepareResources: {exc}" for _ns, _n, uid in batch})
                    continue
                for _ns, name, uid in batch:
                    if uid not in answers:
                        failed.setdefault(uid, "NodeUnprepareResources skipped 1 ResourceClaims")
                    elif answers[uid]:
                        error = f"NodeUnprepareResources failed for ResourceClaim {name}: {answers[uid]}"
                        failed.setdefault(uid, error)
            done = [c for c in orphans if c.uid not in failed and not c.pod_uids]
            for info in done:
                del self.claims[(info.namespace, info.name)]
                log.info("unprepared ResourceClaim %s/%s (%s)", info.namespace, info.name, info.uid)
            if done:
                self._sync()
            if failed:
                self.unprepare_error = "unprepare dynamic resources: " + next(iter(failed.values()))
                raise UnprepareFailed(self.unprepare_error)
            self.unprepare_error = ""
            return done
