"""The DRA driver's checkpoint: which claims it prepared, so restarts neither lose nor double-prepare them.

The kubelet repeats NodePrepareResources after restarts and sends NodeUnprepareResources when the claim
may already be gone from the API server, so the driver must remember what it did. Like NVIDIA's driver
it records two phases per claim: ``PrepareStarted`` is written *before* any side effect (the CDI spec),
``PrepareCompleted`` after all of them. A crash in between leaves a ``PrepareStarted`` entry that tells
the next run exactly what to roll back or redo.

Idempotency contract for the callers (the kubelet plugin):

* prepare of a ``PrepareCompleted`` claim does nothing and returns the stored devices;
* prepare of a ``PrepareStarted`` claim redoes the whole preparation (recomputing it is deterministic,
  and every side effect overwrites or removes what a half-finished attempt left);
* unprepare of an unknown claim succeeds (``remove`` returns False);
* unprepare of a ``PrepareStarted`` claim removes whatever the entry names, then the entry.

File: ``<plugin dir>/checkpoint.json``, mode 0600, written atomically (temp file, fsync, rename)::

    {"checksum": "sha256:<hex>", "data": {"version": "v1", "nodeBootID": "<boot id>", "preparedClaims": [
     {"uid": ..., "namespace": ..., "name": ..., "state": "PrepareStarted", "driver": ..., "pool": ...,
      "devices": [...]}]}}

``nodeBootID`` is NVIDIA's ``CheckpointV2.NodeBootID`` (kubernetes-sigs/dra-driver-nvidia-gpu
``cmd/gpu-kubelet-plugin/checkpointv.go``, v0.4.0): the boot the claims were prepared in, omitted by
fakegpu versions before it (``fakegpu.dra.boot_reset`` decides what a start does with it). A device's
``timeSlice`` is NVIDIA's ``timeSliceApplied``: the interval prepare set on the GPU.

Each device entry also keeps what the allocation gave it that matters once the claim may be gone: its
``shareID`` and ``consumedCapacity`` (consumable shares), ``adminAccess``, and its normalized opaque config
(``config``), against which another claim wanting a share of the device is checked
(``fakegpu.dra.shared_devices``), as NVIDIA keeps the claim's whole status.

The checksum is SHA-256 over the canonical JSON of ``data`` *as parsed* (sorted keys, no spaces, ASCII),
so fields a newer version adds are still covered and still readable; unknown per-claim fields are
ignored on load. A checksum mismatch or unreadable file raises ``CheckpointCorrupted`` naming the file;
the driver must not guess at prepared state.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Literal

from fakegpu.dra.prepare_plan import TIME_SLICE_ENV, PreparedResult, PreparePlan
from fakegpu.runtime.atomic_files import atomic_write
from fakegpu.runtime.directories import ensure_dir

CHECKPOINT_FILE: Final = "checkpoint.json"
CHECKPOINT_MODE: Final = 0o600
VERSION: Final = "v1"
PREPARE_STARTED: Final = "PrepareStarted"
PREPARE_COMPLETED: Final = "PrepareCompleted"
PREPARE_ABORTED: Final = "PrepareAborted"
"""An unprepare came before the prepare completed (the compute-domain plugin): the entry stays a while so a
stale retry of the same prepare is refused instead of redoing it (NVIDIA's ``ClaimCheckpointStatePrepareAborted``,
``cmd/compute-domain-kubelet-plugin/checkpointv.go`` at commit 0807eed)."""
ClaimState = Literal["PrepareStarted", "PrepareCompleted", "PrepareAborted"]
NODE_BOOT_ID: Final = "nodeBootID"
"""NVIDIA's ``CheckpointV2.NodeBootID`` (omitted while empty): the boot the prepared claims belong to."""


class CheckpointCorrupted(ValueError):
    """The checkpoint file cannot be trusted; the message names it so an operator can inspect or remove it."""


@dataclass(frozen=True)
class ClaimRef:
    """A claim as the kubelet names it in NodePrepareResources / NodeUnprepareResources."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class PreparedClaim:
    uid: str
    namespace: str
    name: str
    state: ClaimState
    driver: str
    pool: str
    devices: tuple[PreparedResult, ...]
    aborted_at: float | None = None
    """Unix time the entry became ``PrepareAborted`` (NVIDIA's ``abortedAt``)."""

    @property
    def completed(self) -> bool:
        return self.state == PREPARE_COMPLETED

    @property
    def aborted(self) -> bool:
        return self.state == PREPARE_ABORTED

    @property
    def plan(self) -> PreparePlan:
        """The stored preparation: what to return for a completed claim, or what to undo for a started one."""
        return PreparePlan(
            uid=self.uid,
            namespace=self.namespace,
            name=self.name,
            driver=self.driver,
            pool=self.pool,
            results=self.devices,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "state": self.state,
            "driver": self.driver,
            "pool": self.pool,
            "devices": [result_json(d) for d in self.devices],
        } | ({"abortedAt": self.aborted_at} if self.aborted_at is not None else {})


def result_json(result: PreparedResult) -> dict[str, Any]:
    """One prepared device as the checkpoint stores it."""
    out: dict[str, Any] = {
        "request": result.request,
        "pool": result.pool,
        "device": result.device,
        "uuid": result.uuid,
        "cdiDeviceName": result.cdi_device_name,
        "cdiDeviceIDs": list(result.cdi_ids),
        "env": list(result.env),
    }
    if result.share_id:
        out["shareID"] = result.share_id
    if result.mps_daemon_id:
        out["mpsControlDaemonID"] = result.mps_daemon_id
    if result.admin_access:
        out["adminAccess"] = True
    if result.consumed_capacity:
        out["consumedCapacity"] = dict(result.consumed_capacity)
    if result.config_key:
        out["config"] = result.config_key
    if result.time_slice:
        out["timeSlice"] = result.time_slice
    return out


def _time_slice(data: Mapping[str, Any]) -> str | None:
    """The interval prepare set; an entry written before ``timeSlice`` existed counts as applied when its
    device carries the interval variable (NVIDIA reads a missing ``timeSliceApplied`` as true, so a GPU
    set by an older driver is still reset)."""
    if "timeSlice" in data:
        return str(data["timeSlice"]) if data["timeSlice"] else None
    prefix = f"{TIME_SLICE_ENV}="
    return next((str(e)[len(prefix) :] for e in data["env"] if str(e).startswith(prefix)), None)


def parse_result(data: Mapping[str, Any]) -> PreparedResult:
    """Inverse of ``result_json``; unknown keys are ignored so newer checkpoints stay readable."""
    return PreparedResult(
        request=str(data["request"]),
        pool=str(data["pool"]),
        device=str(data["device"]),
        share_id=str(data["shareID"]) if data.get("shareID") else None,
        uuid=str(data["uuid"]),
        cdi_device_name=str(data["cdiDeviceName"]),
        cdi_ids=tuple(str(i) for i in data["cdiDeviceIDs"]),
        env=tuple(str(e) for e in data["env"]),
        mps_daemon_id=str(data["mpsControlDaemonID"]) if data.get("mpsControlDaemonID") else None,
        admin_access=data.get("adminAccess") is True,
        consumed_capacity=tuple((str(k), str(v)) for k, v in sorted((data.get("consumedCapacity") or {}).items())),
        config_key=str(data.get("config") or ""),
        time_slice=_time_slice(data),
    )


def _canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def checksum(data: Any) -> str:
    """``sha256:<hex>`` over the canonical JSON of the checkpoint's ``data`` object."""
    return "sha256:" + hashlib.sha256(_canonical(data)).hexdigest()


def _parse_claim(raw: Any, where: str, source: str) -> PreparedClaim:
    def fail(what: str) -> CheckpointCorrupted:
        return CheckpointCorrupted(f"checkpoint {source} is corrupted: {where}: {what}")

    if not isinstance(raw, Mapping):
        raise fail("must be an object")
    for key in ("uid", "namespace", "name", "state", "driver", "pool"):
        if not isinstance(raw.get(key), str):
            raise fail(f"{key} must be a string")
    state = raw["state"]
    if state not in (PREPARE_STARTED, PREPARE_COMPLETED, PREPARE_ABORTED):
        raise fail(f"state {state!r} is none of {PREPARE_STARTED}, {PREPARE_COMPLETED}, {PREPARE_ABORTED}")
    aborted_at = raw.get("abortedAt")
    if aborted_at is not None and not isinstance(aborted_at, (int, float)):
        raise fail("abortedAt must be a number")
    devices = raw.get("devices")
    if not isinstance(devices, list):
        raise fail("devices must be a list")
    try:
        parsed = tuple(parse_result(d) for d in devices)
    except (KeyError, TypeError, AttributeError) as exc:
        raise fail(f"a device entry is malformed ({exc!r})") from None
    return PreparedClaim(
        uid=raw["uid"],
        namespace=raw["namespace"],
        name=raw["name"],
        state=state,
        driver=raw["driver"],
        pool=raw["pool"],
        devices=parsed,
        aborted_at=float(aborted_at) if aborted_at is not None else None,
    )


def parse_checkpoint(text: str, source: str) -> dict[str, PreparedClaim]:
    """Verify and decode checkpoint JSON; ``source`` names the file in errors."""
    return parse_checkpoint_file(text, source)[0]


def parse_checkpoint_file(text: str, source: str) -> tuple[dict[str, PreparedClaim], str]:
    """The claims and the node boot ID (``""`` in a checkpoint written before it existed)."""

    def fail(what: str) -> CheckpointCorrupted:
        return CheckpointCorrupted(f"checkpoint {source} is corrupted: {what}")

    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise fail(f"invalid JSON: {exc}") from None
    if not isinstance(doc, Mapping) or "data" not in doc or not isinstance(doc.get("checksum"), str):
        raise fail("expected an object with checksum and data")
    data = doc["data"]
    actual = checksum(data)
    if doc["checksum"] != actual:
        raise fail(f"checksum mismatch: file says {doc['checksum']}, content hashes to {actual}")
    if not isinstance(data, Mapping):
        raise fail("data must be an object")
    if data.get("version") != VERSION:
        raise fail(f"unsupported version {data.get('version')!r} (this fakegpu reads {VERSION})")
    raw_claims = data.get("preparedClaims")
    if not isinstance(raw_claims, list):
        raise fail("data.preparedClaims must be a list")
    boot_id = data.get(NODE_BOOT_ID, "")
    if not isinstance(boot_id, str):
        raise fail(f"data.{NODE_BOOT_ID} must be a string")
    claims: dict[str, PreparedClaim] = {}
    for i, raw in enumerate(raw_claims):
        claim = _parse_claim(raw, f"preparedClaims[{i}]", source)
        if claim.uid in claims:
            raise fail(f"claim {claim.uid} appears twice")
        claims[claim.uid] = claim
    return claims, boot_id


def render_checkpoint(claims: Mapping[str, PreparedClaim], boot_id: str = "") -> str:
    data: dict[str, Any] = {"version": VERSION, "preparedClaims": [claims[uid].to_json() for uid in sorted(claims)]}
    if boot_id:
        data[NODE_BOOT_ID] = boot_id
    return json.dumps({"checksum": checksum(data), "data": data}, indent=2, sort_keys=True) + "\n"


class PreparedClaims:
    """The checkpoint file plus its in-memory copy; every change is written to disk before it returns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._claims: dict[str, PreparedClaim] | None = None
        self._boot_id = ""
        self._lock = threading.RLock()

    @classmethod
    def in_dir(cls, plugin_dir: Path) -> PreparedClaims:
        """The checkpoint at ``<plugin dir>/checkpoint.json`` (``/var/lib/kubelet/plugins/<driver>``)."""
        return cls(plugin_dir / CHECKPOINT_FILE)

    def load(self) -> dict[str, PreparedClaim]:
        """(Re)read the file: none yet -> no claims; unreadable or tampered -> ``CheckpointCorrupted``."""
        with self._lock:
            try:
                text = self.path.read_text(encoding="utf-8")
            except FileNotFoundError:
                self._claims, self._boot_id = {}, ""
            except UnicodeDecodeError as exc:
                raise CheckpointCorrupted(f"checkpoint {self.path} is corrupted: not UTF-8 ({exc})") from None
            else:
                self._claims, self._boot_id = parse_checkpoint_file(text, str(self.path))
            return dict(self._claims)

    def _state(self) -> dict[str, PreparedClaim]:
        if self._claims is None:
            self.load()
        assert self._claims is not None
        return self._claims

    def _write(self, claims: dict[str, PreparedClaim]) -> None:
        ensure_dir(self.path.parent)
        atomic_write(self.path, render_checkpoint(claims, self._boot_id).encode("utf-8"), CHECKPOINT_MODE)
        self._claims = claims

    @property
    def node_boot_id(self) -> str:
        """The boot the file's claims were prepared in; ``""`` for a file written before boot IDs (or none)."""
        with self._lock:
            self._state()
            return self._boot_id

    def for_boot(self, boot_id: str, *, keep: bool) -> list[PreparedClaim]:
        """Record ``boot_id`` in the file (creating it if there is none); with ``keep`` False also forget
        every claim, as NVIDIA's fresh checkpoint after a reboot does. Returns the claims forgotten."""
        with self._lock:
            claims = dict(self._state())
            self._boot_id = boot_id
            self._write(claims if keep else {})
            return [] if keep else [claims[uid] for uid in sorted(claims)]

    def get(self, uid: str) -> PreparedClaim | None:
        with self._lock:
            return self._state().get(uid)

    def claims(self) -> list[PreparedClaim]:
        with self._lock:
            return [self._state()[uid] for uid in sorted(self._state())]

    def start(self, claim: ClaimRef, prep: PreparePlan) -> PreparedClaim:
        """Record ``PrepareStarted`` with the devices about to be prepared; call before any side effect.

        A completed claim is refused: the contract is to return its stored devices, not to redo it.
        """
        if prep.uid != claim.uid:
            raise ValueError(f"preparation is for claim {prep.uid}, not {claim.uid}")
        with self._lock:
            claims = dict(self._state())
            existing = claims.get(claim.uid)
            if existing is not None and existing.completed:
                raise ValueError(f"claim {claim.namespace}/{claim.name} ({claim.uid}) is already {PREPARE_COMPLETED}")
            entry = PreparedClaim(
                uid=claim.uid,
                namespace=claim.namespace,
                name=claim.name,
                state=PREPARE_STARTED,
                driver=prep.driver,
                pool=prep.pool,
                devices=prep.results,
            )
            claims[claim.uid] = entry
            self._write(claims)
            return entry

    def complete(self, uid: str) -> PreparedClaim:
        """Mark a started claim ``PrepareCompleted`` once every side effect is done."""
        with self._lock:
            claims = dict(self._state())
            if uid not in claims:
                raise KeyError(f"claim {uid} has no checkpoint entry; call start() first")
            entry = replace(claims[uid], state=PREPARE_COMPLETED)
            claims[uid] = entry
            self._write(claims)
            return entry

    def remove(self, uid: str) -> bool:
        """Forget a claim after unprepare; an unknown claim is not an error (returns False)."""
        with self._lock:
            claims = dict(self._state())
            if claims.pop(uid, None) is None:
                return False
            self._write(claims)
            return True

    def abort(self, uid: str, at: float) -> PreparedClaim:
        """Mark a started claim ``PrepareAborted`` (unprepared before its prepare completed), keeping what it
        was to prepare so a stale retry of the same prepare can be recognised."""
        with self._lock:
            claims = dict(self._state())
            if uid not in claims:
                raise KeyError(f"claim {uid} has no checkpoint entry")
            entry = replace(claims[uid], state=PREPARE_ABORTED, aborted_at=at)
            claims[uid] = entry
            self._write(claims)
            return entry

    def expire_aborted(self, now: float, ttl: float) -> list[str]:
        """Drop ``PrepareAborted`` entries older than ``ttl`` seconds; the UIDs dropped."""
        with self._lock:
            claims = dict(self._state())
            expired = sorted(
                uid for uid, c in claims.items() if c.aborted and (c.aborted_at is None or now - c.aborted_at >= ttl)
            )
            if expired:
                self._write({uid: c for uid, c in claims.items() if uid not in expired})
            return expired

    def started_only(self) -> list[PreparedClaim]:
        """Claims a crash left between ``start`` and ``complete``: to roll back or redo."""
        return [c for c in self.claims() if c.state == PREPARE_STARTED]
