"""``fakegpu slices`` and ``fakegpu deviceclasses``: print what the DRA driver would publish, offline."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

import yaml

from fakegpu.dra.device_classes import device_classes
from fakegpu.dra.feature_gates import DYNAMIC_MIG, FeatureGates, parse_feature_gates, validate_feature_gates
from fakegpu.dra.resource_slices import MigMode, SliceOptions, build_slice_specs, slice_objects
from fakegpu.kube.discovery import API_PREFERENCE, NEWEST_LAYOUT, OLDEST_MINOR
from fakegpu.sharing.node import Node

API_VERSIONS = tuple(API_PREFERENCE)
KNOWN_VERSIONS = f"1.{OLDEST_MINOR}-1.{NEWEST_LAYOUT}"
"""The Kubernetes versions ``--server-version`` accepts, for help texts."""


def add_slice_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("DRA")
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
        help="resource.k8s.io version to publish (fakegpu dra: discovered; here: v1)",
    )


def add_feature_gates_option(parser: argparse.ArgumentParser) -> None:
    """``--feature-gates``; ``--mig-mode`` then defaults to what the DynamicMIG gate says."""
    parser.set_defaults(mig_mode=None)
    parser.add_argument(
        "--feature-gates",
        default=None,
        metavar="NAME=BOOL,...",
        help="NVIDIA's DRA driver feature gates (env FEATURE_GATES), e.g. TimeSlicingSettings=true,MPSSupport=true; "
        "both are off by default and claims using that sharing strategy fail without them",
    )


def dra_feature_gates(args: argparse.Namespace, env: Mapping[str, str]) -> tuple[FeatureGates, MigMode]:
    """The gates from ``--feature-gates`` (else ``$FEATURE_GATES``, as NVIDIA's chart sets them) and the MIG
    mode: ``--mig-mode dynamic`` is NVIDIA's DynamicMIG gate, either one turns the other on, and the
    combination passes NVIDIA's start-up validation."""
    source, raw = (
        ("--feature-gates", args.feature_gates)
        if args.feature_gates is not None
        else ("FEATURE_GATES", env.get("FEATURE_GATES", ""))
    )
    try:
        gates = parse_feature_gates(raw)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None
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


def slice_options(args: argparse.Namespace, server_minor: int) -> SliceOptions:
    return SliceOptions(
        driver=args.driver_name,
        mig_mode=args.mig_mode,
        server_minor=server_minor,
        api_version=args.resource_api_version or "resource.k8s.io/v1",
    )


def server_minor(value: str) -> int:
    """``1.35`` -> 35; only the versions whose slice layout differs are accepted."""
    try:
        major, minor = value.split(".", 1)
        number = int(minor)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a Kubernetes version such as 1.36, found {value!r}") from None
    if major != "1" or not OLDEST_MINOR <= number <= NEWEST_LAYOUT:
        raise argparse.ArgumentTypeError(
            f"expected a Kubernetes version from 1.{OLDEST_MINOR} to 1.{NEWEST_LAYOUT}, found {value!r}"
        )
    return number


def render_slices(node: Node, options: SliceOptions, unhealthy: dict[str, int | None], node_uid: str | None) -> str:
    objects = slice_objects(node, options, build_slice_specs(node, options, unhealthy), node_uid=node_uid)
    return _yaml_documents(objects)


def render_device_classes(driver: str, api_version: str, extended_resource_name: str | None) -> str:
    return _yaml_documents(device_classes(driver, api_version, extended_resource_name))


def _yaml_documents(objects: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True)
