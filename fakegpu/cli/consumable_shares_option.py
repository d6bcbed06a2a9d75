"""``--consumable-shares`` of ``fakegpu dra``: NVIDIA's flag for GPUs and MIG devices shared by several claims.

NVIDIA's gpu-kubelet-plugin reads it from the flag or from ``CONSUMABLE_SHARES`` (what its chart sets from
``consumableShares``), default ``disabled``; any other value needs the ``ConsumableShares`` feature gate
(``fakegpu.dra.consumable_shares`` holds the values and NVIDIA's checks).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from fakegpu.dra.consumable_shares import DISABLED, ENV, FLAG, ConsumableShares, parse_consumable_shares
from fakegpu.dra.feature_gates import FeatureGates


def add_consumable_shares_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        FLAG,
        default=None,
        metavar="MODE",
        help=f"NVIDIA's consumable shares (env {ENV}): disabled (default), memory, unlimited or a positive "
        "integer N; every GPU and MIG device may then be allocated to several claims (memory: each takes the "
        "memory it asks for, all of it by default; unlimited: none by default; N: at most N claims); needs the "
        "ConsumableShares feature gate",
    )


def consumable_shares(args: argparse.Namespace, env: Mapping[str, str], gates: FeatureGates) -> ConsumableShares:
    """The flag, else ``$CONSUMABLE_SHARES``, else ``disabled``, checked against the gates as NVIDIA checks it."""
    raw = args.consumable_shares if args.consumable_shares is not None else env.get(ENV, DISABLED)
    return parse_consumable_shares(raw, gates)
