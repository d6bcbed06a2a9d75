"""Go's ``strconv.ParseBool``, for the boolean texts NVIDIA's and component-base's Go code accept.

Both the device plugin's flags (urfave/cli) and the DRA driver's ``--feature-gates`` (component-base) read
booleans this way; one table keeps them alike.
"""

from __future__ import annotations

from typing import Final

GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
GO_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_go_bool_text(text: str) -> bool:
    """``strconv.ParseBool``; ValueError with Go's own error text."""
    if text in GO_TRUE:
        return True
    if text in GO_FALSE:
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{text}": invalid syntax')
