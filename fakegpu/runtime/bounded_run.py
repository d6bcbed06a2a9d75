"""Running a daemon's coroutine so that shutdown cannot hang on a task that ignores cancellation.

asyncio.run() waits without limit for every leftover task after the main coroutine returns; an HTTP
connection to an API server that vanished can keep one alive indefinitely, and SIGTERM must still end
the process (the kubelet and the DaemonSet controller expect it to).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

SHUTDOWN_GRACE = 3.0


def run_bounded(main: Coroutine[Any, Any, T], grace: float = SHUTDOWN_GRACE) -> T:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main)
    finally:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.wait(pending, timeout=grace))
        with contextlib.suppress(TimeoutError):
            loop.run_until_complete(asyncio.wait_for(loop.shutdown_asyncgens(), grace))
        asyncio.set_event_loop(None)
        loop.close()
