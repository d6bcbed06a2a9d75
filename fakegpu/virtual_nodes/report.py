"""What a run did, counted, and the lines that say so."""

from __future__ import annotations

import collections
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

CLASS_SELECTOR = "fakegpu.io/virtual-node=true"
"""The tool's DeviceClasses (``extended_classes.delete_selector``); spelled out here to keep this module a leaf."""
MAX_PROBLEM_LINES = 10
"""With a broken API server every node fails the same way: a few lines say it, the count says the rest."""


class RunReport(Protocol):
    """What the command prints of a run, a bring-up's or a delete's: its lines, and whether it went well."""

    @property
    def ok(self) -> bool: ...

    def lines(self) -> list[str]: ...


class Outcome(enum.Enum):
    CREATED = "created"
    ADOPTED = "adopted"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    REFUSED = "refused"
    """A Node of that name exists and is not a KWOK node: a real node is never touched."""
    FAILED = "failed"
    GONE = "gone"
    """Deleted by someone while being watched: not re-created."""


@dataclass
class BringUpReport:
    """What a bring-up wrote, per kind. A node's outcome is about its Node object only: a node whose only
    change was its ResourceSlices stays UNCHANGED and is counted in ``slice_nodes`` (``note_slices``),
    so an in-place switch of the slices does not read as "20 updated" nodes."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    """Node name -> why it was refused or failed."""
    slices: collections.Counter[str] = field(default_factory=collections.Counter)
    """ResourceSlice writes: created, updated, deleted."""
    durations: dict[str, float] = field(default_factory=dict)
    """Seconds from a node's first request to its last (the wait for a concurrency slot excluded)."""
    leftovers: list[str] = field(default_factory=list)
    """Virtual nodes with the prefix from an earlier run that this plan does not have."""
    seconds: float = 0.0
    throttles: int = 0
    """429 answers (API Priority and Fairness) met on the way."""
    lowest_concurrency: int = 0
    """The fewest nodes in flight the answers allowed (the limit is halved on each 429)."""
    slice_nodes: set[str] = field(default_factory=set)
    """Nodes whose ResourceSlices were written (created, updated or deleted)."""
    device_classes: collections.Counter[str] = field(default_factory=collections.Counter)
    """DeviceClass writes of the dra-extended mode: created, replaced. The line shows once a key is set."""

    def count(self, outcome: Outcome) -> int:
        return sum(1 for o in self.outcomes.values() if o is outcome)

    def note_slices(self, node: str, written: collections.Counter[str]) -> None:
        """Add one node's slice writes (``created``/``updated``/``deleted``) to the totals."""
        if sum(written.values()):
            self.slice_nodes.add(node)
            self.slices.update(written)

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        nodes = ", ".join(f"{self.count(o)} {o.value}" for o in Outcome if o is not Outcome.GONE)
        rate = f" ({len(self.outcomes) / self.seconds:.0f}/s)" if self.outcomes and self.seconds > 0 else ""
        slices = ", ".join(f"{self.slices[k]} {k}" for k in ("created", "updated", "deleted"))
        on = f" on {len(self.slice_nodes)} node(s)" if self.slice_nodes else ""
        out = [f"nodes: {nodes} in {self.seconds:.2f} s{rate}", f"ResourceSlices: {slices}{on}"]
        if self.throttles:
            out.append(
                f"the API server throttled {self.throttles} request(s) (429, retried after its Retry-After); "
                f"nodes in flight went down to {self.lowest_concurrency}"
            )
        if self.device_classes:
            classes = ", ".join(f"{self.device_classes[k]} {k}" for k in ("created", "replaced"))
            out.append(f"DeviceClasses: {classes}")
        if self.leftovers:
            shown = ", ".join(self.leftovers[:5]) + (", ..." if len(self.leftovers) > 5 else "")
            out.append(
                f"{len(self.leftovers)} virtual node(s) of an earlier run are not in this plan and were left "
                f"alone ({shown}); --delete removes them"
            )
        out += problem_lines(self.problems)
        return out


@dataclass
class DeleteReport:
    nodes_deleted: int = 0
    nodes_released: int = 0
    slices_deleted: int = 0
    """Slices deleted one by one: those of adopted nodes (the deleted nodes' go with them)."""
    swept: bool = False
    """Slices of the prefix that no garbage collector took were deleted by collection."""
    problems: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    classes_kept: list[str] = field(default_factory=list)
    """The tool's DeviceClasses still in the cluster: ``--delete`` leaves them (``extended_classes``)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        out = [
            f"deleted {self.nodes_deleted} node(s) with their ResourceSlices, handed back {self.nodes_released} "
            f"adopted node(s) and deleted {self.slices_deleted} of their ResourceSlice(s) in {self.seconds:.2f} s"
        ]
        if self.swept:
            out.append("deleted the ResourceSlices of the prefix that no garbage collector took, by collection")
        if self.classes_kept:
            out.append(
                f"kept DeviceClass(es) {', '.join(self.classes_kept)} (shared by every prefix); "
                f"kubectl delete deviceclass -l {CLASS_SELECTOR} removes them"
            )
        return out + problem_lines(self.problems)


def problem_lines(problems: Mapping[str, str]) -> list[str]:
    items = sorted(problems.items())
    out = [f"error: {name}: {message}" for name, message in items[:MAX_PROBLEM_LINES]]
    if len(items) > MAX_PROBLEM_LINES:
        out.append(f"error: ... and {len(items) - MAX_PROBLEM_LINES} more")
    return out


def calls_line(calls: Mapping[str, int]) -> str:
    total = sum(calls.values())
    by_verb = ", ".join(f"{verb} {n}" for verb, n in sorted(calls.items()) if n)
    return f"API calls: {total}" + (f" ({by_verb})" if by_verb else "")
