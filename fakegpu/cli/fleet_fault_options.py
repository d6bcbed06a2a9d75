"""``fakegpu virtual-nodes --fault`` and ``--recover``: the flags, and the plan they ask for.

Every bad value is a one-line ``SpecError`` naming its flag (exit 2): an unknown kind or key, a GPU index out
of range, a fraction outside (0, 1], a duration or time scale out of range, a target that names no node. A run
whose pool flags do not describe a targeted node as it was brought up (its labels, capacity or ResourceSlices
would change) is refused with exit 2 too, one line naming the node, and writes nothing.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Sequence

from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.gpu_faults import KINDS, parse_fault_text
from fakegpu.sharing.sleep_interval import go_duration_seconds
from fakegpu.virtual_nodes.fleet_faults import (
    MAX_OVER,
    MAX_TIME_SCALE,
    RECOVERIES,
    FaultTargets,
    FleetFaultPlan,
    plan_fleet_faults,
)
from fakegpu.virtual_nodes.pools import VirtualNode

TARGET_FLAGS = ("fault_nodes", "fault_racks", "fault_cliques", "fault_fraction")
DETAIL_FLAGS = ("fault_gpus", "fault_over", "fault_seed", "time_scale")


NEGATIVE_VALUE = re.compile(r"^-\.?\d")
"""What argparse takes for a negative value rather than a flag (Python 3.13's own rule): so ``--fault-over -5s``
reaches the range error, as ``--fault-over=-5s`` does, instead of argparse's "expected one argument"."""


def add_fault_options(parser: argparse.ArgumentParser) -> None:
    if hasattr(parser, "_negative_number_matcher"):  # argparse's rule for a value that starts with "-"
        parser._negative_number_matcher = NEGATIVE_VALUE
    group = parser.add_argument_group(
        "faults across the fleet: run with the pool flags of the bring-up (a node they would change is refused, "
        "exit 2); only the targeted nodes are read and written, their faults recorded in the Node annotation "
        "fakegpu.io/gpu-faults (kept by re-runs and --watch; a fault a GPU already has is not added again)"
    )
    what = group.add_mutually_exclusive_group()
    what.add_argument(
        "--fault",
        default=None,
        metavar="KIND[,KEY=VALUE...]",
        help=f"inject a GPU fault ({', '.join(KINDS)}), e.g. xid,xid=79 or ecc-uncorrectable,count=2: DRA nodes' "
        "devices get NVIDIA's taints (with the NVMLDeviceHealthCheck gate), device-plugin nodes lose the "
        "unhealthy devices from allocatable. Keys per kind: xid xid=N; ecc-uncorrectable count=N, "
        "uncontained=true (XID 95, or contained=false); ecc-correctable count=N; thermal temperature=C; power "
        "watts=W; nvlink link=L, count=N; fabric status=ERROR_...; off-bus and gpu-lost none",
    )
    what.add_argument(
        "--recover",
        choices=RECOVERIES,
        default=None,
        help="take faults off the targeted GPUs: thermal, power, fabric (the cause went away), reset (a GPU "
        "reset and the plugins restarted: XID, ECC and NVLink faults), all (a reboot: every fault, off-bus and "
        "lost GPUs too)",
    )
    group.add_argument("--fault-nodes", default=None, metavar="NAME,...", help="target these virtual nodes")
    group.add_argument(
        "--fault-racks", default=None, metavar="R,...", help="target the nodes of these racks (3 or rack-3; --racks)"
    )
    group.add_argument(
        "--fault-cliques",
        default=None,
        metavar="ID,...",
        help="target the nodes of these NVLink cliques (nvidia.com/gpu.clique values)",
    )
    group.add_argument(
        "--fault-fraction",
        type=float,
        default=None,
        metavar="F",
        help="a random fraction in (0, 1] of the GPUs of the fleet (or of the nodes, racks or cliques named), "
        "picked with --fault-seed: the same seed picks the same GPUs",
    )
    group.add_argument("--fault-seed", type=int, default=None, metavar="S", help="the fraction's seed (default 0)")
    group.add_argument(
        "--fault-gpus",
        default=None,
        metavar="all|N,...",
        help="which GPUs of each targeted node (default all; not with --fault-fraction, which picks GPUs)",
    )
    group.add_argument(
        "--fault-over",
        default=None,
        metavar="DURATION",
        help="spread the targeted GPUs' faults over DURATION (10m, 90s, or seconds): one GPU at a time, evenly, "
        "in the seeded order (default: all at once)",
    )
    group.add_argument(
        "--time-scale",
        type=float,
        default=None,
        metavar="N",
        help="run the --fault-over schedule N times faster, to rehearse it in tests and CI (default 1)",
    )


def fault_mode(args: argparse.Namespace) -> bool:
    return args.fault is not None or args.recover is not None


def check_fault_flags(args: argparse.Namespace) -> None:
    """The fault flags make sense together and with the others (before anything is built)."""
    given = [f for f in (*TARGET_FLAGS, *DETAIL_FLAGS) if getattr(args, f) is not None]
    if not fault_mode(args):
        if given:
            raise SpecError(_flag(given[0]), "only applies with --fault or --recover")
        return
    mode = "--fault" if args.fault is not None else "--recover"
    for flag, on in (("--delete", args.delete), ("--watch", args.watch)):
        if on:
            raise SpecError(mode, f"cannot be combined with {flag}; run it beside a --watch, which keeps the faults")
    if args.time_scale is not None:
        if args.fault_over is None:
            raise SpecError("--time-scale", "only applies with --fault-over")
        if not (math.isfinite(args.time_scale) and 1 <= args.time_scale <= MAX_TIME_SCALE):
            raise SpecError("--time-scale", f"must be from 1 to {MAX_TIME_SCALE:g}, found {args.time_scale:g}")
    if args.fault_seed is not None and args.fault_fraction is None:
        raise SpecError("--fault-seed", "only applies with --fault-fraction")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _names(value: str | None, flag: str) -> tuple[str, ...]:
    if value is None:
        return ()
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if not names:
        raise SpecError(flag, f"expected a comma-separated list, found {value!r}")
    return names


def parse_gpus(value: str | None) -> tuple[int, ...] | None:
    """``all`` (or nothing): None; else the GPU indices."""
    if value is None or value.strip() == "all":
        return None
    out = []
    for item in _names(value, "--fault-gpus"):
        if not item.isdigit():
            raise SpecError("--fault-gpus", f"expected all or GPU indices such as 0,3, found {item!r}")
        out.append(int(item))
    return tuple(dict.fromkeys(out))


def parse_over(value: str | None) -> float:
    """``--fault-over``: a Go duration (``10m``) or seconds, above 0 and at most a week; 0 when not given."""
    if value is None:
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = go_duration_seconds(value)
        except ValueError as exc:
            raise SpecError("--fault-over", f"expected a duration such as 10m or 90s: {exc}") from None
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_OVER):
        raise SpecError("--fault-over", f"must be above 0 and at most {MAX_OVER:g} seconds (a week), found {value!r}")
    return seconds


def fault_plan_from_args(args: argparse.Namespace, nodes: Sequence[VirtualNode]) -> FleetFaultPlan:
    """The plan the flags ask for, on the fleet the pool flags describe."""
    fault = parse_fault_text(args.fault, "--fault") if args.fault is not None else None
    targets = FaultTargets(
        nodes=_names(args.fault_nodes, "--fault-nodes"),
        racks=_names(args.fault_racks, "--fault-racks"),
        cliques=_names(args.fault_cliques, "--fault-cliques"),
        fraction=args.fault_fraction,
        seed=0 if args.fault_seed is None else args.fault_seed,
        gpus=parse_gpus(args.fault_gpus),
    )
    return plan_fleet_faults(nodes, targets, fault=fault, recover=args.recover, over=parse_over(args.fault_over))
