"""How far a run of scenario files has got, for a progress line: steps done out of all the files' steps."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RunCount:
    """Updated by the runners as they go; read by ``fakegpu scenario run``'s progress line."""

    steps_total: int = 0
    steps_done: int = 0
    files_total: int = 0
    files_done: int = 0

    def read(self) -> tuple[int, int]:
        """(done, total) steps, the shape ``fakegpu.cli.progress.progress`` reads."""
        return self.steps_done, self.steps_total
