"""``kubernetes_validate.validate`` with the parsed schemas kept in memory.

``kubernetes_validate.validate`` reads and parses the 1.6 MB ``_definitions.json`` and builds a fresh
``referencing`` registry on every call: about 9 ms for a Node and far more for a ResourceSlice, which made
the fake API server the bottleneck of every benchmark (635 s for 1000 nodes' slices). This module does the
same thing once per (schema directory, kind, apiVersion): the same files (found with the package's own
helpers, so the same schema version is picked for a requested Kubernetes version), the same
``Draft202012Validator`` over the same registry, and the same exceptions (``kubernetes_validate``'s
``ValidationError``, ``SchemaNotFoundError``, ``VersionNotSupportedError``, ``InvalidSchemaError``), so a
caller cannot tell the difference except by the clock.

Thread safety: the cache is filled under a lock; a compiled validator holds no per-call state (jsonschema
validators and ``referencing`` registries are immutable), so validations may run concurrently.
"""

from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
from kubernetes_validate import utils as kv_utils
from referencing import Registry, Resource

_GROUP_SUFFIX = re.compile(r"^([^./]*)(?:\.[^/]*)?/")


@dataclass(frozen=True)
class _SchemaKey:
    schema_dir: str
    kind: str
    api_version: str


_lock = threading.Lock()
_validators: dict[_SchemaKey, Any] = {}
_definitions: dict[str, Resource[Any]] = {}


@functools.lru_cache(maxsize=64)
def _schema_version(desired_version: str) -> str:
    """The schema version ``kubernetes_validate.validate`` would pick (same helpers, same comparisons)."""
    if kv_utils.major_minor(desired_version) > kv_utils.latest_version():
        raise kv_utils.VersionNotSupportedError(version=kv_utils.major_minor(desired_version))
    candidates = [
        v for v in kv_utils.all_versions() if kv_utils.major_minor(v) <= kv_utils.major_minor(desired_version)
    ]
    return str(candidates[-1])


def _validator(key: _SchemaKey, desired_version: str) -> Any:
    with _lock:
        cached = _validators.get(key)
        if cached is not None:
            return cached
        api_part = _GROUP_SUFFIX.sub(r"\1-", key.api_version)
        try:
            schema = kv_utils.schema_contents(
                f"kubernetes-json-schema/{key.schema_dir}/{key.kind.lower()}-{api_part}.json", desired_version
            )
        except FileNotFoundError:
            raise kubernetes_validate.SchemaNotFoundError(
                version=kv_utils.major_minor(desired_version), kind=key.kind, api_version=key.api_version
            ) from None
        definitions = _definitions.get(key.schema_dir)
        if definitions is None:
            contents = kv_utils.schema_contents(
                f"kubernetes-json-schema/{key.schema_dir}/_definitions.json", desired_version
            )
            definitions = _definitions[key.schema_dir] = Resource.from_contents(contents)
        registry: Registry[Any] = Resource.from_contents(schema) @ Registry()
        registry = (definitions @ registry).crawl()
        validator = jsonschema.validators.Draft202012Validator(schema, registry=registry)
        _validators[key] = validator
        return validator


def validate(data: dict[str, Any], desired_version: str, strict: bool = False) -> str:
    """Drop-in for ``kubernetes_validate.validate`` on dicts: returns the schema's ``major.minor`` or raises
    the package's own exceptions."""
    if desired_version.startswith("v"):
        desired_version = desired_version[1:]
    version = _schema_version(desired_version)
    schema_dir = f"v{version}-local" + ("-strict" if strict else "")
    validator = _validator(_SchemaKey(schema_dir, str(data["kind"]), str(data["apiVersion"])), desired_version)
    try:
        validator.validate(data)
    except jsonschema.ValidationError as exc:
        raise kubernetes_validate.ValidationError(exc, version=kv_utils.major_minor(version)) from None
    return str(kv_utils.major_minor(version))


def cached_schemas() -> int:
    """How many (schema dir, kind, apiVersion) validators are compiled (for tests)."""
    with _lock:
        return len(_validators)
