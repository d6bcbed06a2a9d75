"""Server-side validation the JSON schemas of kubernetes-validate cannot express.

Covers object metadata (names, labels, annotations, owner references) and the resource.k8s.io rules a
DRA driver runs into: name formats, the ResourceSlice node-selection one-of, per-release list limits
(taken from the field documentation of the 1.34/1.35/1.36 OpenAPI schemas), immutable fields, and the
API server dropping fields of disabled feature gates. Each check returns ``FieldError`` objects whose
``str()`` follows the API server's ``field.Error`` wording.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from tests.apiserver.request_policy import request_policy_problems

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL_RE = re.compile(_DNS_LABEL)
DNS_SUBDOMAIN_RE = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
C_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUALIFIED_NAME_PART_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
QUANTITY_RE = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+|[KMGTPE]i|[numkMGTPE])?")
SEMVER_RE = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-((0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(\+([0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*))?"
)

DNS_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    f"'{_DNS_LABEL}')"
)
DNS_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    f"'{DNS_SUBDOMAIN_RE.pattern}')"
)

# Feature gates whose fields the API server silently drops from a ResourceSlice when the gate is off.
PARTITIONABLE = "DRAPartitionableDevices"
TAINTS = "DRADeviceTaints"
CONSUMABLE_CAPACITY = "DRAConsumableCapacity"
BINDING_CONDITIONS = "DRADeviceBindingConditions"
NODE_ALLOCATABLE = "DRANodeAllocatableResources"


def default_feature_gates(minor: int) -> dict[str, bool]:
    """Defaults of a stock cluster (kubernetes ``pkg/features/kube_features.go``): these DRA gates are beta (on)
    from 1.36, alpha before."""
    beta = minor >= 36
    return {
        PARTITIONABLE: beta,
        TAINTS: beta,
        CONSUMABLE_CAPACITY: beta,
        BINDING_CONDITIONS: beta,
        NODE_ALLOCATABLE: False,
    }


_REASONS = {
    "Invalid value": "FieldValueInvalid",
    "Required value": "FieldValueRequired",
    "Too many": "FieldValueTooMany",
    "Duplicate value": "FieldValueDuplicate",
    "Forbidden": "FieldValueForbidden",
    "Too long": "FieldValueTooLong",
    "Unsupported value": "FieldValueNotSupported",
    "Schema": "FieldValueInvalid",  # a JSON-schema violation reported by kubernetes-validate
}


@dataclass(frozen=True)
class FieldError:
    field: str
    type: str  # a key of _REASONS
    value: Any = None
    detail: str = ""

    @property
    def reason(self) -> str:
        return _REASONS.get(self.type, "FieldValueInvalid")

    def __str__(self) -> str:
        if self.type == "Schema":
            return f"{self.field}: {self.detail}"
        if self.type in ("Invalid value", "Duplicate value", "Unsupported value"):
            text = f"{self.field}: {self.type}: {json.dumps(self.value, sort_keys=True)}"
        elif self.type == "Too many":
            text = f"{self.field}: Too many: {self.value}: must have at most {self.detail} items"
            return text
        else:
            text = f"{self.field}: {self.type}"
        return f"{text}: {self.detail}" if self.detail else text


def _invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(field, "Invalid value", value, detail)


def _required(field: str, detail: str = "") -> FieldError:
    return FieldError(field, "Required value", None, detail)


def _too_many(field: str, count: int, limit: int) -> FieldError:
    return FieldError(field, "Too many", count, str(limit))


def dns_label(value: Any, field: str) -> list[FieldError]:
    if not isinstance(value, str) or not value:
        return [_required(field)]
    errs = []
    if len(value) > 63:
        errs.append(_invalid(field, value, "must be no more than 63 characters"))
    if not DNS_LABEL_RE.fullmatch(value):
        errs.append(_invalid(field, value, DNS_LABEL_MSG))
    return errs


def dns_subdomain(value: Any, field: str, max_len: int = 253) -> list[FieldError]:
    if not isinstance(value, str) or not value:
        return [_required(field)]
    errs = []
    if len(value) > max_len:
        errs.append(_invalid(field, value, f"must be no more than {max_len} characters"))
    if not DNS_SUBDOMAIN_RE.fullmatch(value):
        errs.append(_invalid(field, value, DNS_SUBDOMAIN_MSG))
    return errs


def qualified_name(value: str, field: str) -> list[FieldError]:
    """Label / annotation key: ``[prefix/]name`` (prefix a DNS subdomain, name ≤ 63)."""
    prefix, _, name = value.rpartition("/")
    errs: list[FieldError] = []
    if "/" in value:
        if not prefix:
            errs.append(_invalid(field, value, "prefix part must be non-empty"))
        elif len(prefix) > 253 or not DNS_SUBDOMAIN_RE.fullmatch(prefix):
            errs.append(_invalid(field, value, f"prefix part {DNS_SUBDOMAIN_MSG}"))
    if not name or len(name) > 63 or not _QUALIFIED_NAME_PART_RE.fullmatch(name):
        errs.append(
            _invalid(
                field,
                value,
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character, and be no more than 63 characters",
            )
        )
    return errs


def label_value(value: Any, field: str) -> list[FieldError]:
    if not isinstance(value, str):
        return [_invalid(field, value, "must be a string")]
    if value and (len(value) > 63 or not _QUALIFIED_NAME_PART_RE.fullmatch(value)):
        return [
            _invalid(
                field,
                value,
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
                "must start and end with an alphanumeric character, and be no more than 63 characters",
            )
        ]
    return []


def attribute_name(value: str, field: str) -> list[FieldError]:
    """QualifiedName of DRA attributes/capacities: C identifier (≤ 32), optionally ``<domain ≤ 63>/``-prefixed."""
    domain, _, ident = value.rpartition("/")
    errs: list[FieldError] = []
    if "/" in value:
        errs += dns_subdomain(domain, field, max_len=63)
    if not ident or len(ident) > 32 or not C_IDENTIFIER_RE.fullmatch(ident):
        errs.append(
            _invalid(
                field,
                value,
                "a valid C identifier must start with alphabetic character or '_', followed by a string of "
                "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for "
                "validation is '[A-Za-z_][A-Za-z0-9_]*'), must be no more than 32 characters",
            )
        )
    return errs


def quantity(value: Any, field: str) -> list[FieldError]:
    if value is None:
        return [_required(field)]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return [_invalid(field, value, "must be a quantity")]
    if isinstance(value, str) and not QUANTITY_RE.fullmatch(value):
        return [
            _invalid(
                field,
                value,
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            )
        ]
    return []


# --------------------------------------------------------------------------------------------- metadata


def validate_metadata(meta: Mapping[str, Any], namespaced: bool) -> list[FieldError]:
    errs = dns_subdomain(meta.get("name"), "metadata.name")
    if namespaced:
        errs += dns_label(meta.get("namespace"), "metadata.namespace")
    for key, value in (meta.get("labels") or {}).items():
        errs += qualified_name(key, "metadata.labels")
        errs += label_value(value, f"metadata.labels[{key}]") if value is not None else []
    annotations = meta.get("annotations") or {}
    for key in annotations:
        errs += qualified_name(key.lower(), "metadata.annotations")
    size = sum(len(k) + len(v or "") for k, v in annotations.items())
    if size > 256 * 1024:
        errs.append(FieldError("metadata.annotations", "Too long", None, "may not be more than 262144 bytes"))
    owners = meta.get("ownerReferences") or []
    for i, ref in enumerate(owners):
        for key in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(key):
                errs.append(_required(f"metadata.ownerReferences[{i}].{key}"))
    if sum(1 for ref in owners if ref.get("controller")) > 1:
        errs.append(_invalid("metadata.ownerReferences", owners, "Only one reference can have Controller set to true"))
    return errs


# ------------------------------------------------------------------------------------------ ResourceSlice


def _device_fields(device: Mapping[str, Any], api_version: str) -> Mapping[str, Any]:
    """v1beta1 nests the device description under ``basic``; v1beta2 and v1 have it on the device."""
    if api_version == "v1beta1":
        return device.get("basic") or {}
    return device


def _device_path(i: int, api_version: str) -> str:
    return f"spec.devices[{i}].basic" if api_version == "v1beta1" else f"spec.devices[{i}]"


_LIST_ATTRIBUTE_KINDS = ("ints", "bools", "strings", "versions")
_ATTRIBUTE_KINDS = ("int", "bool", "string", "version", *_LIST_ATTRIBUTE_KINDS)


def _validate_attribute(attr: Any, field: str) -> list[FieldError]:
    if not isinstance(attr, Mapping):
        return [_invalid(field, attr, "must be an object")]
    set_kinds = [k for k in _ATTRIBUTE_KINDS if attr.get(k) is not None]
    if len(set_kinds) != 1:
        return [_invalid(field, attr, "exactly one value must be specified")]
    kind = set_kinds[0]
    values = attr[kind] if kind in _LIST_ATTRIBUTE_KINDS else [attr[kind]]
    errs: list[FieldError] = []
    if kind in _LIST_ATTRIBUTE_KINDS and not values:
        errs.append(_required(f"{field}.{kind}", "list must not be empty"))
    for value in values:
        if kind in ("string", "strings") and len(value) > 64:
            errs.append(_invalid(f"{field}.{kind}", value, "must be no more than 64 characters"))
        if kind in ("version", "versions"):
            if len(value) > 64:
                errs.append(_invalid(f"{field}.{kind}", value, "must be no more than 64 characters"))
            if not SEMVER_RE.fullmatch(value):
                errs.append(
                    _invalid(f"{field}.{kind}", value, "must be a string compatible with semver.org spec 2.0.0")
                )
    return errs


def _counters(counters: Any, field: str, limit: int | None) -> list[FieldError]:
    counters = counters or {}
    errs: list[FieldError] = []
    if limit is not None and len(counters) > limit:
        errs.append(_too_many(field, len(counters), limit))
    for name, counter in counters.items():
        errs += dns_label(name, f"{field}[{name}]")
        errs += quantity((counter or {}).get("value"), f"{field}[{name}].value")
    return errs


def _uses_partitionable(spec: Mapping[str, Any], api_version: str) -> bool:
    if spec.get("sharedCounters") or spec.get("perDeviceNodeSelection") is not None:
        return True
    for device in spec.get("devices") or []:
        fields = _device_fields(device, api_version)
        if fields.get("consumesCounters") or any(
            fields.get(k) is not None for k in ("nodeName", "nodeSelector", "allNodes")
        ):
            return True
    return False


def _uses_device_field(spec: Mapping[str, Any], api_version: str, keys: Iterable[str]) -> bool:
    return any(_device_fields(d, api_version).get(k) is not None for d in spec.get("devices") or [] for k in keys)


def _uses_request_policy(spec: Mapping[str, Any], api_version: str) -> bool:
    for device in spec.get("devices") or []:
        fields = _device_fields(device, api_version)
        if fields.get("allowMultipleAllocations") is not None:
            return True
        if any((c or {}).get("requestPolicy") is not None for c in (fields.get("capacity") or {}).values()):
            return True
    return False


def drop_disabled_slice_fields(
    obj: dict[str, Any], old: Mapping[str, Any] | None, api_version: str, gates: Mapping[str, bool]
) -> None:
    """Silently drop fields of disabled gates unless the stored object already uses them (dropDisabledFields)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    old_spec: Mapping[str, Any] = (old or {}).get("spec") or {}
    devices = [_device_fields(d, api_version) for d in spec.get("devices") or [] if isinstance(d, dict)]

    def drop(keys: Iterable[str]) -> None:
        for fields in devices:
            for key in keys:
                fields.pop(key, None)  # type: ignore[attr-defined]

    if not gates.get(PARTITIONABLE, True) and not _uses_partitionable(old_spec, api_version):
        spec.pop("sharedCounters", None)
        spec.pop("perDeviceNodeSelection", None)
        drop(("consumesCounters", "nodeName", "nodeSelector", "allNodes"))
    if not gates.get(TAINTS, True) and not _uses_device_field(old_spec, api_version, ("taints",)):
        drop(("taints",))
    binding = ("bindsToNode", "bindingConditions", "bindingFailureConditions")
    if not gates.get(BINDING_CONDITIONS, True) and not _uses_device_field(old_spec, api_version, binding):
        drop(binding)
    if not gates.get(CONSUMABLE_CAPACITY, True) and not _uses_request_policy(old_spec, api_version):
        drop(("allowMultipleAllocations",))
        for fields in devices:
            for capacity in (fields.get("capacity") or {}).values():
                if isinstance(capacity, dict):
                    capacity.pop("requestPolicy", None)
    allocatable = ("nodeAllocatableResourceMappings", "nodeAllocatableResources")
    if not gates.get(NODE_ALLOCATABLE, True) and not _uses_device_field(old_spec, api_version, allocatable):
        drop(allocatable)


def validate_resource_slice(obj: Mapping[str, Any], api_version: str, minor: int) -> list[FieldError]:
    spec: Mapping[str, Any] = obj.get("spec") or {}
    errs: list[FieldError] = []
    driver = spec.get("driver")
    errs += dns_subdomain(driver, "spec.driver", max_len=63)

    pool = spec.get("pool") or {}
    pool_name = pool.get("name")
    if not pool_name:
        errs.append(_required("spec.pool.name"))
    else:
        if len(pool_name) > 253:
            errs.append(_invalid("spec.pool.name", pool_name, "must be no more than 253 characters"))
        for part in pool_name.split("/"):
            if not DNS_SUBDOMAIN_RE.fullmatch(part):
                errs.append(
                    _invalid(
                        "spec.pool.name", pool_name, "must consist of one or more DNS sub-domains separated by slashes"
                    )
                )
                break
    if (pool.get("generation") or 0) < 0:
        errs.append(_invalid("spec.pool.generation", pool.get("generation"), "must be greater than or equal to 0"))
    if (pool.get("resourceSliceCount") or 0) <= 0:
        errs.append(
            _invalid("spec.pool.resourceSliceCount", pool.get("resourceSliceCount"), "must be greater than zero")
        )

    selection = [
        k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k) is not None
    ]
    if len(selection) != 1:
        errs.append(
            _invalid(
                "spec",
                selection,
                "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
                + (", but multiple fields are set" if selection else ""),
            )
        )
    if spec.get("nodeName") is not None:
        errs += dns_subdomain(spec["nodeName"], "spec.nodeName")
    if spec.get("nodeSelector") is not None:
        terms = spec["nodeSelector"].get("nodeSelectorTerms") or []
        if len(terms) != 1:
            errs.append(
                _invalid("spec.nodeSelector.nodeSelectorTerms", len(terms), "must have exactly one node selector term")
            )
    for key in ("allNodes", "perDeviceNodeSelection"):
        if spec.get(key) is False:
            errs.append(_invalid(f"spec.{key}", False, "must be either unset or set to true"))
    per_device = spec.get("perDeviceNodeSelection") is True

    devices = spec.get("devices") or []
    shared = spec.get("sharedCounters") or []
    if minor >= 35 and devices and shared:
        errs.append(
            _invalid("spec", ["devices", "sharedCounters"], "only one of `sharedCounters` or `devices` is allowed")
        )

    advanced = False
    names: set[str] = set()
    total_device_counters = 0
    for i, device in enumerate(devices):
        name = device.get("name")
        errs += dns_label(name, f"spec.devices[{i}].name")
        if name in names:
            errs.append(FieldError(f"spec.devices[{i}].name", "Duplicate value", name))
        names.add(name)
        fields = _device_fields(device, api_version)
        path = _device_path(i, api_version)
        attributes = fields.get("attributes") or {}
        capacity = fields.get("capacity") or {}
        if len(attributes) + len(capacity) > 32:
            errs.append(_too_many(f"{path}.attributes", len(attributes) + len(capacity), 32))
        for key, attr in attributes.items():
            errs += attribute_name(key, f"{path}.attributes")
            errs += _validate_attribute(attr, f"{path}.attributes[{key}]")
            if (
                minor >= 36
                and isinstance(attr, Mapping)
                and any(attr.get(k) is not None for k in _LIST_ATTRIBUTE_KINDS)
            ):
                advanced = True
        for key, cap in capacity.items():
            errs += attribute_name(key, f"{path}.capacity")
            errs += quantity((cap or {}).get("value"), f"{path}.capacity[{key}].value")
            multiple = fields.get("allowMultipleAllocations") is True
            errs += [FieldError(*p) for p in request_policy_problems(cap or {}, multiple, f"{path}.capacity[{key}]")]
        consumes = fields.get("consumesCounters") or []
        if consumes:
            advanced = True
        if minor >= 35 and len(consumes) > 2:
            errs.append(_too_many(f"{path}.consumesCounters", len(consumes), 2))
        device_counters = 0
        sets_seen: set[str] = set()
        for j, consumption in enumerate(consumes):
            cpath = f"{path}.consumesCounters[{j}]"
            set_name = consumption.get("counterSet")
            errs += dns_label(set_name, f"{cpath}.counterSet")
            if set_name in sets_seen:
                errs.append(FieldError(f"{cpath}.counterSet", "Duplicate value", set_name))
            sets_seen.add(set_name)
            counters = consumption.get("counters") or {}
            device_counters += len(counters)
            errs += _counters(counters, f"{cpath}.counters", 32 if minor >= 35 else None)
        if minor < 35 and device_counters > 32:
            errs.append(_too_many(f"{path}.consumesCounters", device_counters, 32))
        total_device_counters += device_counters
        taints = fields.get("taints") or []
        if taints:
            advanced = True
        taint_limit = 16 if minor >= 35 else 4
        if len(taints) > taint_limit:
            errs.append(_too_many(f"{path}.taints", len(taints), taint_limit))
        for j, taint in enumerate(taints):
            errs += qualified_name(taint.get("key") or "", f"{path}.taints[{j}].key")
            if taint.get("value") is not None:
                errs += label_value(taint["value"], f"{path}.taints[{j}].value")
            if taint.get("effect") not in ("NoSchedule", "NoExecute", "None"):
                errs.append(
                    FieldError(
                        f"{path}.taints[{j}].effect",
                        "Unsupported value",
                        taint.get("effect"),
                        'supported values: "NoExecute", "NoSchedule", "None"',
                    )
                )
        for key in ("bindingConditions", "bindingFailureConditions"):
            if len(fields.get(key) or []) > 4:
                errs.append(_too_many(f"{path}.{key}", len(fields[key]), 4))
        node_fields = [k for k in ("nodeName", "nodeSelector", "allNodes") if fields.get(k) is not None]
        if per_device and len(node_fields) != 1:
            errs.append(
                _invalid(
                    path,
                    node_fields,
                    "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when "
                    "`perDeviceNodeSelection` is set to true in the ResourceSlice spec",
                )
            )
        elif not per_device and node_fields:
            errs.append(
                FieldError(
                    f"{path}.{node_fields[0]}",
                    "Forbidden",
                    None,
                    "`nodeName`, `nodeSelector` and `allNodes` can only be set when `perDeviceNodeSelection` is "
                    "set to true in the ResourceSlice spec",
                )
            )
    device_limit = 64 if minor >= 35 and advanced else 128
    if len(devices) > device_limit:
        errs.append(_too_many("spec.devices", len(devices), device_limit))
    if minor < 35 and total_device_counters > 1024:
        errs.append(_too_many("spec.devices", total_device_counters, 1024))

    if minor >= 35 and len(shared) > 8:
        errs.append(_too_many("spec.sharedCounters", len(shared), 8))
    set_names: set[str] = set()
    total_counters = 0
    for i, counter_set in enumerate(shared):
        set_name = counter_set.get("name")
        errs += dns_label(set_name, f"spec.sharedCounters[{i}].name")
        if set_name in set_names:
            errs.append(FieldError(f"spec.sharedCounters[{i}].name", "Duplicate value", set_name))
        set_names.add(set_name)
        counters = counter_set.get("counters") or {}
        if not counters:
            errs.append(_required(f"spec.sharedCounters[{i}].counters"))
        total_counters += len(counters)
        errs += _counters(counters, f"spec.sharedCounters[{i}].counters", 32 if minor >= 35 else None)
    if minor < 35 and total_counters > 32:
        errs.append(_too_many("spec.sharedCounters", total_counters, 32))
    return errs


# ------------------------------------------------------------------------------------------------ Node

#: k8s.io/kubernetes/pkg/apis/core/helper: resources whose quantities must be whole numbers
INTEGER_RESOURCES = frozenset(
    {
        "pods",
        "resourcequotas",
        "services",
        "replicationcontrollers",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_SUFFIX_VALUES = {
    "": Fraction(1),
    **{s: Fraction(1000) ** (i + 1) for i, s in enumerate("kMGTPE")},
    **{f"{s}i": Fraction(1024) ** (i + 1) for i, s in enumerate("KMGTPE")},
    "m": Fraction(1, 1000),
    "u": Fraction(1, 1000**2),
    "n": Fraction(1, 1000**3),
}


def quantity_value(value: Any) -> Fraction | None:
    """The exact amount of a quantity (a string or a JSON number); None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(value)
    text = str(value)
    if not QUANTITY_RE.fullmatch(text):
        return None
    sign = -1 if text.startswith("-") else 1
    match = QUANTITY_RE.fullmatch(text.lstrip("+-"))
    assert match is not None
    number, suffix = match.group(1), match.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return sign * Fraction(number) * Fraction(10) ** int(suffix[1:])
    return sign * Fraction(number) * _SUFFIX_VALUES[suffix]


def is_integer_resource_name(name: str) -> bool:
    """``helper.IsIntegerResourceName``: the integer core resources and every extended resource (a name
    with a domain outside kubernetes.io, valid as a quota name ``requests.<name>``, such as nvidia.com/gpu)."""
    if name in INTEGER_RESOURCES:
        return True
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return not qualified_name(f"requests.{name}", "resource")


def validate_node(obj: Mapping[str, Any]) -> list[FieldError]:
    """``ValidateNodeResources``: every capacity and allocatable quantity is not negative, and a whole
    number for the integer resources (``pods``, extended resources): ``pods: 1.5`` is refused."""
    status: Mapping[str, Any] = obj.get("status") or {}
    errs: list[FieldError] = []
    for part in ("capacity", "allocatable"):
        for name, value in (status.get(part) or {}).items():
            path = f"status.{part}.{name}"
            format_errors = quantity(value, path)
            if format_errors:
                errs += format_errors
                continue
            amount = quantity_value(value)
            assert amount is not None
            if amount < 0:
                errs.append(_invalid(path, str(value), "must be greater than or equal to 0"))
            if is_integer_resource_name(str(name)) and math.ceil(amount * 1000) % 1000 != 0:
                errs.append(_invalid(path, str(value), "must be an integer"))
    return errs


# ---------------------------------------------------------------------------- DeviceClass / ResourceClaim


def validate_device_class(obj: Mapping[str, Any]) -> list[FieldError]:
    spec: Mapping[str, Any] = obj.get("spec") or {}
    errs: list[FieldError] = []
    for key in ("selectors", "config"):
        if len(spec.get(key) or []) > 32:
            errs.append(_too_many(f"spec.{key}", len(spec[key]), 32))
    for i, selector in enumerate(spec.get("selectors") or []):
        if not ((selector.get("cel") or {}).get("expression") or "").strip():
            errs.append(_required(f"spec.selectors[{i}].cel.expression"))
    return errs


def validate_resource_claim(obj: Mapping[str, Any], api_version: str) -> list[FieldError]:
    devices: Mapping[str, Any] = (obj.get("spec") or {}).get("devices") or {}
    errs: list[FieldError] = []
    requests = devices.get("requests") or []
    for key in ("requests", "constraints", "config"):
        if len(devices.get(key) or []) > 32:
            errs.append(_too_many(f"spec.devices.{key}", len(devices[key]), 32))
    names: set[str] = set()
    for i, request in enumerate(requests):
        path = f"spec.devices.requests[{i}]"
        name = request.get("name")
        errs += dns_label(name, f"{path}.name")
        if name in names:
            errs.append(FieldError(f"{path}.name", "Duplicate value", name))
        names.add(name)
        if api_version == "v1beta1":
            if request.get("firstAvailable") is None:
                errs += _exact_request(request, path)
            continue
        kinds = [k for k in ("exactly", "firstAvailable") if request.get(k) is not None]
        if len(kinds) != 1:
            errs.append(_invalid(path, kinds, "exactly one of `exactly` or `firstAvailable` is required"))
        elif kinds == ["exactly"]:
            errs += _exact_request(request["exactly"], f"{path}.exactly")
    return errs


def _exact_request(request: Mapping[str, Any], path: str) -> list[FieldError]:
    errs = dns_subdomain(request.get("deviceClassName"), f"{path}.deviceClassName")
    mode = request.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        errs.append(
            FieldError(f"{path}.allocationMode", "Unsupported value", mode, 'supported values: "All", "ExactCount"')
        )
    count = request.get("count")
    if mode == "ExactCount" and count is not None and count <= 0:
        errs.append(_invalid(f"{path}.count", count, "must be greater than zero"))
    if mode == "All" and count is not None:
        errs.append(_invalid(f"{path}.count", count, "must not be specified when allocationMode is 'All'"))
    return errs


# ------------------------------------------------------------------------------------------ immutability


def _get(obj: Mapping[str, Any], dotted: str) -> Any:
    current: Any = obj
    for part in dotted.split("."):
        if not isinstance(current, Mapping):
            return None
        current = current.get(part)
    return current


def validate_immutable(plural: str, new: Mapping[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
    fields = {"resourceslices": ("spec.driver", "spec.pool.name", "spec.nodeName"), "resourceclaims": ("spec",)}
    errs = []
    for dotted in fields.get(plural, ()):
        value = _get(new, dotted)
        if value != _get(old, dotted):
            errs.append(_invalid(dotted, value, "field is immutable"))
    return errs
