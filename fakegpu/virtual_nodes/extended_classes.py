"""The DeviceClasses a ``dra-extended`` pool needs, and what to write so the cluster has them (pure, no I/O).

In the ``dra-extended`` GPU mode a node publishes its GPUs as ResourceSlices only, and the whole-GPU
DeviceClass carries ``extendedResourceName: nvidia.com/gpu``: the scheduler then serves pods asking for
``nvidia.com/gpu`` from the same DRA devices (the DRAExtendedResource feature), as NVIDIA's chart sets it
up. Only ``resource.k8s.io/v1`` carries the field; with an older API the classes are still ensured (claims
need them) and a warning says that ``nvidia.com/gpu`` requests will find no node. MIG devices have no
extended resource name: ``nvidia.com/mig-*`` requests are not served in this mode.

The classes are cluster-wide and named as NVIDIA's (``gpu.nvidia.com``, ``mig.nvidia.com``), so another
installation may own them: a class of that name the tool did not write is never overwritten (a warning
says what it lacks); one the tool wrote (labelled ``fakegpu.io/virtual-node: "true"``) and that differs
from the plan is replaced.

``--delete`` leaves them in place: they are shared by every ``--name-prefix`` and by any claim written
against them, and which fleets still run in ``dra-extended`` mode is not known without listing every
node. ``kubectl delete deviceclass -l fakegpu.io/virtual-node=true`` removes them (``delete_selector``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fakegpu.dra.device_classes import EXTENDED_RESOURCE_NAME, device_classes
from fakegpu.virtual_nodes.node_manifest import OWNER_LABEL, OWNER_VALUE
from fakegpu.virtual_nodes.pools import GpuMode

JSON = dict[str, Any]
CARRYING_VERSION = "resource.k8s.io/v1"
"""The only resource.k8s.io version whose DeviceClass has ``extendedResourceName``."""


def wanted_classes(
    modes: Iterable[GpuMode],
    driver: str,
    api_version: str,
    extended_resource_name: str = EXTENDED_RESOURCE_NAME,
) -> list[JSON]:
    """The DeviceClasses to ensure for pools of these ``modes``: none unless one is ``dra-extended``;
    labelled as the tool's so a later run (and a user) can tell them from someone else's."""
    if "dra-extended" not in set(modes):
        return []
    classes = device_classes(driver, api_version, extended_resource_name=extended_resource_name)
    for obj in classes:
        obj["metadata"]["labels"] = {OWNER_LABEL: OWNER_VALUE}
    return classes


def is_ours(obj: Mapping[str, Any]) -> bool:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(OWNER_LABEL) == OWNER_VALUE


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _extended_name(obj: Mapping[str, Any]) -> str | None:
    value = (obj.get("spec") or {}).get("extendedResourceName")
    return None if value is None else str(value)


@dataclass
class ClassPlan:
    """What to write so the cluster has the wanted classes."""

    create: list[JSON] = field(default_factory=list)
    replace: list[JSON] = field(default_factory=list)
    """The tool's own classes that differ from the plan, as they should be, carrying the listed
    ``resourceVersion`` so a replace (PUT) fails on a concurrent change instead of losing it."""
    warnings: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.create and not self.replace


def plan_classes(wanted: Sequence[Mapping[str, Any]], existing: Iterable[Mapping[str, Any]]) -> ClassPlan:
    """Compare ``wanted`` (``wanted_classes``) with the classes listed from the server (plain dicts).

    A missing class is created; the tool's own class is replaced when its spec or labels differ; a class
    someone else owns is left alone, with a warning when the whole-GPU class would not serve
    ``nvidia.com/gpu`` requests as planned (a different or missing ``extendedResourceName``)."""
    plan = ClassPlan()
    if not wanted:
        return plan
    found = {_name(obj): obj for obj in existing}
    api_version = str(wanted[0].get("apiVersion", ""))
    if api_version != CARRYING_VERSION:
        plan.warnings.append(
            f"dra-extended: {api_version} DeviceClasses cannot carry extendedResourceName (only "
            f"{CARRYING_VERSION} does), so nvidia.com/gpu requests will not be served by the DRA devices"
        )
    for want in wanted:
        name = _name(want)
        have = found.get(name)
        if have is None:
            plan.create.append(copy.deepcopy(dict(want)))
        elif is_ours(have):
            if have.get("spec") != want.get("spec"):
                plan.replace.append(_with_version(want, have))
        else:
            planned, theirs = _extended_name(want), _extended_name(have)
            if planned is not None and theirs != planned:
                plan.warnings.append(
                    f"DeviceClass {name} is not fakegpu's and was left alone, but its extendedResourceName is "
                    f"{theirs if theirs is not None else 'not set'}: {planned} requests will not be served "
                    "by the dra-extended nodes"
                )
    return plan


def _with_version(want: Mapping[str, Any], have: Mapping[str, Any]) -> JSON:
    out = copy.deepcopy(dict(want))
    version = (have.get("metadata") or {}).get("resourceVersion")
    if version is not None:
        out["metadata"]["resourceVersion"] = version
    return out


def delete_selector() -> str:
    """The label selector of the tool's DeviceClasses, for the user who wants them gone after ``--delete``."""
    return f"{OWNER_LABEL}={OWNER_VALUE}"
