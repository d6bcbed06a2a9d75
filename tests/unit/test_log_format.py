"""``--log-format json``: one valid JSON object per line with the fields log pipelines filter on."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakegpu.telemetry.log_format import (
    CHATTY_LIBRARIES,
    HTTP_CLIENT_LIBRARIES,
    JsonFormatter,
    configure_logging,
    make_formatter,
    rfc3339,
)

RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def record(message: str, *args: object, level: int = logging.INFO, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("fakeplugin.test", level, __file__, 10, message, args, None)
    rec.__dict__.update(extra)
    return rec


def test_core_fields():
    line = JsonFormatter().format(record("served %s on %d sockets", "nvidia.com/gpu", 2, level=logging.WARNING))
    doc = json.loads(line)
    assert list(doc) == ["time", "level", "logger", "message"]
    assert doc["level"] == "warning"
    assert doc["logger"] == "fakeplugin.test"
    assert doc["message"] == "served nvidia.com/gpu on 2 sockets"
    assert RFC3339_UTC.fullmatch(doc["time"]), doc["time"]


def test_rfc3339_is_utc_with_milliseconds():
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339(1700000000.1234) == "2023-11-14T22:13:20.123Z"


def test_extra_fields_become_fields_and_cannot_hide_core_ones():
    rec = record("rpc", method="Allocate", code="OK", duration_seconds=0.25, devices=["a", "b"])
    rec.__dict__["time"] = "not the time"
    doc = json.loads(JsonFormatter().format(rec))
    assert doc["method"] == "Allocate" and doc["code"] == "OK" and doc["duration_seconds"] == 0.25
    assert doc["devices"] == ["a", "b"]
    assert RFC3339_UTC.fullmatch(doc["time"]) and doc["extra_time"] == "not the time"


class Opaque:
    def __str__(self) -> str:
        return "opaque"


def test_values_json_cannot_hold_are_written_as_text():
    doc = json.loads(JsonFormatter().format(record("x", thing=Opaque(), path=Path("/tmp/x"))))
    assert (doc["thing"], doc["path"]) == ("opaque", "/tmp/x")


def test_exception_is_one_field_and_the_object_one_line():
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed\nbadly", (), sys.exc_info())
    line = JsonFormatter().format(rec)
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["message"] == "failed\nbadly"
    assert doc["exception"].startswith("Traceback (most recent call last):")
    assert doc["exception"].rstrip().endswith("ZeroDivisionError: division by zero")


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="--log-format: unknown format 'xml'; expected one of: text, json"):
        make_formatter("xml")  # type: ignore[arg-type]


@contextlib.contextmanager
def bare_root() -> Iterator[logging.Logger]:
    """The root logger as in a fresh process: pytest's capture handlers are put aside meanwhile."""
    root = logging.getLogger()
    chatty = [logging.getLogger(name) for name in {*CHATTY_LIBRARIES, *HTTP_CLIENT_LIBRARIES}]
    saved = root.handlers[:], root.level, [c.level for c in chatty]
    root.handlers = []
    try:
        yield root
    finally:
        root.handlers, root.level = saved[0], saved[1]
        for logger, level in zip(chatty, saved[2], strict=True):
            logger.setLevel(level)


def test_configure_logging_json_lines():
    out = io.StringIO()
    with bare_root():
        configure_logging("debug", "json", stream=out)
        logging.getLogger("fakegpu.dra.rpc").debug("one %s", "rpc", extra={"method": "NodePrepareResources"})
        logging.getLogger("grpc._cython.cygrpc").debug("event loop chatter")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    doc = json.loads(lines[0])
    assert (doc["level"], doc["logger"], doc["message"], doc["method"]) == (
        "debug",
        "fakegpu.dra.rpc",
        "one rpc",
        "NodePrepareResources",
    )


@pytest.mark.parametrize(("level", "shown"), [("info", False), ("debug", True)])
def test_http_client_request_lines_only_at_debug(level: str, shown: bool):
    """httpx2 logs one INFO line per API request (thousands in a fleet's cleanup): debug only."""
    out = io.StringIO()
    with bare_root():
        configure_logging(level, "text", stream=out)
        logging.getLogger("httpx2").info('HTTP Request: DELETE https://api/x "HTTP/1.1 200 OK"')
        logging.getLogger("httpx").info("HTTP Request: GET https://api/y")
        logging.getLogger("httpcore2.http11").debug("send_request_headers.started")
        logging.getLogger("httpx2").warning("a warning still shows")
        logging.getLogger("fakegpu.kube").info("our own line")
    text = out.getvalue()
    assert ("HTTP Request: DELETE" in text) is shown
    assert ("HTTP Request: GET" in text) is shown
    assert "send_request_headers" not in text  # the transport's internals stay out even at debug
    assert "a warning still shows" in text
    assert "our own line" in text


def test_configure_logging_again_replaces_its_handler():
    first, second = io.StringIO(), io.StringIO()
    with bare_root() as root:
        configure_logging("info", "json", stream=first)
        configure_logging("info", "text", stream=second)
        assert len(root.handlers) == 1
        logging.getLogger("fakeplugin.x").info("hello")
    assert first.getvalue() == ""
    assert re.fullmatch(r"\S+ \S+ INFO fakeplugin\.x: hello\n", second.getvalue())


def test_configure_logging_leaves_foreign_handlers_alone():
    foreign = logging.NullHandler()
    with bare_root() as root:
        root.addHandler(foreign)
        root.setLevel(logging.ERROR)
        configure_logging("debug", "json", stream=io.StringIO())
        assert root.handlers == [foreign]
        assert root.level == logging.ERROR


# --- records that do not fit: never lost, always strict JSON ---------------------------------------------


def strict(line: str) -> dict[str, Any]:
    """RFC 8259 JSON: Python's json module also reads NaN and Infinity, which no strict parser does."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    doc = json.loads(line, parse_constant=refuse)
    assert isinstance(doc, dict)
    return doc


def test_arguments_that_do_not_fit_the_message_keep_the_record():
    doc = strict(JsonFormatter().format(record("served %d devices on %s", "many")))
    assert doc["message"] == "served %d devices on %s ('many',)"
    doc = strict(JsonFormatter().format(record("%(missing)s", {"other": 1})))
    assert doc["message"] == "%(missing)s {'other': 1}"


def test_the_text_format_keeps_such_records_too():
    line = make_formatter("text").format(record("served %d devices", "many"))
    assert line.endswith(" INFO fakeplugin.test: served %d devices ('many',)")


def test_extras_with_keys_that_are_not_strings():
    rec = record("x", method="Allocate")
    attributes: dict[Any, Any] = rec.__dict__
    attributes[7] = "seven"
    attributes[(1, 2)] = "pair"
    rec.__dict__["by_pair"] = {(0, 1): "a"}  # a dict json cannot key
    doc = strict(JsonFormatter().format(rec))
    assert (doc["7"], doc["(1, 2)"], doc["method"]) == ("seven", "pair", "Allocate")
    assert doc["by_pair"] == "{(0, 1): 'a'}"


def test_nan_and_infinity_are_written_as_text():
    rec = record("x", ratio=float("nan"), limit=float("inf"), nested=[1.5, float("-inf")], fine=0.5)
    doc = strict(JsonFormatter().format(rec))
    assert (doc["ratio"], doc["limit"], doc["nested"], doc["fine"]) == ("nan", "inf", "[1.5, -inf]", 0.5)
    assert doc["message"] == "x"


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        return "<Unprintable>"


def test_a_value_whose_str_fails():
    doc = strict(JsonFormatter().format(record("x", thing=Unprintable(), fine="ok")))
    assert (doc["thing"], doc["fine"]) == ("<Unprintable>", "ok")


def test_bad_records_reach_the_stream_through_logging():
    out = io.StringIO()
    with bare_root():
        configure_logging("info", "json", stream=out)
        log = logging.getLogger("fakeplugin.x")
        log.info("%d GPUs", "eight")
        log.info("ratio", extra={"ratio": float("nan")})
    lines = out.getvalue().splitlines()
    assert [strict(line)["message"] for line in lines] == ["%d GPUs ('eight',)", "ratio"]
