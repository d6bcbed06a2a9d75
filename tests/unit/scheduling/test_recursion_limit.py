"""The allocator's CEL evaluator leaves the interpreter's recursion limit alone.

cel-python's ``Environment()`` raises ``sys.setrecursionlimit`` to 2500 for the whole process; in a test
session that once let a 1000-deep YAML file through fakegpu's own "nesting too deep" check.
"""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_cel_environment_keeps_the_recursion_limit() -> None:
    probe = (
        "import sys\n"
        "before = sys.getrecursionlimit()\n"
        "import fakegpu.scheduling.cel_environment as cel\n"
        "assert cel.selector_matches is not None\n"
        "print(before, sys.getrecursionlimit())\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    before, after = done.stdout.split()
    assert after == before
