"""A progress line for long operations: a count and a rate every second on a terminal, never silence.

On a terminal the line is rewritten in place (carriage return) and erased at the end, so the summary that
follows reads as if it had not been there. Where the output is not a terminal (CI logs, a pipe) a plain line
is written every ``plain_every`` seconds instead, and only once the operation has run that long: a short run
prints nothing more than its summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import TextIO


def _line(what: str, done: int, total: int, elapsed: float, step: str = "") -> str:
    rate = done / elapsed if elapsed > 0 else 0.0
    line = f"{what}: {done}/{total} ({rate:.0f}/s, {elapsed:.0f} s)"
    return f"{line}, {step}" if step else line


async def _tick(
    stream: TextIO,
    what: str,
    read: Callable[[], tuple[int, int]],
    interval: float,
    plain_every: float,
    step: Callable[[], str],
) -> None:
    started = time.monotonic()
    on_terminal = stream.isatty()
    last_plain = started
    while True:
        await asyncio.sleep(interval)
        done, total = read()
        now = time.monotonic()
        text = _line(what, done, total, now - started, step())
        if on_terminal:
            stream.write(f"\r\x1b[K{text}")
            stream.flush()
        elif now - last_plain >= plain_every:
            last_plain = now
            stream.write(f"{text}\n")
            stream.flush()


@contextlib.asynccontextmanager
async def progress(
    stream: TextIO,
    what: str,
    read: Callable[[], tuple[int, int]],
    *,
    interval: float = 1.0,
    plain_every: float = 10.0,
    step: Callable[[], str] = lambda: "",
) -> AsyncIterator[None]:
    """Show ``what: done/total (rate)`` while the body runs; ``read`` gives (done, total), ``step`` what is
    being waited for when the count alone would not move (a collection delete the server takes minutes over)."""
    task = asyncio.create_task(_tick(stream, what, read, interval, plain_every, step))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if stream.isatty():
            stream.write("\r\x1b[K")
            stream.flush()
