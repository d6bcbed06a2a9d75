"""The kubelet device manager's checkpoint file, ``kubelet_internal_checkpoint``, byte-compatible with a real kubelet.

A real kubelet reads this file on start to restore pod -> device allocations and refuses it
("checkpoint is corrupted") unless the ``Checksum`` matches, so the emulator must write the same
JSON and compute the same checksum. Sources (kubernetes/kubernetes):
``pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go``, ``pkg/kubelet/checkpointmanager/checksum``,
``k8s.io/utils/dump.ForHash`` and davecgh/go-spew ``spew/format.go``.

The checksum is ``fnv32a(spew.Sprintf("%#v", cp.Data))`` where ``cp.Data`` is the *value* of the
unexported Go struct ``checkpoint.checkpointData`` (``BootID`` and ``Checksum`` are outside it), with
spew's ``SortKeys``/``DisableMethods`` config. For a checkpoint a real kubelet wrote that renders as::

    (checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)<uid>
    ContainerName:(string)c ResourceName:(string)example.com/gpu DeviceIDs:(checkpoint.DevicesPerNUMA)map[0:[id]]
    AllocResp:([]uint8)[10 66 ...]}] RegisteredDevices:(map[string][]string)map[a:[x y] b:[]]}

(on one line). spew rules used: a value's Go type is printed in parentheses unless it is a slice element
or a map key/value; struct fields print as ``Name:value`` separated by spaces; slices (``[]uint8`` too)
as ``[e1 e2]`` with decimal bytes; maps as ``map[k:v k:v]`` with keys sorted (ints numerically, strings
bytewise); strings unquoted; nil slices and nil maps as ``<nil>``, empty ones as ``[]`` / ``map[]``.
Go distinguishes nil from empty, JSON ``null`` from ``[]``/``{}``/``""``, so loading hashes the JSON as
parsed; the public dataclasses do not keep that distinction and are hashed like the kubelet's in-memory
state (no entries -> nil slice, every other list/map/bytes non-nil).
"""

import base64
import binascii
import json
import pathlib
import re
from dataclasses import dataclass
from typing import Any, Final

from fakegpu.runtime.atomic_files import atomic_write

CHECKPOINT_NAME: Final = "kubelet_internal_checkpoint"

# errors.ErrCorruptCheckpoint in pkg/kubelet/checkpointmanager/errors.
_CORRUPT: Final = "checkpoint is corrupted"

_FNV32_OFFSET: Final = 0x811C9DC5
_FNV32_PRIME: Final = 0x01000193
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_UINT64_MAX: Final = 2**64 - 1
# strconv.ParseInt syntax, which encoding/json uses for integer map keys.
_INT_KEY: Final = re.compile(r"[+-]?[0-9]+")


class CheckpointError(ValueError):
    """The checkpoint cannot be used; the message names the file so an operator can find and remove it."""


@dataclass(frozen=True)
class PodDevicesEntry:
    """One container's allocation of one resource (Go ``checkpoint.PodDevicesEntry``)."""

    pod_uid: str
    container_name: str
    resource_name: str
    # NUMA node id -> device ids; -1 when the devices have no topology.
    device_ids: dict[int, list[str]]
    # Serialized ContainerAllocateResponse the plugin returned, replayed by the kubelet after a restart.
    alloc_resp: bytes


@dataclass(frozen=True)
class CheckpointData:
    """Everything the checkpoint stores (Go ``checkpoint.checkpointData`` plus the unhashed ``BootID``)."""

    pod_device_entries: list[PodDevicesEntry]
    # Healthy devices per resource; an empty list keeps a resource whose plugin is gone.
    registered_devices: dict[str, list[str]]
    # Kernel boot id (newer kubelets, ``omitempty``); outside the checksummed data, "" when absent.
    boot_id: str = ""


# --- Go value model: None stands for a nil slice/map, which Go hashes differently from an empty one. ---


@dataclass(frozen=True)
class _GoEntry:
    pod_uid: str
    container_name: str
    resource_name: str
    device_ids: dict[int, list[str] | None] | None
    alloc_resp: bytes | None


@dataclass(frozen=True)
class _GoData:
    entries: list[_GoEntry] | None
    registered: dict[str, list[str] | None] | None


def _go_string(text: str) -> str:
    """Replace lone surrogates with U+FFFD, as Go's JSON decoder does, so the string is valid UTF-8."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _spew_list(items: list[str] | None) -> str:
    return "<nil>" if items is None else "[" + " ".join(items) + "]"


def _spew_data(data: _GoData) -> str:
    """Render ``data`` like ``spew.ConfigState{SortKeys: true, DisableMethods: true}.Sprintf("%#v", ...)``."""
    out: list[str] = ["(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)"]
    if data.entries is None:
        out.append("<nil>")
    else:
        rendered: list[str] = []
        for e in data.entries:
            if e.device_ids is None:
                devs = "<nil>"
            else:
                devs = "map[" + " ".join(f"{k}:{_spew_list(e.device_ids[k])}" for k in sorted(e.device_ids)) + "]"
            alloc = "<nil>" if e.alloc_resp is None else "[" + " ".join(str(b) for b in e.alloc_resp) + "]"
            rendered.append(
                f"{{PodUID:(string){e.pod_uid} ContainerName:(string){e.container_name}"
                f" ResourceName:(string){e.resource_name} DeviceIDs:(checkpoint.DevicesPerNUMA){devs}"
                f" AllocResp:([]uint8){alloc}}}"
            )
        out.append("[" + " ".join(rendered) + "]")
    out.append(" RegisteredDevices:(map[string][]string)")
    if data.registered is None:
        out.append("<nil>")
    else:
        # Go compares strings bytewise; UTF-8 byte order equals code point order.
        reg = data.registered
        out.append("map[" + " ".join(f"{k}:{_spew_list(reg[k])}" for k in sorted(reg)) + "]")
    out.append("}")
    return "".join(out)


def _fnv32a(blob: bytes) -> int:
    h = _FNV32_OFFSET
    for byte in blob:
        h = ((h ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return h


def _go_checksum(data: _GoData) -> int:
    return _fnv32a(_spew_data(data).encode("utf-8"))


def _to_go(data: CheckpointData) -> _GoData:
    """Model the kubelet's in-memory data: ``toCheckpointData`` leaves the entry slice nil when empty."""
    entries = [
        _GoEntry(
            _go_string(e.pod_uid),
            _go_string(e.container_name),
            _go_string(e.resource_name),
            {int(k): [_go_string(d) for d in v] for k, v in e.device_ids.items()},
            bytes(e.alloc_resp),
        )
        for e in data.pod_device_entries
    ]
    registered: dict[str, list[str] | None] = {
        _go_string(k): [_go_string(d) for d in v] for k, v in data.registered_devices.items()
    }
    return _GoData(entries or None, registered)


def _from_go(data: _GoData, boot_id: str) -> CheckpointData:
    entries = [
        PodDevicesEntry(
            pod_uid=e.pod_uid,
            container_name=e.container_name,
            resource_name=e.resource_name,
            device_ids={k: list(v or []) for k, v in (e.device_ids or {}).items()},
            alloc_resp=e.alloc_resp or b"",
        )
        for e in data.entries or []
    ]
    registered = {k: list(v or []) for k, v in (data.registered or {}).items()}
    return CheckpointData(pod_device_entries=entries, registered_devices=registered, boot_id=boot_id)


def checksum(data: CheckpointData) -> int:
    """The ``Checksum`` a real kubelet computes for this data (FNV-32a over spew's ``%#v`` rendering)."""
    return _go_checksum(_to_go(data))


# --- JSON ---------------------------------------------------------------------------------------------


def _go_json(value: Any) -> str:
    """Compact JSON as Go's ``encoding/json`` writes it (HTML-safe escapes, no spaces)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    # These characters only occur inside string literals, so replacing them in the whole text is safe.
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028")):
        text = text.replace(char, escaped)
    return text.replace("\u2029", "\\u2029")


def _json_list(items: list[str] | None) -> list[str] | None:
    return None if items is None else list(items)


def _json_bytes(blob: bytes | None) -> str | None:
    return None if blob is None else base64.b64encode(blob).decode("ascii")


def dumps(data: CheckpointData) -> str:
    """Serialize exactly as the kubelet's ``json.Marshal(Data)``, checksum included, so a kubelet accepts it."""
    go = _to_go(data)
    entries: list[dict[str, Any]] | None = None
    if go.entries is not None:
        entries = [
            {
                "PodUID": e.pod_uid,
                "ContainerName": e.container_name,
                "ResourceName": e.resource_name,
                # Go converts int64 map keys to decimal strings and sorts them as strings.
                "DeviceIDs": None
                if e.device_ids is None
                else {str(k): _json_list(e.device_ids[k]) for k in sorted(e.device_ids, key=str)},
                "AllocResp": _json_bytes(e.alloc_resp),
            }
            for e in go.entries
        ]
    registered = None if go.registered is None else {k: _json_list(go.registered[k]) for k in sorted(go.registered)}
    doc: dict[str, Any] = {
        "Data": {"PodDeviceEntries": entries, "RegisteredDevices": registered},
        "Checksum": _go_checksum(go),
    }
    if data.boot_id:
        doc["BootID"] = _go_string(data.boot_id)
    return _go_json(doc)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")


class _Parser:
    """Validates the parsed JSON into the Go value model, with errors that say where the problem is."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, what: str) -> CheckpointError:
        return CheckpointError(f"{_CORRUPT}: {self.source}: {what}")

    def obj(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"{where} must be a JSON object")
        return value

    def field(self, obj: dict[str, Any], name: str, where: str) -> Any:
        if name not in obj:
            raise self.fail(f"missing field {where}.{name}")
        return obj[name]

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise self.fail(f"{where} must be a string")
        return _go_string(value)

    def strings(self, value: Any, where: str) -> list[str] | None:
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.fail(f"{where} must be a list of strings or null")
        return [self.string(item, f"{where}[{i}]") for i, item in enumerate(value)]

    def device_ids(self, value: Any, where: str) -> dict[int, list[str] | None] | None:
        if value is None:
            return None
        if isinstance(value, list):
            raise self.fail(f"{where} is a list: old v1 checkpoint format (no NUMA keys) is not supported")
        result: dict[int, list[str] | None] = {}
        for key, ids in self.obj(value, where).items():
            numa = int(key) if _INT_KEY.fullmatch(key) else None
            if numa is None or not _INT64_MIN <= numa <= _INT64_MAX:
                raise self.fail(f"{where} key {key!r} is not a NUMA node id (int64)")
            result[numa] = self.strings(ids, f"{where}[{key!r}]")
        return result

    def alloc_resp(self, value: Any, where: str) -> bytes | None:
        if value is None:
            return None
        text = self.string(value, where)
        try:
            # encoding/json decodes []byte with base64.StdEncoding, which skips \r and \n.
            return base64.b64decode(text.replace("\r", "").replace("\n", ""), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise self.fail(f"{where} is not valid base64: {exc}") from exc

    def entry(self, value: Any, where: str) -> _GoEntry:
        obj = self.obj(value, where)
        return _GoEntry(
            pod_uid=self.string(self.field(obj, "PodUID", where), f"{where}.PodUID"),
            container_name=self.string(self.field(obj, "ContainerName", where), f"{where}.ContainerName"),
            resource_name=self.string(self.field(obj, "ResourceName", where), f"{where}.ResourceName"),
            device_ids=self.device_ids(self.field(obj, "DeviceIDs", where), f"{where}.DeviceIDs"),
            alloc_resp=self.alloc_resp(self.field(obj, "AllocResp", where), f"{where}.AllocResp"),
        )

    def data(self, value: Any) -> _GoData:
        obj = self.obj(value, "Data")
        raw_entries = self.field(obj, "PodDeviceEntries", "Data")
        entries: list[_GoEntry] | None = None
        if raw_entries is not None:
            if not isinstance(raw_entries, list):
                raise self.fail("Data.PodDeviceEntries must be a list or null")
            entries = [self.entry(e, f"Data.PodDeviceEntries[{i}]") for i, e in enumerate(raw_entries)]
        raw_registered = self.field(obj, "RegisteredDevices", "Data")
        registered: dict[str, list[str] | None] | None = None
        if raw_registered is not None:
            registered = {
                _go_string(k): self.strings(v, f"Data.RegisteredDevices[{k!r}]")
                for k, v in self.obj(raw_registered, "Data.RegisteredDevices").items()
            }
        return _GoData(entries, registered)


def loads(text: str, source: str) -> CheckpointData:
    """Parse checkpoint JSON and verify its checksum like the kubelet; ``source`` names the file in errors."""
    parser = _Parser(source)
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise parser.fail(f"invalid JSON: {exc}") from exc
    top = parser.obj(doc, "checkpoint")
    go = parser.data(parser.field(top, "Data", "checkpoint"))
    stored = parser.field(top, "Checksum", "checkpoint")
    if isinstance(stored, bool) or not isinstance(stored, int) or not 0 <= stored <= _UINT64_MAX:
        raise parser.fail("Checksum must be an unsigned integer")
    boot_id = top.get("BootID")
    boot_id = "" if boot_id is None else parser.string(boot_id, "BootID")
    actual = _go_checksum(go)
    if stored != actual:
        raise parser.fail(f"checksum mismatch: file says {stored}, content hashes to {actual}")
    return _from_go(go, boot_id)


# --- files --------------------------------------------------------------------------------------------


def write_atomically(path: pathlib.Path, data: CheckpointData) -> None:
    """Write via a 0600 temp file in the same directory + fsync + rename, so readers never see a torn file."""
    atomic_write(path, dumps(data).encode("utf-8"), 0o600)


def read(path: pathlib.Path) -> CheckpointData | None:
    """Load and verify the checkpoint; ``None`` when there is none (the kubelet then treats the node as new)."""
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    # Go's JSON decoder replaces invalid UTF-8 inside strings with U+FFFD.
    return loads(blob.decode("utf-8", "replace"), str(path))
