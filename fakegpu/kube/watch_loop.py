"""The one list-then-watch loop: how every fakegpu process follows objects on the API server.

List, hand the objects over, then watch from the list's resourceVersion and hand over each event, so
nothing that changes between the list and the watch is missed. A watch whose resourceVersion expired
(410 Gone) lists again at once; any other failure lists again after the pause of ``fakegpu.kube.backoff``,
which grows with each failure in a row and starts again once a list succeeds. A watch the server ends
cleanly lists again at once. It never returns: cancel it to stop.

Lists may go in pages (lightkube's ``chunk_size``, see ``fakegpu.kube.page_sizes``): ``collect`` reduces each
object as its page arrives and returns the resourceVersion of the last page, the one a watch starts from.

The list and the watch are the caller's own requests (a lightkube call, or one counted and retried by the
caller), so each component's API calls stay visible where it makes them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from typing import NoReturn, TypeVar

from lightkube.core.exceptions import ApiError
from lightkube.core.generic_client import ListAsyncIterable

from fakegpu.kube.backoff import RETRY_PAUSE, jittered_pause

T = TypeVar("T")
U = TypeVar("U")

GONE = 410


def expired(exc: BaseException) -> bool:
    """Whether a watch failed only because its resourceVersion is too old (410 Gone): list again now."""
    return isinstance(exc, ApiError) and exc.status.code == GONE


async def collect(listing: ListAsyncIterable[T]) -> tuple[list[T], str]:
    """Every object of a lightkube list, and the resourceVersion to watch from. lightkube sets the list's
    resourceVersion from every page it receives: read after the last page, it is that page's, which is where
    a watch picks up."""
    items = [item async for item in listing]
    return items, listing.resourceVersion


async def list_then_watch(
    list_objects: Callable[[], Awaitable[tuple[Sequence[T], str]]],
    watch_from: Callable[[str], AsyncIterable[tuple[str, T]]],
    *,
    on_list: Callable[[Sequence[T]], None],
    on_event: Callable[[str, T], None],
    on_failure: Callable[[Exception, float], None],
    first_pause: float = RETRY_PAUSE,
) -> NoReturn:
    """Follow one kind of object for good.

    ``list_objects`` returns the objects and the list's resourceVersion; ``watch_from(version)`` yields
    ``(event type, object)``. ``on_failure(exc, pause)`` is told of each failure and the pause before the
    next list (0 after a 410), so the caller logs it in its own words.
    """
    failures = 0
    while True:
        try:
            objects, version = await list_objects()
            failures = 0
            on_list(objects)
            async for event, obj in watch_from(version):
                on_event(event, obj)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the API server may be away for a while: list and watch again
            if expired(exc):
                on_failure(exc, 0.0)
                continue
            failures += 1
            pause = jittered_pause(failures, first=first_pause)
            on_failure(exc, pause)
            await asyncio.sleep(pause)
