"""The cached validator must accept and reject exactly what ``kubernetes_validate.validate`` does."""

from __future__ import annotations

import copy
import threading
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from fakegpu.dra.resource_slices import SliceOptions, build_slice_specs, slice_objects
from fakegpu.sharing.inputs import InventoryInputs, load_node
from tests.apiserver import schema_cache

VERSION = "1.36.0"


def _node() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"type": "kwok"}, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "32", "nvidia.com/gpu": "8"}, "allocatable": {"pods": 110}},
    }


def _slice(api_version: str = "resource.k8s.io/v1", mig_mode: str = "dynamic") -> dict[str, Any]:
    node = load_node(InventoryInputs(node_name="n1", gpus=("1xh100-80gb",)))
    options = SliceOptions(mig_mode=mig_mode, api_version=api_version)  # type: ignore[arg-type]
    obj = slice_objects(node, options, build_slice_specs(node, options), node_uid="uid-1")[-1]
    obj["metadata"]["name"] = "s1"
    return obj


def _bad_field(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["spec"]["unknownField"] = True
    return out


def _bad_type(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["labels"] = ["not", "a", "map"]
    return out


def _v1beta1_shape_as_v1() -> dict[str, Any]:
    obj = _slice("resource.k8s.io/v1beta1", "static")
    obj["apiVersion"] = "resource.k8s.io/v1"
    return obj


def _outcome(validate: Any, obj: dict[str, Any], version: str) -> tuple[Any, ...]:
    """What a caller can observe: the returned version, or the exception type, message and path."""
    try:
        return ("ok", validate(obj, version, strict=True))
    except kubernetes_validate.ValidationError as exc:
        return ("invalid", exc.message, tuple(exc.absolute_path), exc.version)
    except kubernetes_validate.SchemaNotFoundError as exc:
        return ("no schema", exc.message)
    except kubernetes_validate.utils.VersionNotSupportedError as exc:
        return ("unsupported", exc.message)


CASES = {
    "valid node": (_node, VERSION),
    "node with an unknown field": (lambda: _bad_field(_node()), VERSION),
    "node with labels of the wrong type": (lambda: _bad_type(_node()), VERSION),
    "valid dynamic-MIG slice": (_slice, VERSION),
    "valid v1beta1 slice": (lambda: _slice("resource.k8s.io/v1beta1", "static"), VERSION),
    "v1beta1 device shape sent as v1": (_v1beta1_shape_as_v1, VERSION),
    "slice with an unknown field": (lambda: _bad_field(_slice()), VERSION),
    "kind without a schema": (lambda: {**_node(), "kind": "NoSuchKind"}, VERSION),
    "version newer than any schema": (_node, "1.99.0"),
    "older version picks an older schema": (_node, "v1.33.2"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_same_verdict_as_kubernetes_validate(case):
    build, version = CASES[case]
    expected = _outcome(kubernetes_validate.validate, build(), version)
    assert _outcome(schema_cache.validate, build(), version) == expected
    # and again from the cache
    assert _outcome(schema_cache.validate, build(), version) == expected


def test_the_cases_cover_both_verdicts():
    """The comparison above is only worth something if some cases pass and others fail."""
    verdicts = {_outcome(kubernetes_validate.validate, build(), v)[0] for build, v in CASES.values()}
    assert verdicts == {"ok", "invalid", "no schema", "unsupported"}


def test_validators_are_compiled_once_per_kind():
    schema_cache.validate(_node(), VERSION, strict=True)
    before = schema_cache.cached_schemas()
    for _ in range(5):
        schema_cache.validate(_node(), VERSION, strict=True)
    assert schema_cache.cached_schemas() == before


def test_concurrent_validation_gives_the_same_answers():
    good, bad = _slice(), _bad_field(_slice())
    results: list[tuple[str, ...]] = []
    lock = threading.Lock()

    def work() -> None:
        for obj in (good, bad):
            outcome = _outcome(schema_cache.validate, obj, "1.35.0")
            with lock:
                results.append(outcome[:1])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [("invalid",)] * 8 + [("ok",)] * 8
