"""The admin socket's wire protocol: newline-delimited JSON requests and answers, and field checking.

A request is one JSON object on one line, ``{"op": "health", "target": "3", "healthy": false}``; the
answer is one line, ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "<text>"}``. Each op is
an async function whose keyword parameters are its fields: their annotations (``str``, ``int``,
``float``, ``bool``, ``None``, ``list[str]``, unions and ``Literal``) are checked before the op runs, so a missing,
unexpected or wrongly typed field is answered with a text naming the op and the field. An op may take
a pydantic model's fields in place of one parameter (:func:`takes_model`), so the model stays their one
definition. An op raises :class:`AdminError` for a refusal.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from fakegpu.sharing.errors import error_message

Op = Callable[..., Awaitable[Any]]
"""An admin op: an async function whose keyword parameters are the request's fields."""

MAX_REQUEST = 1024 * 1024
"""Largest request line the server reads (1 MiB); longer ones are refused and the connection closed."""
MAX_RESPONSE = 64 * 1024 * 1024
"""Largest answer the client reads (a status of many virtual devices can be large)."""


class AdminError(Exception):
    """A refused admin request, or no daemon to ask; the text says what is wrong."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "admin request failed"


@dataclass(frozen=True)
class Field:
    """One keyword parameter of an op: a request field."""

    name: str
    annotation: Any
    required: bool


def _describe(annotation: Any) -> str:
    """What a field of this type takes, as error texts say it."""
    if annotation is str:
        return "a string"
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "an integer"
    if annotation is float:
        return "a number"
    if annotation is type(None) or annotation is None:
        return "null"
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(json.dumps(v) for v in typing.get_args(annotation))
    if origin is list and typing.get_args(annotation) == (str,):
        return "a list of strings"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(annotation))
    raise TypeError(f"admin op fields cannot be of type {annotation!r}")


def _convert(value: Any, annotation: Any) -> tuple[bool, Any]:
    """(True, value as the op gets it) when ``value`` fits ``annotation``."""
    if annotation is str:
        return isinstance(value, str), value
    if annotation is bool:
        return isinstance(value, bool), value
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if annotation is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        return ok, float(value) if ok else value
    if annotation is type(None) or annotation is None:
        return value is None, value
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return any(type(value) is type(v) and value == v for v in typing.get_args(annotation)), value
    if origin is list and typing.get_args(annotation) == (str,):
        return isinstance(value, list) and all(isinstance(v, str) for v in value), value
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(annotation):
            ok, converted = _convert(value, option)
            if ok:
                return True, converted
        return False, value
    raise TypeError(f"admin op fields cannot be of type {annotation!r}")


def op_fields(name: str, op: Op) -> list[Field]:
    """The request fields of ``op`` (its keyword parameters); TypeError for a parameter the checker cannot check."""
    out = []
    for param in inspect.signature(op, eval_str=True).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(f"admin op {name!r}: parameter {param.name!r} must be a plain keyword parameter")
        if param.annotation is inspect.Parameter.empty:
            raise TypeError(f"admin op {name!r}: parameter {param.name!r} needs a type annotation")
        if param.name == "op":
            raise TypeError(f"admin op {name!r}: a field may not be called 'op'")
        _describe(param.annotation)  # refuses types the checker does not know
        out.append(Field(param.name, param.annotation, param.default is inspect.Parameter.empty))
    return out


def takes_model(model: type[BaseModel], parameter: str) -> Callable[[Op], Op]:
    """Make an op take ``model``'s fields as request fields in place of its ``parameter``, which gets them
    as one validated ``model``.

    The op's signature (what :func:`op_fields` reads) lists the model's fields with their annotations and
    defaults after the op's other parameters, so they are type-checked like any field; then the model
    validates them, and its refusal (a bound, a cross-field rule) is the answer, in the model's words.
    """

    def wrap(op: Op) -> Op:
        signature = inspect.signature(op, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != parameter]
        taken = [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if info.is_required() else info.default,
                annotation=info.annotation,
            )
            for name, info in model.model_fields.items()
        ]

        @functools.wraps(op)
        async def with_model(**fields: Any) -> Any:
            given = {name: fields.pop(name) for name in model.model_fields if name in fields}
            try:
                value = model.model_validate(given)
            except ValidationError as exc:
                raise AdminError("; ".join(error_message(e) for e in exc.errors(include_url=False))) from None
            return await op(**fields, **{parameter: value})

        setattr(with_model, "__signature__", signature.replace(parameters=[*own, *taken]))  # noqa: B010
        return with_model

    return wrap


def _found(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_arguments(op_name: str, fields: Sequence[Field], args: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments for the op, or AdminError naming the op and the field at fault."""
    known = {f.name for f in fields}
    takes = ", ".join(f.name for f in fields) or "no fields"
    for key in args:
        if key not in known:
            raise AdminError(f"op {op_name!r}: unexpected field {key!r}; {op_name!r} takes: {takes}")
    out: dict[str, Any] = {}
    for f in fields:
        if f.name not in args:
            if f.required:
                raise AdminError(f"op {op_name!r}: missing field {f.name!r} ({_describe(f.annotation)})")
            continue
        ok, value = _convert(args[f.name], f.annotation)
        if not ok:
            raise AdminError(
                f"op {op_name!r}: field {f.name!r} must be {_describe(f.annotation)}, found {_found(args[f.name])}"
            )
        out[f.name] = value
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_request(line: bytes) -> tuple[str, dict[str, Any]]:
    """(op, fields) of one request line, or AdminError saying why it is not a request."""
    try:
        request = json.loads(line, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AdminError(f"request is not valid JSON: {exc}") from None
    if not isinstance(request, dict):
        raise AdminError(f'request must be a JSON object like {{"op": "status"}}, found {_found(request)}')
    if "op" not in request:
        raise AdminError('request has no "op" field')
    op = request.pop("op")
    if not isinstance(op, str):
        raise AdminError(f'request field "op" must be a string, found {_found(op)}')
    return op, request


def encode(message: Mapping[str, Any]) -> bytes:
    """One request or answer as its line on the wire."""
    return json.dumps(dict(message)).encode() + b"\n"


def read_answer(line: bytes, peer: Path) -> Any:
    """The result of one answer line from ``peer``, or AdminError with the daemon's refusal or why the
    line is no answer."""
    if not line:
        raise AdminError(f"the fakegpu daemon on {peer} closed the connection without answering")
    try:
        response = json.loads(line)
    except ValueError:
        raise AdminError(f"the process on {peer} answered something that is not JSON") from None
    if not isinstance(response, dict) or "ok" not in response:
        raise AdminError(f"the process on {peer} answered something that is not an admin response")
    if not response["ok"]:
        raise AdminError(str(response.get("error") or "the daemon refused the request"))
    return response.get("result")
