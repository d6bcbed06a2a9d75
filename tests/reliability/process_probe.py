"""What a process holds, read from /proc: open fds, RSS, threads, asyncio tasks.

The restart soaks compare these before and after many restarts, because a leak that costs one file
descriptor or one task per kubelet restart is invisible in any single test and fatal after a month
on a node. Linux only (``/proc``), like the daemons' targets.
"""

from __future__ import annotations

import asyncio
import gc
import os
from dataclasses import dataclass
from pathlib import Path


def open_fds(pid: int | None = None) -> int:
    """Number of open file descriptors of ``pid`` (default: this process)."""
    return len(os.listdir(f"/proc/{pid or 'self'}/fd"))


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size (VmRSS) of ``pid`` in bytes; 0 for a process that has exited (a zombie has none)."""
    for line in Path(f"/proc/{pid or 'self'}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


ELASTIC_THREADS = frozenset({"event_engine"})
"""Thread names left out of ``thread_count``: gRPC's event engine runs a work-stealing pool that adds a
thread under load and reaps it when idle, so its size says nothing about leaks."""


def thread_count(pid: int | None = None) -> int:
    """Threads of ``pid`` other than gRPC's elastic pool: a leaked server or executor shows up here."""
    task_dir = Path(f"/proc/{pid or 'self'}/task")
    count = 0
    for tid in os.listdir(task_dir):
        try:
            name = (task_dir / tid / "comm").read_text().strip()
        except OSError:  # the thread ended between listdir and read
            continue
        count += name not in ELASTIC_THREADS
    return count


def asyncio_tasks() -> int:
    """Unfinished tasks of the running event loop (call from inside it)."""
    return sum(1 for task in asyncio.all_tasks() if not task.done())


FD_LIMIT = 0
THREAD_LIMIT = 0
TASK_LIMIT = 0
RSS_LIMIT = 20 * 2**20
"""Growth a soak allows after its warm-up: none in fds, threads and asyncio tasks; 20 MiB of RSS (allocator
noise)."""


@dataclass(frozen=True)
class Usage:
    """One reading of a process's resources."""

    fds: int
    rss: int
    threads: int
    tasks: int | None = None
    """asyncio tasks; only for this process, read inside its event loop."""

    def growth(self, before: Usage) -> Usage:
        tasks = None if self.tasks is None or before.tasks is None else self.tasks - before.tasks
        return Usage(self.fds - before.fds, self.rss - before.rss, self.threads - before.threads, tasks)

    def leaks(self, over: str = "") -> list[str]:
        """This growth (``after.growth(before)``) against the leak limits, one line per limit exceeded;
        ``over`` says over what the counts grew (`` over 95 restarts``)."""
        out = [
            f"{what} grew by {amount}{over} (limit {limit})"
            for what, amount, limit in (
                ("open fds", self.fds, FD_LIMIT),
                ("threads", self.threads, THREAD_LIMIT),
                ("asyncio tasks", self.tasks or 0, TASK_LIMIT),
            )
            if amount > limit
        ]
        if self.rss > RSS_LIMIT:
            out.append(f"RSS grew by {self.rss / 2**20:.1f} MiB (limit {RSS_LIMIT / 2**20:.0f} MiB)")
        return out

    def describe(self) -> str:
        text = f"{self.fds} fds, RSS {self.rss / 2**20:.1f} MiB, {self.threads} threads"
        return text if self.tasks is None else f"{text}, {self.tasks} asyncio tasks"


async def settle_self(rounds: int = 3) -> None:
    """Let finished connections close and collect garbage, so a reading shows what is really kept."""
    for _ in range(rounds):
        # Time passing: nothing to wait for by name (transports and gRPC's threads finish closing on their
        # own); a reading compares figures with limits, it never shows that something did not happen.
        await asyncio.sleep(0.05)
        gc.collect()


def usage_of(pid: int | None = None) -> Usage:
    """A reading of ``pid``; of this process (with its asyncio tasks) when ``pid`` is None."""
    if pid is None:
        return Usage(open_fds(), rss_bytes(), thread_count(), asyncio_tasks())
    return Usage(open_fds(pid), rss_bytes(pid), thread_count(pid))
