"""Custom resources checked as a real API server checks them: against their CRD's own structural schema.

The schema is read from the CRD manifests fakegpu ships (deploy/overlays/compute-domains), so the fake
server refuses exactly what a cluster with those CRDs installed refuses. What the API server does with a
structural schema and is kept here: unknown fields pruned (silently, as ``kubectl apply`` sees it),
``default`` filled in where the parent object exists, types/enums/required/minimum checked (``jsonschema``,
after dropping the ``x-kubernetes-*`` keywords it does not know), ``x-kubernetes-list-type: map`` keys
unique, and the one CEL rule the CRDs use, the transition rule ``self == oldSelf`` (checked on update with
the rule's message: ``spec: Invalid value: "object": A computeDomain.spec is immutable``). Any other CEL
rule fails loading, so a CRD change cannot be half-enforced without notice.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import yaml

from tests.apiserver import k8s_validation as val
from tests.apiserver.nodefeature_crd import node_feature_crd

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "overlays" / "compute-domains"
IMMUTABLE_RULE = "self == oldSelf"
JSON = dict[str, Any]


def _json_schema(schema: Any) -> Any:
    """The OpenAPI v3 structural schema as plain JSON Schema: ``x-kubernetes-*`` keywords dropped."""
    if isinstance(schema, dict):
        return {k: _json_schema(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if isinstance(schema, list):
        return [_json_schema(v) for v in schema]
    return schema


def _transition_rules(schema: Mapping[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    for rule in schema.get("x-kubernetes-validations") or []:
        if rule.get("rule") != IMMUTABLE_RULE:
            raise NotImplementedError(f"CEL rule {rule.get('rule')!r} at {'.'.join(path) or '<root>'} is not emulated")
        yield path, rule["message"]
    for name, prop in (schema.get("properties") or {}).items():
        yield from _transition_rules(prop, (*path, name))


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        obj = obj.get(part) if isinstance(obj, Mapping) else None
    return obj


def _prune_and_default(obj: Any, schema: Mapping[str, Any], at_root: bool) -> Any:
    """Unknown fields dropped and defaults filled in, recursively (``metadata`` is the API server's own)."""
    if isinstance(obj, dict) and "properties" in schema:
        props = schema["properties"]
        for key in [k for k in obj if k not in props]:
            if not schema.get("x-kubernetes-preserve-unknown-fields"):
                del obj[key]
        for key, prop in props.items():
            if key not in obj and "default" in prop:
                obj[key] = copy.deepcopy(prop["default"])
            if key in obj and not (at_root and key == "metadata"):
                obj[key] = _prune_and_default(obj[key], prop, False)
    elif isinstance(obj, list) and "items" in schema:
        return [_prune_and_default(item, schema["items"], False) for item in obj]
    return obj


def _list_map_errors(obj: Any, schema: Mapping[str, Any], path: str) -> Iterator[val.FieldError]:
    if isinstance(obj, dict):
        for key, prop in (schema.get("properties") or {}).items():
            if key in obj:
                yield from _list_map_errors(obj[key], prop, f"{path}.{key}" if path else key)
    elif isinstance(obj, list) and "items" in schema:
        keys = schema.get("x-kubernetes-list-map-keys") if schema.get("x-kubernetes-list-type") == "map" else None
        seen: set[str] = set()
        for i, item in enumerate(obj):
            if keys and isinstance(item, dict):
                identity = json.dumps({k: item.get(k) for k in keys}, sort_keys=True)
                if identity in seen:
                    yield val.FieldError(f"{path}[{i}]", "Duplicate value", {k: item.get(k) for k in keys})
                seen.add(identity)
            yield from _list_map_errors(item, schema["items"], f"{path}[{i}]")


def _path(parts: Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _field_error(error: jsonschema.ValidationError) -> val.FieldError:
    """A jsonschema error in the API server's words (``field: Required value``, ``Unsupported value``...)."""
    where = _path(error.absolute_path)
    if error.validator == "required":
        missing = str(error.message).split("'")[1]
        return val.FieldError(f"{where}.{missing}" if where else missing, "Required value")
    if error.validator == "enum":
        allowed = ", ".join(json.dumps(v) for v in error.validator_value)
        return val.FieldError(where, "Unsupported value", error.instance, f"supported values: {allowed}")
    if error.validator == "minimum":
        return val.FieldError(
            where,
            "Invalid value",
            error.instance,
            f"{where} in body should be greater than or equal to {error.validator_value}",
        )
    if error.validator == "type":
        return val.FieldError(
            where,
            "Invalid value",
            type(error.instance).__name__,
            f"{where} in body must be of type {error.validator_value}: {json.dumps(type(error.instance).__name__)}",
        )
    return val.FieldError(where or "<root>", "Schema", None, str(error.message))


@dataclass(frozen=True)
class CustomResourceSchema:
    """One version of one CRD: how its objects are defaulted, pruned and validated."""

    plural: str
    kind: str
    has_status: bool
    structural: JSON
    validator: Any
    transition_rules: tuple[tuple[tuple[str, ...], str], ...]

    def normalize(self, obj: JSON) -> None:
        """Prune unknown fields and fill in defaults, in place (the API server's decoding)."""
        _prune_and_default(obj, self.structural, True)

    def errors(self, obj: JSON) -> list[val.FieldError]:
        body = {k: v for k, v in obj.items() if k != "metadata"}
        found = sorted(self.validator.iter_errors(body), key=lambda e: list(map(str, e.absolute_path)))
        return [_field_error(e) for e in found] + list(_list_map_errors(body, self.structural, ""))

    def transition_errors(self, new: JSON, old: JSON) -> list[val.FieldError]:
        """The ``self == oldSelf`` rules, checked where both the old and the new object have the field."""
        errors = []
        for path, message in self.transition_rules:
            before, after = _get(old, path), _get(new, path)
            if before is not None and after is not None and before != after:
                errors.append(val.FieldError(".".join(path), "Invalid value", "object", message))
        return errors


def schema_from_crd(crd: Mapping[str, Any]) -> CustomResourceSchema:
    """The served version of one CRD object."""
    (version,) = [v for v in crd["spec"]["versions"] if v["served"]]
    structural = version["schema"]["openAPIV3Schema"]
    validator_class = jsonschema.validators.validator_for({}, default=jsonschema.Draft7Validator)
    plain = _json_schema(structural)
    plain["properties"].pop("metadata", None)
    return CustomResourceSchema(
        plural=crd["spec"]["names"]["plural"],
        kind=crd["spec"]["names"]["kind"],
        has_status="status" in (version.get("subresources") or {}),
        structural=structural,
        validator=validator_class(plain),
        transition_rules=tuple(_transition_rules(structural)),
    )


@functools.cache
def crd_schemas(directory: Path = CRD_DIR) -> dict[str, CustomResourceSchema]:
    """The served version of every CRD manifest in ``directory`` (``*-crd.yaml``), by plural."""
    schemas = {}
    for path in sorted(directory.glob("*-crd.yaml")):
        schema = schema_from_crd(yaml.safe_load(path.read_text()))
        schemas[schema.plural] = schema
    return schemas


@functools.cache
def custom_schemas() -> dict[str, CustomResourceSchema]:
    """Every custom resource the server can serve, by plural: NVIDIA's CRDs from deploy/ and NFD's NodeFeature
    (``tests.apiserver.nodefeature_crd``)."""
    nfd = schema_from_crd(node_feature_crd())
    return {**crd_schemas(), nfd.plural: nfd}
