"""How the fake API server keeps one object: metadata parsed, the rest as compact JSON bytes.

A 30 KB ResourceSlice held as Python dicts costs about 300 KB; a fleet of 9,000 would need gigabytes. Kept
as bytes it costs its JSON size, and answering a get, a list or a watch event needs no serialisation. What
the server reads often (metadata for owners, finalizers and labels, the selectable field values) stays
parsed; the whole object is decoded only when a write needs it (:meth:`StoredObject.full`).
A StoredObject is never changed: a write stores a new one, so lists, events and the watch history share it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]
_ENVELOPE = ("apiVersion", "kind", "metadata")


def compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@dataclass(frozen=True, eq=False)
class StoredObject:
    api_version: str
    kind: str
    meta: JSON
    """The metadata; never changed in place (a new StoredObject gets a new dict)."""
    body: bytes
    """The members after ``metadata`` (``"spec":{...},"status":{...}``), without the enclosing braces."""
    fields: Mapping[str, str]
    """The selectable field values (``metadata.name``, ``spec.nodeName``, ...)."""

    @classmethod
    def of(cls, obj: Mapping[str, Any], fields: Mapping[str, str]) -> StoredObject:
        rest = {k: v for k, v in obj.items() if k not in _ENVELOPE}
        return cls(
            str(obj.get("apiVersion", "")), str(obj.get("kind", "")), dict(obj["metadata"]), compact(rest)[1:-1], fields
        )

    def with_meta(self, **changes: Any) -> StoredObject:
        """The same object with some metadata fields changed (e.g. the resourceVersion of its deletion)."""
        return StoredObject(self.api_version, self.kind, {**self.meta, **changes}, self.body, self.fields)

    @property
    def labels(self) -> Mapping[str, str]:
        return self.meta.get("labels") or {}

    def item_bytes(self) -> bytes:
        """The object as a list item (no apiVersion and kind, as a typed list carries them once)."""
        return b'{"metadata":' + compact(self.meta) + (b"," + self.body if self.body else b"") + b"}"

    def object_bytes(self) -> bytes:
        head = compact({"apiVersion": self.api_version, "kind": self.kind, "metadata": self.meta})
        return head[:-1] + (b"," + self.body if self.body else b"") + b"}"

    def full(self) -> JSON:
        """A fresh dict of the whole object (the caller may change it)."""
        obj: JSON = json.loads(self.object_bytes())
        return obj
