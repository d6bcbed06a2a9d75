"""The line layout of ``nvidia-smi -q``: keys nested by four spaces and padded to column 42, then ``: value``.

Shared by the report's fixed sections (``query_full``) and its fault-bearing ones (``health_report``), so
the two line up as one report.
"""

from __future__ import annotations

from typing import Final

KEY_WIDTH: Final = 42


def kv(level: int, key: str, value: object) -> str:
    return f"{'    ' * level + key:<{KEY_WIDTH}}: {value}"


def section(level: int, key: str) -> str:
    return "    " * level + key
