"""``fakegpu slices`` and ``fakegpu deviceclasses``: print what the DRA driver would publish, offline.

Also the ``--server-version`` flag of ``slices``, ``dra`` and ``virtual-nodes``: one parser, one documented
range (``SERVER_VERSION_HELP``), written the way ``kubectl version`` prints it.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from typing import Any

from fakegpu.cli.yaml_output import dump_yaml_documents
from fakegpu.dra.consumable_shares import FIRST_MINOR_WITH_CONSUMABLE_CAPACITY
from fakegpu.dra.device_classes import compute_domain_device_classes, device_classes, vfio_device_class
from fakegpu.dra.feature_gates import (
    DYNAMIC_MIG,
    NVML_DEVICE_HEALTH_CHECK,
    FeatureGates,
    gate_lines,
    parse_feature_gates,
    validate_feature_gates,
)
from fakegpu.dra.health_taints import node_spec_taints
from fakegpu.dra.resource_slices import (
    FIRST_MINOR_WITH_TAINTS,
    MigMode,
    SliceOptions,
    build_slice_specs,
    slice_objects,
)
from fakegpu.kube.discovery import (
    API_PREFERENCE,
    NEWEST_LAYOUT,
    OLDEST_MINOR,
    served_api_versions,
)
from fakegpu.sharing.health import XidPolicy
from fakegpu.sharing.node import Node

API_VERSIONS = tuple(API_PREFERENCE)
KNOWN_VERSIONS = f"1.{OLDEST_MINOR}-1.{NEWEST_LAYOUT}"
"""The Kubernetes versions whose slice layouts fakegpu knows."""
SERVER_VERSION_HELP = (
    f"Kubernetes version of the cluster, {KNOWN_VERSIONS} (newer ones get the 1.{NEWEST_LAYOUT} layout), as "
    f"kubectl version prints it (v1.{NEWEST_LAYOUT - 1}.2) or 1.{NEWEST_LAYOUT - 1} or {NEWEST_LAYOUT - 1}"
)
"""The one description of ``--server-version`` every command's help starts with."""
SLICE_OUTPUT_FORMATS = ("yaml", "json")
"""``-o`` of ``slices`` and ``deviceclasses``: API objects, so no table (``kubectl apply -f -`` reads both)."""
_VERSION = re.compile(r"^v?(?:(\d+)\.)?(\d+)(?:\.\d+)?(?:[-+].*)?$")


def add_slice_options(
    parser: argparse.ArgumentParser, *, api_version_default: str, server_version_default: int | None, version_from: str
) -> None:
    """The DRA driver's name, MIG mode, resource.k8s.io version and Kubernetes version (``slices``, ``dra``,
    ``virtual-nodes``); ``version_from`` says where the version comes from when not given (None default)."""
    group = parser.add_argument_group("DRA ResourceSlices")
    shown = f"1.{server_version_default}" if server_version_default is not None else version_from
    group.add_argument(
        "--server-version",
        type=server_minor,
        default=server_version_default,
        metavar="VERSION",
        help=f"{SERVER_VERSION_HELP} (default: {shown})",
    )
    group.add_argument("--driver-name", default="gpu.nvidia.com", help="DRA driver name (default %(default)s)")
    group.add_argument(
        "--mig-mode",
        choices=("static", "dynamic"),
        default="static",
        help="static (default): the node's MIG devices; dynamic: every profile at every placement, with "
        "counters (NVIDIA's DynamicMIG feature gate)",
    )
    group.add_argument(
        "--resource-api-version",
        choices=API_VERSIONS,
        default=None,
        help=f"resource.k8s.io version to publish (default: {api_version_default})",
    )


def add_feature_gates_option(parser: argparse.ArgumentParser) -> None:
    """``--feature-gates``; ``--mig-mode`` then defaults to what the DynamicMIG gate says."""
    parser.set_defaults(mig_mode=None)
    parser.add_argument(
        "--feature-gates",
        default=None,
        metavar="NAME=BOOL,...",
        help="NVIDIA's DRA driver feature gates (env FEATURE_GATES), e.g. TimeSlicingSettings=true,MPSSupport=true "
        "(claims using that sharing strategy fail without them) or NVMLDeviceHealthCheck=true (health taints and "
        "the health stream); `fakegpu slices --feature-gates ...` prints what each gate given changes",
    )


def given_feature_gates(args: argparse.Namespace, env: Mapping[str, str]) -> FeatureGates:
    """The gates as given: ``--feature-gates``, else ``$FEATURE_GATES`` (as NVIDIA's chart sets them)."""
    source, raw = (
        ("--feature-gates", args.feature_gates)
        if args.feature_gates is not None
        else ("FEATURE_GATES", env.get("FEATURE_GATES", ""))
    )
    try:
        return parse_feature_gates(raw)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


def virtual_node_gates(args: argparse.Namespace, env: Mapping[str, str]) -> FeatureGates:
    """``virtual-nodes --feature-gates`` (else ``$FEATURE_GATES``, as ``slices`` and ``dra`` read them): parsed
    and validated as ``fakegpu dra`` does (the MIG mode is the pools' own)."""
    gates = given_feature_gates(args, env)
    validate_feature_gates(gates)
    return gates


def dra_feature_gates(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[FeatureGates, MigMode]:
    """The gates from ``--feature-gates`` (else ``$FEATURE_GATES``, as NVIDIA's chart sets them) and the MIG
    mode: ``--mig-mode dynamic`` is NVIDIA's DynamicMIG gate, either one turns the other on, and the
    combination passes NVIDIA's start-up validation."""
    gates = given_feature_gates(args, env)
    stated = gates.explicit.get(DYNAMIC_MIG)
    if args.mig_mode is None:
        mode: MigMode = "dynamic" if gates.enabled(DYNAMIC_MIG) else "static"
    elif stated is not None and stated != (args.mig_mode == "dynamic"):
        raise ValueError(f"--mig-mode {args.mig_mode} contradicts feature gate {DYNAMIC_MIG}={str(stated).lower()}")
    else:
        mode = args.mig_mode
    gates = gates.with_gate(DYNAMIC_MIG, mode == "dynamic")
    validate_feature_gates(gates)
    return gates, mode


def slice_options(args: argparse.Namespace, server_minor: int, gates: FeatureGates | None = None) -> SliceOptions:
    """How ``slices`` publishes: the flags, and what the gates change (NVMLDeviceHealthCheck: health taints;
    DRAListTypeAttributes and FabricManagerPartitioning: attributes), as ``fakegpu dra`` with the same gates."""
    api_version = args.resource_api_version or "resource.k8s.io/v1"
    check_api_version_served(api_version, server_minor, given=args.resource_api_version is not None)
    return SliceOptions(
        driver=args.driver_name,
        mig_mode=args.mig_mode,
        server_minor=server_minor,
        api_version=api_version,
        feature_gates=gates if gates is not None else FeatureGates(),
    )


def slice_gate_lines(given: FeatureGates, options: SliceOptions) -> list[str]:
    """What each gate given changes (``gate_lines``), saying where the slices' server takes none of it: device
    taints are published from Kubernetes 1.36 (``SliceOptions.taints_supported``), so not to an older one."""
    lines = gate_lines(given)
    if options.health_taints and not options.taints_supported:
        lines = _noted(
            lines,
            f"{NVML_DEVICE_HEALTH_CHECK}=",
            f"on Kubernetes 1.{options.server_minor} these slices carry no taints (before "
            f"1.{FIRST_MINOR_WITH_TAINTS} DRADeviceTaints is off by default and the API server drops them)",
        )
    if options.shares.enabled and options.server_minor < FIRST_MINOR_WITH_CONSUMABLE_CAPACITY:
        lines = _noted(
            lines,
            "ConsumableShares=",
            f"on Kubernetes 1.{options.server_minor} these slices carry no allowMultipleAllocations or request "
            f"policies (the API has them from 1.{FIRST_MINOR_WITH_CONSUMABLE_CAPACITY}, as NVIDIA publishes them)",
        )
    return lines


def _noted(lines: list[str], prefix: str, note: str) -> list[str]:
    """``lines`` with ``note`` appended to the gate line starting with ``prefix``."""
    return [f"{line}; {note}" if line.startswith(prefix) else line for line in lines]


def check_api_version_served(api_version: str, minor: int, *, given: bool) -> None:
    """ValueError naming the flag to use when 1.<minor> does not serve ``api_version``."""
    if api_version in served_api_versions(minor):
        return
    served = served_api_versions(minor)
    hint = f"pass --resource-api-version {served[0]}" if served else "no resource.k8s.io version fakegpu publishes"
    where = "--resource-api-version" if given else f"--server-version 1.{minor}"
    raise ValueError(f"{where}: Kubernetes 1.{minor} does not serve {api_version}; {hint}")


def server_minor(value: str) -> int:
    """The minor of a Kubernetes version as ``kubectl version`` prints it (``v1.36.2``), or ``1.36`` or ``36``;
    a version newer than the newest known layout stands for that layout."""
    match = _VERSION.match(value.strip())
    if match is None or match.group(1) not in (None, "1"):
        raise argparse.ArgumentTypeError(
            f"expected a Kubernetes version such as v1.{NEWEST_LAYOUT - 1}.2, 1.{NEWEST_LAYOUT - 1} or "
            f"{NEWEST_LAYOUT - 1}, found {value!r}"
        )
    number = int(match.group(2))
    if number < OLDEST_MINOR:
        raise argparse.ArgumentTypeError(
            f"Kubernetes 1.{number} has no ResourceSlices fakegpu publishes; expected {KNOWN_VERSIONS} or newer, "
            f"found {value!r}"
        )
    return min(number, NEWEST_LAYOUT)


def render_slices(
    node: Node, options: SliceOptions, node_uid: str | None, fmt: str = "yaml", policy: XidPolicy | None = None
) -> str:
    """The node's slices; GPUs its node spec starts with an XID (or unhealthy) carry NVIDIA's health taints
    when ``options.health_taints``, non-fatal ones by ``policy`` (the DRA driver's)."""
    taints = node_spec_taints(node, policy or XidPolicy())
    objects = slice_objects(node, options, build_slice_specs(node, options, taints), node_uid=node_uid)
    return render_objects(objects, fmt)


def render_device_classes(
    driver: str,
    api_version: str,
    extended_resource_name: str | None,
    fmt: str = "yaml",
    *,
    compute_domains: bool = False,
) -> str:
    """The GPU driver's classes as NVIDIA's chart installs them (whole GPU, MIG, VFIO), then
    (``compute_domains``) NVIDIA's two ComputeDomain classes."""
    classes = [*device_classes(driver, api_version, extended_resource_name), vfio_device_class(driver, api_version)]
    if compute_domains:
        classes += compute_domain_device_classes(api_version)
    return render_objects(classes, fmt)


def render_objects(objects: list[dict[str, Any]], fmt: str) -> str:
    """YAML documents, or one JSON ``List`` as ``kubectl get -o json`` prints several objects."""
    if fmt == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2) + "\n"
    return dump_yaml_documents(objects)
