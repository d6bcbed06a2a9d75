"""Which node labels fakegpu owns, and the one patch that moves a node from its labels to the wanted ones.

A node carries labels from many writers (the kubelet, NFD, the user). fakegpu records the keys it set in
an annotation, so when a label stops applying (MIG turned off, sharing removed) it deletes exactly that
label and never one it did not write, even across restarts of the plugin.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OWNED_LABELS_ANNOTATION = "fakegpu.io/managed-labels"


def owned_keys(annotations: Mapping[str, str] | None) -> set[str]:
    text = (annotations or {}).get(OWNED_LABELS_ANNOTATION, "")
    return {k for k in (p.strip() for p in text.split(",")) if k}


def label_patch(
    labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None, wanted: Mapping[str, str]
) -> dict[str, Any] | None:
    """A JSON merge patch for ``metadata`` (labels set or nulled, the ownership annotation), None if in sync.

    A wanted label some other writer already set to the same value is left unclaimed, so fakegpu never
    deletes it later. Owned keys no longer wanted are nulled even if this view of the node lacks them
    (it may be stale; nulling a missing key is a no-op).
    """
    labels = labels or {}
    owned = owned_keys(annotations)
    changes: dict[str, str | None] = {k: v for k, v in wanted.items() if labels.get(k) != v}
    for key in sorted(owned - set(wanted)):
        changes[key] = None
    claimed = (owned & set(wanted)) | {k for k, v in changes.items() if v is not None}
    record = ",".join(sorted(claimed))
    annotation_changes: dict[str, str | None] = {}
    if (annotations or {}).get(OWNED_LABELS_ANNOTATION) != (record or None):
        annotation_changes[OWNED_LABELS_ANNOTATION] = record or None
    if not changes and not annotation_changes:
        return None
    meta: dict[str, Any] = {}
    if changes:
        meta["labels"] = changes
    if annotation_changes:
        meta["annotations"] = annotation_changes
    return {"metadata": meta}
