"""Wall time of ``fakegpu --help`` and ``fakegpu --version``: how long a user waits for the CLI to answer.

Run: ``.venv/bin/python bench/cli_startup.py [--runs N]``. Each run is a new ``python -m fakegpu`` process
(``subprocess``), timed from spawn to exit, so the figure includes the interpreter's own start-up; the
bare interpreter (``python -c pass``) is measured the same way for reference. A measurement, not a test:
nothing passes or fails (``tests/unit/cli/test_startup_imports.py`` checks what is imported instead).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from percentiles import percentile

ROOT = Path(__file__).resolve().parents[1]
COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "fakegpu --help": ["-m", "fakegpu", "--help"],
    "fakegpu --version": ["-m", "fakegpu", "--version"],
}


def wall_times(argv: list[str], runs: int) -> list[float]:
    """Seconds per run of ``python argv`` from the source tree (output discarded, failure raised)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, *argv], env=env, stdout=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - started)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, metavar="N", help="runs per command (default %(default)s)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, {args.runs} runs")
    print(f"{'COMMAND':<20} {'p50 ms':>8} {'p90 ms':>8} {'min ms':>8} {'max ms':>8}")
    for name, argv in COMMANDS.items():
        samples = [t * 1000 for t in wall_times(argv, args.runs)]
        print(
            f"{name:<20} {percentile(samples, 50):>8.0f} {percentile(samples, 90):>8.0f} "
            f"{min(samples):>8.0f} {max(samples):>8.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
