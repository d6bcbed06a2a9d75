"""``--cleanup-on-exit``: whether ``fakegpu plugin --label-node`` takes its labels off the Node when it stops.

A stop signal means one of two things and the process cannot tell them apart from the signal alone: the
plugin is going away for good (the node was opted out, the DaemonSet deleted, a hand-run plugin stopped),
or it is being restarted in place (a rolling update, a deleted pod the DaemonSet re-creates). Labels that
vanish for a restart's few seconds only cost new pods a scheduling retry; labels left behind for good make
the node lie to node selectors. So the default is ``always``, as NVIDIA's GFD removes its features file
(and NFD then the labels) on every exit (``cmd/gpu-feature-discovery/main.go``, ``removeOutputFile``), and
``unless-node-label:KEY=VALUE`` asks the Node itself: while it still carries the label a DaemonSet selects
on, a new pod will come and adopt the labels (the ``fakegpu.io/managed-labels`` record), so they stay.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from fakegpu.sharing.errors import SpecError

ENV: Final = "FAKEGPU_CLEANUP_ON_EXIT"
UNLESS_NODE_LABEL: Final = "unless-node-label:"


@dataclass(frozen=True)
class CleanupOnExit:
    """``always``, ``never``, or ``unless-node-label:KEY[=VALUE]`` (keep while the Node carries that label)."""

    mode: str = "always"
    key: str = ""
    value: str | None = None

    @classmethod
    def parse(cls, text: str, source: str = "--cleanup-on-exit") -> CleanupOnExit:
        text = text.strip()
        if text in ("always", "never"):
            return cls(text)
        if text.startswith(UNLESS_NODE_LABEL):
            key, sep, value = text[len(UNLESS_NODE_LABEL) :].partition("=")
            if key:
                return cls("unless-node-label", key, value if sep else None)
        raise SpecError(source, f"{text!r}: expected always, never or unless-node-label:KEY[=VALUE]")

    def __str__(self) -> str:
        if self.mode != "unless-node-label":
            return self.mode
        return UNLESS_NODE_LABEL + self.key + ("" if self.value is None else f"={self.value}")

    def wanted(self, labels: Mapping[str, str]) -> bool:
        """Whether to remove the owned labels, given the Node's labels as the plugin stops."""
        if self.mode != "unless-node-label":
            return self.mode == "always"
        if self.key not in labels:
            return True
        return self.value is not None and labels[self.key] != self.value
