"""A pool of ResourceSlices compared with the wish by a digest in its metadata, not by its devices.

Every slice a publisher writes carries, in the annotation ``fakegpu.io/slice-plan``, a digest of the wish: the
DRA daemon's publisher stamps every slice with that of the whole pool (the slice specs without the pool
generation, in order, and the owning Node's UID); the virtual nodes stamp each slice with its own, so one
changed slice is found and updated alone (``fakegpu.dra.slice_write_plan``). Whether
the API server holds the wish is then a question about metadata only: as many slices as planned, of one
generation, with the wished digests and the owner. Nothing is rebuilt, sorted or serialised to answer it, so a
listed slice can be reduced to its ``SliceKey`` as soon as its page arrives and memory stays flat however
large the fleet. What the server kept of a write does not matter either (it drops the fields of disabled
feature gates): the annotation survives. A slice someone edits while keeping the annotation goes unnoticed;
slices are their driver's own objects, and nobody else writes them in practice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PLAN_ANNOTATION = "fakegpu.io/slice-plan"


def plan_digest(parts: Iterable[str | bytes]) -> str:
    """A short digest of a pool's wish, from its serialised parts (order matters: give them in slice order)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\n")
    return digest.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class SliceKey:
    """What a stored slice amounts to for a reconcile: its identity, its pool and the wish it was written for."""

    name: str
    resource_version: str
    node: str
    driver: str
    pool: str
    generation: int
    digest: str | None
    """The ``fakegpu.io/slice-plan`` annotation; None on a slice written by someone else."""
    owner_uid: str | None
    """The UID of the one Node that controls the slice; None without exactly one."""
    labels: Mapping[str, str]


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def slice_key(obj: Any) -> SliceKey:
    """The key of a listed slice: a lightkube ResourceSlice of any served version, or the wire dict."""
    meta = _get(obj, "metadata")
    spec = _get(obj, "spec")
    pool = _get(spec, "pool")
    owners = [
        str(_get(ref, "uid"))
        for ref in _get(meta, "ownerReferences") or []
        if _get(ref, "kind") == "Node" and _get(ref, "controller") is True
    ]
    annotations = _get(meta, "annotations") or {}
    return SliceKey(
        name=str(_get(meta, "name") or ""),
        resource_version=str(_get(meta, "resourceVersion") or ""),
        node=str(_get(spec, "nodeName") or ""),
        driver=str(_get(spec, "driver") or ""),
        pool=str(_get(pool, "name") or ""),
        generation=int(_get(pool, "generation") or 0),
        digest=annotations.get(PLAN_ANNOTATION),
        owner_uid=owners[0] if len(owners) == 1 else None,
        labels=dict(_get(meta, "labels") or {}),
    )


def holds_slices(keys: Sequence[SliceKey], digests: Sequence[str], owner_uid: str | None) -> bool:
    """Whether ``keys`` are one complete write of a pool whose slices are stamped ``digests`` (in any order):
    as many slices, of one generation, each controlled by ``owner_uid``, their digests those wished."""
    if len(keys) != len(digests):
        return False
    if len({k.generation for k in keys}) > 1 or any(k.owner_uid != owner_uid for k in keys):
        return False
    return sorted(k.digest or "" for k in keys) == sorted(digests)
