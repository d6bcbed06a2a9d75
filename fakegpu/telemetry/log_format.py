"""The daemons' log lines: text for people by default, JSON (``--log-format json``) for log pipelines.

JSON is one object per line (never pretty-printed, newlines inside values escaped), so Loki, Fluent
Bit or ``jq`` can read a DaemonSet's logs without multi-line parsing. Every object has ``time``
(RFC 3339, UTC, milliseconds), ``level`` (lower case), ``logger`` and ``message``; an exception
becomes an ``exception`` field holding the traceback, and fields passed with ``extra=`` (the RPC
line's method, code and duration) become fields of their own, so they can be filtered on without
parsing the message.

Every line is strict JSON (RFC 8259), and no record is lost to a formatting error: a message whose
``%`` arguments do not fit it is written as the message followed by ``repr(args)``; a value JSON cannot
hold (an object, a float NaN or infinity, a dict with tuple keys) is written as its ``str()`` (its
``repr()`` if that fails too), field by field, so the other fields stay as they are.
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
CHATTY_LIBRARIES = ("grpc", "httpcore", "httpcore2", "hpack", "asyncio")
"""Libraries whose debug output is their own internals (grpc logs every event loop lookup): kept at info
when fakegpu's debug level is asked for, so debug shows fakegpu's lines, one per RPC."""
HTTP_CLIENT_LIBRARIES = ("httpx", "httpx2", "httpcore", "httpcore2")
"""The API-server client's libraries log one INFO line per request (``httpx2: HTTP Request: DELETE ...``,
thousands for a fleet's cleanup): kept at warning unless ``--log-level debug`` asks for them."""
# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_RECORD_ATTRIBUTES = frozenset(
    logging.LogRecord("", logging.INFO, "", 0, "", (), None).__dict__.keys() | {"message", "asctime", "taskName"}
)
_OURS = "_fakegpu_handler"


def rfc3339(created: float) -> str:
    """``2025-01-31T12:00:00.123Z``: what log pipelines parse without a custom pattern."""
    return datetime.fromtimestamp(created, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _text(value: object) -> str:
    """``str(value)``, else ``repr(value)``, else the type's name: never raises."""
    for convert in (str, repr):
        try:
            return convert(value)
        except Exception:  # a broken __str__ must not lose the record
            continue
    return f"<unprintable {type(value).__name__}>"


def safe_message(record: logging.LogRecord) -> str:
    """``record.getMessage()``; when the ``%`` arguments do not fit the message, the message and ``repr(args)``."""
    try:
        return record.getMessage()
    except Exception:
        args = record.args
        try:
            shown = repr(args)
        except Exception:
            shown = f"<unprintable {type(args).__name__}>"
        return f"{_text(record.msg)} {shown}"


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def _json_safe(value: Any) -> Any:
    """``value`` if strict JSON can hold it (with ``str()`` for unknown objects), else its text."""
    try:
        _dumps(value)
    except Exception:
        return _text(value)
    return value


class JsonFormatter(logging.Formatter):
    """One strict JSON object per record; see the module docstring for values JSON cannot hold."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": safe_message(record),
        }
        for key, value in record.__dict__.items():
            name = key if isinstance(key, str) else _text(key)  # extra= may carry keys that are not strings
            if name in _RECORD_ATTRIBUTES or name.startswith("_"):
                continue
            # An extra named like a core field must not hide the real one.
            out["extra_" + name if name in CORE_FIELDS else name] = value
        if record.exc_info and record.exc_info[0] is not None:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        try:
            return _dumps(out)
        except Exception:  # one field JSON cannot hold: write that one as text, keep the others
            return _dumps({key: _json_safe(value) for key, value in out.items()})


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT``; a message whose ``%`` arguments do not fit is written as the message and ``repr(args)``
    instead of being lost to a traceback on stderr."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        try:
            return super().format(record)
        except Exception:
            fixed = logging.makeLogRecord(record.__dict__)
            fixed.msg, fixed.args = safe_message(record), None
            return super().format(fixed)


def make_formatter(fmt: LogFormat) -> logging.Formatter:
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        return TextFormatter()
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
    debug = root.level <= logging.DEBUG
    for name in (*CHATTY_LIBRARIES, *HTTP_CLIENT_LIBRARIES):
        if debug:
            level = logging.INFO if name in CHATTY_LIBRARIES else logging.NOTSET
        else:
            level = logging.WARNING if name in HTTP_CLIENT_LIBRARIES else logging.NOTSET
        logging.getLogger(name).setLevel(level)
    for handler in ours:
        root.removeHandler(handler)
    new = logging.StreamHandler(stream if stream is not None else sys.stderr)
    new.setFormatter(formatter)
    setattr(new, _OURS, True)
    root.addHandler(new)
