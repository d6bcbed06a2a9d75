"""The progress line of long operations: in place on a terminal, plain and sparse elsewhere."""

from __future__ import annotations

import io

from fakegpu.cli.progress import progress
from tests.eventually import eventually


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_on_a_terminal_the_line_is_rewritten_in_place_and_erased_at_the_end():
    stream = Terminal()
    done = 0
    async with progress(stream, "virtual nodes", lambda: (done, 10), interval=0.01):
        done = 4
        await eventually(lambda: "virtual nodes: 4/10" in stream.getvalue(), "a progress line")
    text = stream.getvalue()
    assert text.startswith("\r\x1b[K") and "\n" not in text
    assert text.endswith("\r\x1b[K")  # erased: the summary that follows starts on a clean line


async def test_elsewhere_a_short_run_prints_nothing_and_a_long_one_plain_lines():
    quiet = io.StringIO()
    reads = 0

    def read() -> tuple[int, int]:
        nonlocal reads
        reads += 1
        return (1, 2)

    async with progress(quiet, "virtual nodes", read, interval=0.01, plain_every=10.0):
        await eventually(lambda: reads >= 5, "five ticks of the progress line")
    assert quiet.getvalue() == ""
    log = io.StringIO()
    async with progress(log, "deleting", lambda: (3, 9), interval=0.01, plain_every=0.02):
        await eventually(lambda: log.getvalue().count("\n") >= 2, "plain progress lines")
    assert "\r" not in log.getvalue()
    assert log.getvalue().splitlines()[0].startswith("deleting: 3/9 (")


async def test_the_line_names_what_is_waited_for_when_the_count_cannot_move():
    stream = Terminal()
    step = "deleting the ResourceSlices left"
    async with progress(stream, "deleting virtual nodes", lambda: (0, 0), interval=0.01, step=lambda: step):
        await eventually(lambda: f"(0/s, 0 s), {step}" in stream.getvalue(), "the step on the progress line")
        step = ""
        await eventually(lambda: stream.getvalue().endswith(" s)"), "no step once nothing long runs")
