"""Bug-compatible modes: off by default, each mimicking one known behaviour of the real stack so a
bug can be reproduced on purpose. Named after the behaviour, with the upstream issue."""

from __future__ import annotations

from collections.abc import Iterable

BUG_MODES: dict[str, str] = {
    "health-one-device-per-gpu": (
        "an XID marks only one replica or MIG device of the physical GPU unhealthy; the others stay "
        "schedulable (NVIDIA/k8s-device-plugin#1929)"
    ),
    "preferred-allocation-fails-off-bus": (
        "while a GPU is off the bus (XID 79), GetPreferredAllocation fails for every request, so every GPU pod "
        "on the node is rejected (NVIDIA/k8s-device-plugin#2038)"
    ),
    "no-reregistration": (
        "the plugin does not notice a kubelet restart and never registers again (plugins before "
        "NVIDIA/k8s-device-plugin#210's fix)"
    ),
    "random-device-ids": (
        "device IDs change on every start, so allocations restored from the kubelet checkpoint point at devices "
        "that no longer exist"
    ),
}
OFF_THE_BUS_XID = 79


class BugModeError(ValueError):
    pass


def parse_bug_modes(names: Iterable[str], source: str = "--bug-compat") -> frozenset[str]:
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
            out.add(item)
    return frozenset(out)
