"""The shape the manifest applier needs of each document, checked before anything is created, so that a bad
manifest fails with the document, the object and the field named rather than a bare ``KeyError`` halfway
through applying it (the API server would refuse the object the same way, by its field path).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class _Doc:
    """Where errors point: ``<source>: document <n> (<kind> <namespace>/<name>)``."""

    def __init__(self, source: str, number: int, doc: Mapping[str, Any]) -> None:
        raw = doc.get("metadata")
        meta: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        name = meta.get("name") or meta.get("generateName") or "<no name>"
        self.where = f"{source}: document {number} ({doc.get('kind')} {meta.get('namespace', 'default')}/{name})"

    def fail(self, field: str, expected: str, found: Any) -> ValueError:
        return ValueError(f"{self.where}: {field}: expected {expected}, found {found!r}")


def _mapping(at: _Doc, parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = parent.get(key)
    if not isinstance(value, Mapping):
        raise at.fail(path, "a mapping", value)
    return value


def _count(at: _Doc, spec: Mapping[str, Any], key: str) -> None:
    value = spec.get(key, 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise at.fail(f"spec.{key}", "a non-negative integer", value)


def _pod_spec(at: _Doc, spec: Mapping[str, Any], path: str) -> None:
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise at.fail(f"{path}.containers", "a non-empty list", containers)
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or []):
            if not isinstance(container, Mapping) or not isinstance(container.get("name"), str):
                raise at.fail(f"{path}.{key}[{i}].name", "a string", (container or {}).get("name"))
    for i, entry in enumerate(spec.get("resourceClaims") or []):
        where = f"{path}.resourceClaims[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            raise at.fail(f"{where}.name", "a string", entry.get("name") if isinstance(entry, Mapping) else entry)
        sources = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if entry.get(k)]
        if len(sources) != 1:
            raise at.fail(where, "exactly one of resourceClaimName, resourceClaimTemplateName", dict(entry))


def check_document(doc: Mapping[str, Any], number: int, source: str) -> None:
    """ValueError naming document ``number``, its kind, namespace/name and the field, for what the applier
    cannot use."""
    at = _Doc(source, number, doc)
    meta = _mapping(at, doc, "metadata", "metadata")
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        raise at.fail("metadata.name", "a non-empty string", meta.get("name"))
    kind = doc["kind"]
    if kind == "Pod":
        _pod_spec(at, _mapping(at, doc, "spec", "spec"), "spec")
    elif kind in ("Deployment", "Job"):
        spec = _mapping(at, doc, "spec", "spec")
        _count(at, spec, "parallelism" if kind == "Job" else "replicas")
        template = _mapping(at, spec, "template", "spec.template")
        _pod_spec(at, _mapping(at, template, "spec", "spec.template.spec"), "spec.template.spec")
    elif kind == "ResourceClaimTemplate":
        _mapping(at, _mapping(at, doc, "spec", "spec"), "spec", "spec.spec")
