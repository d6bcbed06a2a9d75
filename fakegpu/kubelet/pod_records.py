"""The emulator's record of each pod it runs, in ``<root>/pods/<uid>/fakegpu-pod.json``.

A real kubelet learns its pods again from the API server after a restart and finds their devices in the
device manager's checkpoint. The emulator has no API server, so it keeps what the API server would
hold (name, namespace, annotations, the containers and their requests, the admission outcome) in the
pod's directory, where a kubelet keeps per-pod state too. The devices themselves come back from
``kubelet_internal_checkpoint``, which stays byte-compatible with a real kubelet's.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakegpu.kubelet.pod_claims import PodClaim
from fakegpu.kubelet.pod_spec import KINDS, ContainerSpec
from fakegpu.runtime.atomic_files import atomic_write

log = logging.getLogger(__name__)

PODS_DIR = "pods"
RECORD_NAME = "fakegpu-pod.json"


@dataclass(frozen=True)
class PodRecord:
    uid: str
    name: str
    namespace: str
    containers: tuple[ContainerSpec, ...]
    phase: str
    reason: str = ""
    message: str = ""
    annotations: dict[str, str] = field(default_factory=dict)
    order: int = 0
    """Admission order, so a restored kubelet lists its pods as it admitted them."""
    claims: tuple[PodClaim, ...] = ()
    """The pod's ResourceClaims (what the API server's pod spec would tell a restarted kubelet)."""
    claim_entries: dict[str, str] | None = None
    """The pod's claim names -> ResourceClaim names (``status.resourceClaimStatuses``), when given."""


def check_uid(uid: str) -> None:
    """ValueError unless ``uid`` can name the pod's directory (as every real pod UID can)."""
    if not uid or uid in (".", "..") or "/" in uid or "\0" in uid:
        raise ValueError(f"pod UID {uid!r} cannot name a directory under {PODS_DIR}/")


def record_path(root: Path, uid: str) -> Path:
    return root / PODS_DIR / uid / RECORD_NAME


def write_record(root: Path, record: PodRecord) -> None:
    path = record_path(root, record.uid)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "uid": record.uid,
        "name": record.name,
        "namespace": record.namespace,
        "annotations": record.annotations,
        "containers": [c.as_dict() for c in record.containers],
        "phase": record.phase,
        "reason": record.reason,
        "message": record.message,
        "order": record.order,
    }
    if record.claims:
        doc["claims"] = [c.as_dict() for c in record.claims]
    if record.claim_entries is not None:
        doc["claim_entries"] = dict(record.claim_entries)
    atomic_write(path, json.dumps(doc, indent=1).encode(), 0o600)


def remove_record(root: Path, uid: str) -> None:
    shutil.rmtree(root / PODS_DIR / uid, ignore_errors=True)


def _container(raw: Any) -> ContainerSpec:
    if not isinstance(raw, dict) or raw.get("kind") not in KINDS or not isinstance(raw.get("name"), str):
        raise ValueError(f"a container must have a name and a kind ({', '.join(KINDS)}), found {raw!r}")
    requests = raw.get("requests", {})
    if not isinstance(requests, dict) or not all(isinstance(v, int) for v in requests.values()):
        raise ValueError(f"container {raw['name']!r}: requests must map resources to counts")
    return ContainerSpec(raw["name"], {str(k): int(v) for k, v in requests.items()}, raw["kind"])


def _record(path: Path) -> PodRecord:
    doc = json.loads(path.read_text())
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return PodRecord(
        uid=str(doc["uid"]),
        name=str(doc["name"]),
        namespace=str(doc["namespace"]),
        containers=tuple(_container(c) for c in doc["containers"]),
        phase=str(doc["phase"]),
        reason=str(doc.get("reason", "")),
        message=str(doc.get("message", "")),
        annotations={str(k): str(v) for k, v in dict(doc.get("annotations") or {}).items()},
        order=int(doc.get("order", 0)),
        claims=tuple(_claim(c) for c in doc.get("claims") or []),
        claim_entries=_claim_entries(doc.get("claim_entries")),
    )


def _claim_entries(raw: Any) -> dict[str, str] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise ValueError(f"claim_entries must map pod claim names to ResourceClaim names, found {raw!r}")
    return dict(raw)


def _claim(raw: Any) -> PodClaim:
    if not isinstance(raw, dict) or not all(isinstance(raw.get(k), str) for k in ("namespace", "name", "uid")):
        raise ValueError(f"a claim must have a namespace, a name and a uid, found {raw!r}")
    return PodClaim(raw["namespace"], raw["name"], raw["uid"], tuple(str(d) for d in raw.get("drivers") or []))


def read_records(root: Path) -> list[PodRecord]:
    """Every readable record, in admission order; an unreadable one is logged with its path and skipped
    (the kubelet runs the pods it can, never none because of one)."""
    records = []
    pods = root / PODS_DIR
    for path in sorted(pods.glob(f"*/{RECORD_NAME}")) if pods.is_dir() else []:
        try:
            records.append(_record(path))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring the unreadable pod record %s: %s", path, exc)
    return sorted(records, key=lambda r: (r.order, r.uid))
