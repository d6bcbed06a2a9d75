"""Restart soak figures: the reliability suites' restart loops, run at the long profile, with their numbers.

Run: ``.venv/bin/python bench/soak.py [--quick] [--seed N]``. ``--quick`` runs the short (CI) profile.
It runs the same loops as the tests (``tests/reliability/kubelet_soak.py`` and
``tests/reliability/daemon_soak.py``; see their docstrings for what each checks) and prints:

- kubelet restarts (plugins in-process, registering on kubelet.sock and through plugins_registry, and a
  ``fakegpu plugin`` subprocess): re-registration p50/p99/max, fds/threads/RSS/tasks after the warm-up
  and at the end, allocations restored;
- ``fakegpu plugin`` and ``fakegpu dra`` restarts (SIGTERM and SIGKILL, idle, after work, inside
  Allocate / NodePrepareResources and between its two checkpoint phases): spawn-to-registered
  p50/p99/max, the kubelet side's and the daemons' fds and RSS, and the counts that must stay 0 (lost,
  allocated or prepared twice, half-prepared, stale sockets left), with the problems found, if any.

Exit status 1 when any loop found a problem or a leak, so the figures are never quoted from a bad run.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc
from percentiles import percentile  # bench/ is on sys.path when a script runs

from tests.reliability.daemon_soak import DaemonSoakFigures, soak_dra_restarts, soak_plugin_restarts
from tests.reliability.kubelet_soak import SEED as DEFAULT_SEED
from tests.reliability.kubelet_soak import (
    WARMUP,
    KubeletSoakFigures,
    PluginPlacement,
    soak_kubelet_restarts,
)
from tests.reliability.process_probe import FD_LIMIT, RSS_LIMIT, Usage
from tests.reliability.profile import LONG, SHORT, Profile

KUBELET_VARIANTS: tuple[tuple[PluginPlacement, str], ...] = (
    ("in-process", "kubelet"),
    ("in-process", "plugins-registry"),
    ("daemon", "kubelet"),
)


def latency(samples: Sequence[float]) -> str:
    return (
        f"p50 {percentile(samples, 50) * 1000:.0f} ms, p99 {percentile(samples, 99) * 1000:.0f} ms, "
        f"max {max(samples, default=float('nan')) * 1000:.0f} ms"
    )


def usage_change(before: Usage | None, after: Usage | None) -> str:
    if before is None or after is None:
        return "not measured"
    text = (
        f"fds {before.fds} -> {after.fds}, threads {before.threads} -> {after.threads}, "
        f"RSS {before.rss / 2**20:.1f} -> {after.rss / 2**20:.1f} MiB"
    )
    if before.tasks is not None and after.tasks is not None:
        text += f", asyncio tasks {before.tasks} -> {after.tasks}"
    return text


def print_problems(problems: Sequence[str]) -> None:
    for text in problems[:20]:
        print(f"    PROBLEM {text}")
    if len(problems) > 20:
        print(f"    ... and {len(problems) - 20} more")


def print_kubelet(figures: KubeletSoakFigures) -> bool:
    print(f"\nkubelet restarts: plugins {figures.plugins}, registration via {figures.registration}")
    print(f"  restarts {figures.restarts} in {figures.elapsed:.1f} s; re-registered: {latency(figures.reregistration)}")
    print(f"  {'this process' if figures.plugins == 'in-process' else 'fakegpu plugin'} after {WARMUP} warm-up")
    print(f"    restarts -> end: {usage_change(figures.before, figures.after)}")
    print(
        f"  pods admitted {figures.pods_admitted}, deleted {figures.pods_deleted}; up to "
        f"{figures.max_allocations} allocations restored per restart; problems {len(figures.problems)}"
    )
    print_problems(figures.problems + figures.leaks())
    return not figures.problems and not figures.leaks()


def print_daemon(figures: DaemonSoakFigures, what: str, twice: str) -> bool:
    print(f"\n{figures.daemon} restarts (seed {figures.seed})")
    print(f"  restarts {figures.restarts} in {figures.elapsed:.1f} s; spawn -> registered: {latency(figures.ready)}")
    kills = ", ".join(f"{k} {n}" for k, n in sorted(figures.kills.items()))
    print(f"  kills: {kills}")
    if figures.kubelet_before is not None:
        print(f"  kubelet side (this process): {usage_change(figures.kubelet_before, figures.kubelet_after)}")
    print(f"  daemon, first run -> last run: {usage_change(figures.daemon_first, figures.daemon_last)}")
    print(
        f"  {what} acknowledged {figures.acknowledged}, cut off by a kill {figures.cut_off} "
        f"(retried OK {figures.retried_ok})"
    )
    half = f"half-prepared {figures.half_prepared}, " if figures.daemon == "fakegpu dra" else ""
    print(
        f"  lost {figures.lost}, {twice} {figures.duplicated}, {half}"
        f"stale sockets replaced {figures.stale_sockets_replaced}, left {figures.stale_sockets_left}; "
        f"problems {len(figures.problems)}"
    )
    print_problems(figures.problems + figures.leaks())
    return not figures.problems and not figures.leaks()


async def main(profile: Profile, seed: int) -> int:
    print(
        f"fakegpu restart soak, {profile.name} profile: {profile.kubelet_restarts} kubelet restarts per variant, "
        f"{profile.plugin_restarts} plugin and {profile.dra_restarts} DRA driver restarts; seed {seed}"
    )
    print(
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, grpcio {grpc.__version__}"
    )
    print(f"leak limits after the warm-up: fds +{FD_LIMIT}, threads +0, tasks +0, RSS +{RSS_LIMIT // 2**20} MiB")
    began = time.monotonic()
    ok = True
    for plugins, registration in KUBELET_VARIANTS:
        figures = await soak_kubelet_restarts(
            profile.kubelet_restarts,
            plugins=plugins,
            registration="kubelet" if registration == "kubelet" else "plugins-registry",
            seed=seed,
        )
        ok = print_kubelet(figures) and ok
    plugin = await soak_plugin_restarts(profile.plugin_restarts, seed=seed)
    ok = print_daemon(plugin, "allocations", "devices allocated twice") and ok
    dra = await soak_dra_restarts(profile.dra_restarts, seed=seed)
    ok = print_daemon(dra, "claim prepares", "claims prepared twice") and ok
    print(f"\ntotal wall time {time.monotonic() - began:.1f} s; {'all clean' if ok else 'PROBLEMS FOUND'}")
    return 0 if ok else 1


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the short (CI) profile instead of the long one")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the kill plan (default %(default)s)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)
    sys.exit(asyncio.run(main(SHORT if args.quick else LONG, args.seed)))


if __name__ == "__main__":
    cli()
