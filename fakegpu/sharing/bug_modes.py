"""Bug-compatible modes: off by default, each mimicking one known behaviour of the real stack so a
bug can be reproduced on purpose. Named after the behaviour, with the upstream issue."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class BugMode(StrEnum):
    """One mode; its value is how ``--bug-compat``, the fixture's ``bugs`` and scenario YAML spell it."""

    HEALTH_ONE_DEVICE_PER_GPU = "health-one-device-per-gpu"
    PREFERRED_ALLOCATION_FAILS_OFF_BUS = "preferred-allocation-fails-off-bus"
    NO_REREGISTRATION = "no-reregistration"
    RANDOM_DEVICE_IDS = "random-device-ids"


BUG_MODES: dict[BugMode, str] = {
    BugMode.HEALTH_ONE_DEVICE_PER_GPU: (
        "an XID marks only one replica or MIG device of the physical GPU unhealthy; the others stay "
        "schedulable (NVIDIA/k8s-device-plugin#1929)"
    ),
    BugMode.PREFERRED_ALLOCATION_FAILS_OFF_BUS: (
        "while a GPU is off the bus (XID 79), GetPreferredAllocation fails for every request, so every GPU pod "
        "on the node is rejected (NVIDIA/k8s-device-plugin#2038)"
    ),
    BugMode.NO_REREGISTRATION: (
        "the plugin does not notice a kubelet restart and never registers again (plugins before "
        "NVIDIA/k8s-device-plugin#210's fix)"
    ),
    BugMode.RANDOM_DEVICE_IDS: (
        "device IDs change on every start, so allocations restored from the kubelet checkpoint point at devices "
        "that no longer exist"
    ),
}
"""Every mode with what it reproduces (``--help`` lists them in this order)."""
OFF_THE_BUS_XID = 79


class BugModeError(ValueError):
    pass


def parse_bug_modes(names: Iterable[str], source: str = "--bug-compat") -> frozenset[BugMode]:
    out = set()
    for name in names:
        for raw in name.split(","):
            item = raw.strip()
            if not item:
                continue
            if item not in BUG_MODES:
                raise BugModeError(
                    f"{source}: unknown bug-compatible mode {item!r}; expected one of: {', '.join(BUG_MODES)}"
                )
            out.add(BugMode(item))
    return frozenset(out)
