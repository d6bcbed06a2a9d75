"""A daemon's admin socket: newline-delimited JSON over an owner-only Unix socket (never TCP).

A request is one JSON object on one line, ``{"op": "health", "target": "3", "healthy": false}``; the
answer is one line, ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "<text>"}``. Each op is
an async function whose keyword parameters are its fields: their annotations (``str``, ``int``,
``float``, ``bool``, ``None``, unions and ``Literal``) are checked before the op runs, so a missing,
unexpected or wrongly typed field is answered with a text naming the op and the field. An op raises
:class:`AdminError` for a refusal; any other exception is reported too and never stops the server.

The socket file is made 0600 before the server accepts anything, and every connection's peer
credentials are checked: only the daemon's own user (and root) may talk to it.

The second half holds what both faces' ops share: health changes, XID events, a GPU falling off the
bus and scripted RPC faults on the live inventory, with the sharing errors turned into admin errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import math
import os
import socket
import struct
import types
import typing
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakegpu.runtime.unix_socket import check_socket_path, identity, remove_stale
from fakegpu.sharing.faults import FaultError, FaultPlan
from fakegpu.sharing.live_inventory import LiveInventory, UnknownDeviceError
from fakegpu.sharing.node import PhysicalGpu

log = logging.getLogger(__name__)

Op = Callable[..., Awaitable[Any]]

MAX_REQUEST = 1024 * 1024
"""Largest request line the server reads (1 MiB); longer ones are refused and the connection closed."""
MAX_RESPONSE = 64 * 1024 * 1024
"""Largest answer the client reads (a status of many virtual devices can be large)."""
SOCKET_MODE = 0o600
DIR_MODE = 0o700


class AdminError(Exception):
    """A refused admin request, or no daemon to ask; the text says what is wrong."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "admin request failed"


# --- argument checking ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Field:
    name: str
    annotation: Any
    required: bool


def _describe(annotation: Any) -> str:
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
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(annotation):
            ok, converted = _convert(value, option)
            if ok:
                return True, converted
        return False, value
    raise TypeError(f"admin op fields cannot be of type {annotation!r}")


def _fields(name: str, op: Op) -> list[_Field]:
    out = []
    for param in inspect.signature(op, eval_str=True).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(f"admin op {name!r}: parameter {param.name!r} must be a plain keyword parameter")
        if param.annotation is inspect.Parameter.empty:
            raise TypeError(f"admin op {name!r}: parameter {param.name!r} needs a type annotation")
        if param.name == "op":
            raise TypeError(f"admin op {name!r}: a field may not be called 'op'")
        _describe(param.annotation)  # refuses types the checker does not know
        out.append(_Field(param.name, param.annotation, param.default is inspect.Parameter.empty))
    return out


def _found(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_arguments(op_name: str, fields: Sequence[_Field], args: Mapping[str, Any]) -> dict[str, Any]:
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


# --- server --------------------------------------------------------------------------------------------


def peer_uid(sock: Any) -> int | None:
    """The UID of the process at the other end of a Unix socket (None where the OS cannot say)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:  # pragma: no cover - not Linux; the 0600 file mode still guards the socket
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)


class AdminServer:
    """Serves ``ops`` on the Unix socket ``path`` until :meth:`stop`."""

    def __init__(
        self,
        path: Path | str,
        ops: Mapping[str, Op],
        *,
        max_request: int = MAX_REQUEST,
        allowed_uids: Collection[int] = (),
    ) -> None:
        self.path = Path(path)
        self.ops = dict(ops)
        self.max_request = max_request
        self.allowed_uids = frozenset(allowed_uids) or frozenset({os.geteuid(), 0})
        self._fields = {name: _fields(name, op) for name, op in self.ops.items()}
        self._server: asyncio.Server | None = None
        self._identity: tuple[int, int] | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self.requests = 0
        self.refused = 0

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        check_socket_path(self.path)
        if not self.path.parent.exists():
            self.path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        remove_stale(self.path, keep_live=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old_umask = os.umask(0o177)
            try:
                sock.bind(str(self.path))
            finally:
                os.umask(old_umask)
            os.chmod(self.path, SOCKET_MODE)
            sock.listen(16)
            self._server = await asyncio.start_unix_server(self._serve, sock=sock, limit=self.max_request)
        except BaseException:
            sock.close()
            if self._server is None:
                with contextlib.suppress(OSError):
                    remove_stale(self.path, keep_live=True)
            raise
        self._identity = identity(self.path)
        log.info("admin socket listening on %s", self.path)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        # Closing a connection ends its conversation at the next read; an op still running after a
        # second is cancelled.
        for writer in self._connections.values():
            writer.close()
        tasks = list(self._connections)
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=1.0)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 2.0)
        if self._identity is not None and identity(self.path) == self._identity:
            self.path.unlink(missing_ok=True)
        self._identity = None

    async def __aenter__(self) -> AdminServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections[task] = writer
        try:
            await self._conversation(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            if self._server is not None:
                raise
            # Cancelled by stop(): end quietly (asyncio logs a connection task that ends cancelled).
        except Exception:
            log.exception("admin connection failed")
        finally:
            if task is not None:
                self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _conversation(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        uid = peer_uid(writer.get_extra_info("socket"))
        if uid is not None and uid not in self.allowed_uids:
            self.refused += 1
            log.warning("admin socket %s: refused a connection from uid %d", self.path, uid)
            await self._send(
                writer,
                {"ok": False, "error": f"permission denied: uid {uid} may not use the admin socket {self.path}"},
            )
            return
        while True:
            try:
                line = await reader.readline()
            except (ValueError, asyncio.LimitOverrunError):
                await self._send(
                    writer, {"ok": False, "error": f"request is larger than {self.max_request} bytes; refused"}
                )
                return
            if not line:
                return
            if not line.strip():
                continue
            self.requests += 1
            await self._send(writer, await self.answer(line))

    async def answer(self, line: bytes) -> dict[str, Any]:
        """The response to one request line; never raises (a failing op is an error answer)."""
        try:
            op_name, args = parse_request(line)
        except AdminError as exc:
            return {"ok": False, "error": str(exc)}
        op = self.ops.get(op_name)
        if op is None:
            return {"ok": False, "error": f"unknown op {op_name!r}; known ops: {', '.join(sorted(self.ops))}"}
        try:
            result = await op(**check_arguments(op_name, self._fields[op_name], args))
        except AdminError as exc:
            return {"ok": False, "error": str(exc)}
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("admin op %s failed", op_name)
            return {"ok": False, "error": f"op {op_name!r} failed: {type(exc).__name__}: {exc}"}
        try:
            json.dumps(result)
        except (TypeError, ValueError):
            log.exception("admin op %s returned a result that is not JSON", op_name)
            return {"ok": False, "error": f"op {op_name!r} returned a result that is not JSON"}
        return {"ok": True, "result": result}

    async def _send(self, writer: asyncio.StreamWriter, response: dict[str, Any]) -> None:
        writer.write(json.dumps(response).encode() + b"\n")
        await writer.drain()


# --- client --------------------------------------------------------------------------------------------


async def admin_request(path: Path | str, request: Mapping[str, Any], timeout: float = 60.0) -> Any:
    """Send one request; the result, or AdminError with the daemon's text or why nobody answered."""
    path = Path(path)
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path, limit=MAX_RESPONSE), timeout)
    except (FileNotFoundError, ConnectionRefusedError):
        raise AdminError(f"no fakegpu daemon is listening on {path}") from None
    except PermissionError:
        raise AdminError(
            f"permission denied on {path}: the admin socket is owner-only; run as the daemon's user or root"
        ) from None
    except TimeoutError:
        raise AdminError(f"the fakegpu daemon on {path} did not accept the connection within {timeout:g}s") from None
    except OSError as exc:
        raise AdminError(f"cannot connect to {path}: {exc.strerror or exc}") from None
    try:
        try:
            writer.write(json.dumps(dict(request)).encode() + b"\n")
            await writer.drain()
        except ConnectionError:
            pass  # the daemon may have refused the connection and closed it: its answer is still there to read
        line = await asyncio.wait_for(reader.readline(), timeout)
    except TimeoutError:
        raise AdminError(f"the fakegpu daemon on {path} did not answer within {timeout:g}s") from None
    except (ConnectionError, ValueError, asyncio.LimitOverrunError) as exc:
        raise AdminError(f"the connection to {path} failed: {exc}") from None
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    if not line:
        raise AdminError(f"the fakegpu daemon on {path} closed the connection without answering")
    try:
        response = json.loads(line)
    except ValueError:
        raise AdminError(f"the process on {path} answered something that is not JSON") from None
    if not isinstance(response, dict) or "ok" not in response:
        raise AdminError(f"the process on {path} answered something that is not an admin response")
    if not response["ok"]:
        raise AdminError(str(response.get("error") or "the daemon refused the request"))
    return response.get("result")


async def admin_call(path: Path | str, op: str, /, **args: Any) -> Any:
    """``await admin_call(sock, "health", target="3", healthy=False)``: the op's result or AdminError."""
    return await admin_request(path, {"op": op, **args})


# --- ops both faces share ------------------------------------------------------------------------------


def set_health(live: LiveInventory, target: str, healthy: bool, xid: int | None) -> list[str]:
    """Mark the devices ``target`` names healthy or unhealthy (directly: the XID is only the reason)."""
    if xid is not None and healthy:
        raise AdminError("an XID only applies when marking a device unhealthy")
    if xid is not None and xid < 1:
        raise AdminError(f"xid must be a positive integer, found {xid}")
    try:
        return live.set_health(target, healthy, xid)
    except UnknownDeviceError as exc:
        raise AdminError(str(exc)) from None


def inject_xid(live: LiveInventory, target: str, xid: int) -> list[str]:
    """An XID event: devices made unhealthy, or none when the XID policy (``DP_*``) ignores it."""
    if xid < 1:
        raise AdminError(f"xid must be a positive integer, found {xid}")
    try:
        return live.inject_xid(target, xid)
    except UnknownDeviceError as exc:
        raise AdminError(str(exc)) from None


OFF_THE_BUS_XID = 79


def find_gpu(live: LiveInventory, gpu: str) -> PhysicalGpu:
    gpus = live.inventory.node.gpus
    for g in gpus:
        if gpu in (str(g.index), g.uuid):
            return g
    have = f"GPUs 0-{len(gpus) - 1}" if gpus else "no GPUs"
    raise AdminError(f"no GPU with index or UUID {gpu!r}: this node has {have} (give a GPU, not a MIG device)")


def off_bus(live: LiveInventory, gpu: str) -> list[str]:
    """XID 79 (fallen off the bus) on a whole GPU: it, every replica and every MIG device unhealthy."""
    return inject_xid(live, find_gpu(live, gpu).uuid, OFF_THE_BUS_XID)


def inject_fault(
    plan: FaultPlan,
    *,
    rpcs: Sequence[str],
    scopes: Sequence[str],
    method: str,
    times: int,
    code: str | None,
    message: str,
    delay: float,
    resource: str | None,
) -> dict[str, Any]:
    """Plan a fault for an RPC this daemon serves, scoped to one of its resources (or drivers)."""
    if method not in rpcs:
        raise AdminError(f"this daemon does not serve {method!r}; faults can be injected into: {', '.join(rpcs)}")
    if resource is not None and resource not in scopes:
        raise AdminError(f"unknown resource {resource!r}; this daemon serves: {', '.join(scopes) or 'nothing'}")
    try:
        fault = plan.inject(method, times=times, code=code, message=message, delay=delay, resource=resource)
    except FaultError as exc:
        raise AdminError(str(exc)) from None
    return {
        "method": fault.method,
        "times": fault.remaining,
        "code": fault.code,
        "message": fault.message if fault.code else "",
        "delay": fault.delay,
        "resource": fault.resource,
    }


def clear_faults(plan: FaultPlan, rpcs: Sequence[str], method: str | None) -> int:
    if method is not None and method not in rpcs:
        raise AdminError(f"this daemon does not serve {method!r}; faults can be injected into: {', '.join(rpcs)}")
    return plan.clear(method)


def fault_ops(plan: FaultPlan, rpcs: Sequence[str], scopes: Callable[[], Sequence[str]]) -> dict[str, Op]:
    """The ``fault`` and ``clear-faults`` ops of a daemon serving ``rpcs`` for the resources (or driver)
    ``scopes()`` names; both daemons use these."""

    async def fault(
        method: str,
        times: int = 1,
        code: str | None = None,
        message: str = "",
        delay: float = 0.0,
        resource: str | None = None,
    ) -> dict[str, Any]:
        return inject_fault(
            plan,
            rpcs=rpcs,
            scopes=scopes(),
            method=method,
            times=times,
            code=code,
            message=message,
            delay=delay,
            resource=resource,
        )

    async def clear_faults_op(method: str | None = None) -> int:
        return clear_faults(plan, rpcs, method)

    return {"fault": fault, "clear-faults": clear_faults_op}


def fault_status(plan: FaultPlan) -> dict[str, Any]:
    """Pending and fired faults, for status."""
    return {
        "pending": [
            {
                "method": f.method,
                "remaining": f.remaining,
                "code": f.code,
                "message": f.message if f.code else "",
                "delay": f.delay,
                "resource": f.resource,
            }
            for f in plan.faults
        ],
        "fired": [{"method": m, "what": what} for m, what in plan.fired],
    }


def gpu_status(live: LiveInventory) -> list[dict[str, Any]]:
    """Every physical GPU with its health as both faces see it."""
    unhealthy = live.unhealthy()
    return [
        {
            "index": g.index,
            "uuid": g.uuid,
            "model": g.model.product_name,
            "healthy": g.uuid not in unhealthy,
            "xid": unhealthy.get(g.uuid),
            "mig_devices": len(g.mig_devices),
        }
        for g in live.inventory.node.gpus
    ]
