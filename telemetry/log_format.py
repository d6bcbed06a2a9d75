"""The daemons' log lines: text for people by default, JSON (``--log-format json``) for log pipelines.

JSON is one object per line (never pretty-printed, newlines inside values escaped), so Loki, Fluent
Bit or ``jq`` can read a DaemonSet's logs without multi-line parsing. Every object has ``time``
(RFC 3339, UTC, milliseconds), ``level`` (lower case), ``logger`` and ``message``; an exception
becomes an ``exception`` field holding the traceback, and fields passed with ``extra=`` (the RPC
line's method, code and duration) become fields of their own, so they can be filtered on without
parsing the message.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

CORE_FIELDS = ("time", "level", "logger", "message")
CHATTY_LIBRARIES = ("grpc", "httpcore", "hpack", "asyncio")
"""Libraries whose debug output is their own internals (grpc logs every event loop lookup): kept at info
when fakegpu's debug level is asked for, so debug shows fakegpu's lines, one per RPC."""
# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRIBUTES = frozenset(
    logging.LogRecord("", logging.INFO, "", 0, "", (), None).__dict__.keys() | {"message", "asctime", "taskName"}
)
_OURS = "_fakegpu_handler"


def rfc3339(created: float) -> str:
    """``2025-01-31T12:00:00.123Z``: what log pipelines parse without a custom pattern."""
    return datetime.fromtimestamp(created, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    """One JSON object per record; values JSON cannot hold are written as their ``str()``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key in _RECORD_ATTRIBUTES or key.startswith("_"):
                continue
            # An extra named like a core field must not hide the real one.
            out["extra_" + key if key in CORE_FIELDS else key] = value
        if record.exc_info and record.exc_info[0] is not None:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str, ensure_ascii=True, separators=(",", ":"))


def make_formatter(fmt: LogFormat) -> logging.Formatter:
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"--log-format: unknown format {fmt!r}; expected one of: {', '.join(LOG_FORMATS)}")


def configure_logging(level: str | int, fmt: LogFormat = "text", stream: TextIO | None = None) -> None:
    """Set the root logger's level and install one handler in ``fmt`` on ``stream`` (stderr by default).

    Like ``logging.basicConfig`` it does nothing when the root logger already has someone else's handlers
    (pytest's capture, an embedding program: their levels and formats are theirs to choose); unlike it,
    calling it again replaces the handler it installed before, so the format can change.
    """
    formatter = make_formatter(fmt)
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, _OURS, False)]
    if len(ours) != len(root.handlers):
        return
    root.setLevel(level.upper() if isinstance(level, str) else level)
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(logging.INFO if root.level <= logging.DEBUG else logging.NOTSET)
    for handler in ours:
        root.removeHandler(handler)
    new = logging.StreamHandler(stream if stream is not None else sys.stderr)
    new.setFormatter(formatter)
    setattr(new, _OURS, True)
    root.addHandler(new)
