"""A face's op table: its ops as module-level functions of what they act on and their request's fields.

An op is written ``async def delete_pod(kubelet: KubeletAdmin, name: str, namespace: str = "default")``:
its first parameter is the face's target (a small Protocol of what the face's ops need), the others are
the request's fields. A face lists its ops in a mapping from op name to function, so adding an op is a
function and a row; :func:`bind_ops` gives each the target, leaving the fields as the parameters that
``fakegpu.control.protocol`` reads and checks.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Concatenate, TypeAlias, TypeVar

from fakegpu.control.protocol import Op

Target = TypeVar("Target")

TargetOp: TypeAlias = Callable[Concatenate[Target, ...], Awaitable[Any]]
"""An op before it is bound: the face's target first, then the request's fields."""


def bind_ops(target: Target, table: Mapping[str, TargetOp[Target]]) -> dict[str, Op]:
    """The ops of ``table`` acting on ``target``, as the admin server serves them (the target is no field)."""
    return {name: functools.partial(op, target) for name, op in table.items()}
