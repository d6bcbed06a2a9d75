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

    {"checksum": "sha256:<hex>", "data": {"version": "v1", "preparedClaims": [{"uid": ..., "namespace": ...,
     "name": ..., "state": "PrepareStarted", "driver": ..., "pool": ..., "devices": [...]}]}}

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

from fakegpu.dra.prepare_plan import PreparedResult, PreparePlan
from fakegpu.runtime.atomic_files import atomic_write
from fakegpu.runtime.directories import ensure_dir

CHECKPOINT_FILE: Final = "checkpoint.json"
CHECKPOINT_MODE: Final = 0o600
VERSION: Final = "v1"
PREPARE_STARTED: Final = "PrepareStarted"
PREPARE_COMPLETED: Final = "PrepareCompleted"
ClaimState = Literal["PrepareStarted", "PrepareCompleted"]


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

    @property
    def completed(self) -> bool:
        return self.state == PREPARE_COMPLETED

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
        }


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
    return out


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
    if state not in (PREPARE_STARTED, PREPARE_COMPLETED):
        raise fail(f"state {state!r} is neither {PREPARE_STARTED} nor {PREPARE_COMPLETED}")
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
    )


def parse_checkpoint(text: str, source: str) -> dict[str, PreparedClaim]:
    """Verify and decode checkpoint JSON; ``source`` names the file in errors."""

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
    claims: dict[str, PreparedClaim] = {}
    for i, raw in enumerate(raw_claims):
        claim = _parse_claim(raw, f"preparedClaims[{i}]", source)
        if claim.uid in claims:
            raise fail(f"claim {claim.uid} appears twice")
        claims[claim.uid] = claim
    return claims


def render_checkpoint(claims: Mapping[str, PreparedClaim]) -> str:
    data = {"version": VERSION, "preparedClaims": [claims[uid].to_json() for uid in sorted(claims)]}
    return json.dumps({"checksum": checksum(data), "data": data}, indent=2, sort_keys=True) + "\n"


class PreparedClaims:
    """The checkpoint file plus its in-memory copy; every change is written to disk before it returns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._claims: dict[str, PreparedClaim] | None = None
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
                self._claims = {}
            except UnicodeDecodeError as exc:
                raise CheckpointCorrupted(f"checkpoint {self.path} is corrupted: not UTF-8 ({exc})") from None
            else:
                self._claims = parse_checkpoint(text, str(self.path))
            return dict(self._claims)

    def _state(self) -> dict[str, PreparedClaim]:
        if self._claims is None:
            self.load()
        assert self._claims is not None
        return self._claims

    def _write(self, claims: dict[str, PreparedClaim]) -> None:
        ensure_dir(self.path.parent)
        atomic_write(self.path, render_checkpoint(claims).encode("utf-8"), CHECKPOINT_MODE)
        self._claims = claims

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

    def started_only(self) -> list[PreparedClaim]:
        """Claims a crash left between ``start`` and ``complete``: to roll back or redo."""
        return [c for c in self.claims() if not c.completed]
