"""The README's pytest example, verbatim, so it can never drift from what works."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)\n```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    return str(blocks[0])


namespace: dict[str, object] = {}
exec(compile(_example(), str(README), "exec"), namespace)
test_readme_example = namespace["test_time_slicing_gives_four_replicas_per_gpu"]
