"""What nvidia-smi shows for an idle board beyond the catalog's identity numbers: power, temperature,
BAR1 aperture, reserved framebuffer, PCIe link.

These only feed the fake ``nvidia-smi``; scheduling never depends on them, so they live here rather than
in the catalog. Idle readings come from real ``nvidia-smi`` output where one was found (H100: 68-70 W at
P0 and 328 MiB reserved; L4: 11 W at P8; A10: 9 W at P8; A100 SXM4: 42-46 W); the rest are estimates
and listed in ``unverified``. Another module models utilisation; these are the quiet-node constants.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class BoardFacts:
    power_limit_w: int
    """Default = current = max power limit (``Pwr:Usage/Cap`` cap)."""
    power_min_w: int
    idle_power_w: float
    idle_temp_c: int
    idle_pstate: str
    fan: str
    """``N/A`` for passively cooled boards, else a percentage such as ``0%``."""
    bar1_mib: int
    reserved_mib: int
    """Framebuffer the driver keeps (``FB Memory Usage / Reserved``); free = total - reserved - used."""
    pcie_gen: int
    unverified: tuple[str, ...] = ()


_FACTS: dict[str, BoardFacts] = {
    "a100-40gb": BoardFacts(
        400, 100, 44.31, 31, "P0", "N/A", 65536, 423, 4, ("reserved MiB inferred from older drivers' 40537 MiB total",)
    ),
    "a100-80gb": BoardFacts(
        400, 100, 58.42, 32, "P0", "N/A", 131072, 669, 4, ("reserved MiB inferred from older drivers' 81251 MiB",)
    ),
    "a30": BoardFacts(165, 100, 32.14, 29, "P0", "N/A", 32768, 318, 4, ("reserved MiB inferred from 24258 MiB",)),
    "h100-80gb": BoardFacts(700, 200, 69.21, 30, "P0", "N/A", 131072, 328, 5),
    "h100-94gb": BoardFacts(
        400, 200, 61.37, 34, "P0", "N/A", 131072, 360, 5, ("idle power, temperature and reserved MiB estimated",)
    ),
    "h200": BoardFacts(
        700, 200, 76.18, 31, "P0", "N/A", 262144, 573, 5, ("idle power, BAR1 and reserved MiB estimated",)
    ),
    "b200": BoardFacts(
        1000, 200, 140.36, 30, "P0", "N/A", 262144, 700, 6, ("idle power, BAR1, reserved MiB and PCIe gen estimated",)
    ),
    "t4": BoardFacts(70, 60, 9.42, 35, "P8", "N/A", 256, 251, 3, ("reserved MiB inferred from 15109 MiB",)),
    "l4": BoardFacts(72, 40, 11.27, 29, "P8", "N/A", 32768, 434, 4, ("reserved MiB estimated",)),
    "l40s": BoardFacts(
        350, 100, 33.46, 27, "P8", "N/A", 65536, 565, 4, ("idle power, fan and reserved MiB estimated",)
    ),
    "a10": BoardFacts(150, 100, 9.31, 30, "P8", "0%", 32768, 297, 4, ("reserved MiB inferred from 22731 MiB",)),
    "v100-32gb": BoardFacts(
        300, 150, 43.07, 33, "P0", "N/A", 32768, 258, 3, ("idle power and reserved MiB estimated",)
    ),
}

BOARD_FACTS: MappingProxyType[str, BoardFacts] = MappingProxyType(_FACTS)

FALLBACK = BoardFacts(300, 100, 40.0, 30, "P0", "N/A", 65536, 400, 4, ("no facts for this board: generic values",))
"""For a catalog board added without nvidia-smi facts: plausible, clearly marked."""


def board_facts(key: str) -> BoardFacts:
    return BOARD_FACTS.get(key, FALLBACK)
