"""``fakegpu nvidia-smi [inventory options | --devices-file F] [nvidia-smi options]``.

Prints what the fake ``nvidia-smi`` prints for a node (the same renderer the injected script is checked
against), to look at a node without a cluster or to run inside an image that has fakegpu. Devices come
from ``FAKEGPU_VISIBLE_DEVICES``, else ``NVIDIA_VISIBLE_DEVICES``, as in a container, but all of them when
neither is set (the injected script shows none then). It never installs anything: the host's real
``nvidia-smi``, if any, stays untouched. Inventory options describe a node as it starts, without faults; a
running daemon's faults (ECC errors, clocks, a GPU off the bus) are in the devices.json it keeps current under
``--nvidia-smi-dir``, so ``--devices-file <dir>/devices.json`` shows what its containers' nvidia-smi shows.

Also the daemons' ``--inject-nvidia-smi`` / ``--nvidia-smi-dir`` flags (``apply_inject_flags``): the
directory must be absolute and never one on the host's PATH, so the script is never found as
``nvidia-smi`` on the host.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import posixpath
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from fakegpu.cli.inventory_options import add_inventory_options, inventory_inputs
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.telemetry.nvidia_smi import query
from fakegpu.telemetry.nvidia_smi.command import SUBCOMMANDS, run, timestamp_now
from fakegpu.telemetry.nvidia_smi.devices import SmiNode, from_inventory, from_json, visible_devices
from fakegpu.telemetry.nvidia_smi.injection import DEFAULT_DRA_DIR, DEFAULT_PLUGIN_DIR, DEVICES_FILE_ENV
from fakegpu.telemetry.nvidia_smi.shell_script import QUERY_TIME_OVERRIDE_ENV, TIME_OVERRIDE_ENV

EXIT_USAGE = 2
_INVENTORY_CHOICES = ("node_spec", "gpus", "mig_config", "mig_layout")
DEFAULT_DIRS: Final = {"plugin": DEFAULT_PLUGIN_DIR, "dra": DEFAULT_DRA_DIR}
"""``--nvidia-smi-dir`` when not given, per daemon (one directory each, so they never overwrite each other)."""
HOST_PATH_DIRS: Final = (
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
    "/usr/games",
    "/usr/local/games",
    "/snap/bin",
    "/usr/local/nvidia/bin",
    "/home/kubernetes/bin/nvidia/bin",
)
"""Directories on a node's PATH (distribution defaults, and where GKE and the GPU operator put the real
nvidia-smi); ``$PATH`` of the daemon is refused as well."""


class _SmiOption(argparse.Action):
    """Collects nvidia-smi's own options in command-line order, as nvidia-smi reads them."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        argv: list[str] = list(getattr(namespace, self.dest, None) or [])
        if option_string is not None:
            argv.append(option_string)
        if isinstance(values, str):
            argv.append(values)
        setattr(namespace, self.dest, argv)


def add_nvidia_smi_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``nvidia-smi`` to the ``fakegpu`` subcommands (``sub`` is the subparsers action)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "nvidia-smi",
        help="print what the fake nvidia-smi shows for a node (table, -L, --query-gpu, -q, topo -m, mig -lgi...)",
        description="Print what the fake nvidia-smi injected into containers shows, for the devices in "
        "FAKEGPU_VISIBLE_DEVICES, else NVIDIA_VISIBLE_DEVICES (all when neither is set). Nothing is "
        "installed on the host.",
        allow_abbrev=False,
    )
    add_inventory_options(parser)
    parser.add_argument(
        "--devices-file",
        metavar="FILE",
        help=f"render from a devices.json instead of the inventory options (default ${DEVICES_FILE_ENV} when "
        "no node is described by options); a running daemon's <--nvidia-smi-dir>/devices.json shows its faults",
    )
    smi = parser.add_argument_group("nvidia-smi options")
    smi.add_argument(
        "smi_argv",
        nargs="?",
        choices=SUBCOMMANDS,
        action=_SmiOption,
        metavar="{topo,mig}",
        help="nvidia-smi's subcommand, before its options: topo -m, mig -lgip|-lgi|-lci [-i ID]",
    )
    flags = {
        ("-L", "--list-gpus"): "list the GPUs and their MIG devices",
        ("-q", "--query"): "show GPU details (a subset of the real report)",
        ("--version",): "show the driver, NVML and CUDA versions",
        ("-m", "--matrix"): "topo: the GPU-to-GPU topology matrix",
        ("-lgip", "--list-gpu-instance-profiles"): "mig: the GPU-instance profiles",
        ("-lgi", "--list-gpu-instances"): "mig: the GPU instances",
        ("-lci", "--list-compute-instances"): "mig: the compute instances",
    }
    for names, text in flags.items():
        smi.add_argument(*names, dest="smi_argv", action=_SmiOption, nargs=0, default=[], help=text)
    smi.add_argument(
        "-i", "--id", dest="smi_argv", action=_SmiOption, metavar="ID", help="only these GPUs: index, UUID, bus ID"
    )
    smi.add_argument(
        "--query-gpu", dest="smi_argv", action=_SmiOption, metavar="FIELDS", help="fields, e.g. index,name,memory.total"
    )
    smi.add_argument("--format", dest="smi_argv", action=_SmiOption, metavar="FORMAT", help="csv[,noheader][,nounits]")
    return parser


def _node(args: argparse.Namespace, env: Mapping[str, str]) -> SmiNode:
    described = [name for name in _INVENTORY_CHOICES if getattr(args, name)]
    path = args.devices_file
    if path and described:
        raise SpecError("--devices-file", f"cannot be combined with --{described[0].replace('_', '-')}")
    if not path and not described:
        path = env.get(DEVICES_FILE_ENV) or None
    if path:
        data = _read_devices_file(path)
        try:
            return from_json(data, path)
        except ValueError as exc:
            raise SpecError(path, str(exc)) from None
    return from_inventory(load_inventory(inventory_inputs(args, env)))


DEVICES_FILE_READS: Final = 5
"""A running daemon rewrites its devices.json in place (``fakegpu.telemetry.nvidia_smi_files``): a read that
straddles a rewrite does not parse, and the next one does."""


def _read_devices_file(path: str) -> Any:
    error: json.JSONDecodeError | None = None
    for _ in range(DEVICES_FILE_READS):
        try:
            return json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise SpecError(path, f"cannot read the devices file: {exc}") from None
        except json.JSONDecodeError as exc:
            error = exc
    raise SpecError(path, f"cannot read the devices file: {error}")


def run_nvidia_smi_command(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    environ = dict(os.environ if env is None else env)
    try:
        node = _node(args, environ)
    except SpecError as exc:
        print(f"fakegpu: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    visible = visible_devices(environ, os.listdir, unset=None)
    timestamp = environ.get(TIME_OVERRIDE_ENV) or timestamp_now()
    query_timestamp = environ.get(QUERY_TIME_OVERRIDE_ENV) or query.timestamp_now()
    result = run(args.smi_argv or [], node, visible, timestamp, query_timestamp)
    sys.stdout.write(result.stdout)
    return result.status


# --- the daemons' --inject-nvidia-smi ------------------------------------------------------------------


def add_inject_options(parser: argparse.ArgumentParser, command: str) -> None:
    """``--inject-nvidia-smi`` and ``--nvidia-smi-dir`` on the ``plugin`` or ``dra`` subcommand."""
    parser.add_argument(
        "--inject-nvidia-smi",
        action="store_true",
        help="mount a fake nvidia-smi at /usr/bin/nvidia-smi (and devices.json at /run/fakegpu/devices.json) "
        "into every container given a GPU; never installed as nvidia-smi on the host",
    )
    parser.add_argument(
        "--nvidia-smi-dir",
        type=Path,
        default=None,
        help="absolute host directory of those files, the same path for the daemon and the container runtime; "
        f"never a directory on the host's PATH; only with --inject-nvidia-smi (default {DEFAULT_DIRS[command]})",
    )


def _path_dirs(path_env: str | None) -> set[str]:
    dirs = set(HOST_PATH_DIRS)
    dirs.update(d for d in (path_env or "").split(os.pathsep) if posixpath.isabs(d))
    out: set[str] = set()
    for d in dirs:
        out.add(posixpath.normpath(d))
        out.add(os.path.realpath(d))
    return out


def check_nvidia_smi_dir(directory: str, path_env: str | None = None) -> str:
    """``directory`` normalized, or SpecError: it must be absolute (the container runtime resolves it on
    the host, whatever the daemon's working directory) and on no PATH, where the script would be found
    as the host's ``nvidia-smi``."""
    where = "--nvidia-smi-dir"
    if not posixpath.isabs(directory):
        raise SpecError(where, f"{directory!r} is not an absolute path (the container runtime resolves it on the host)")
    normalized = posixpath.normpath(directory)
    refused = _path_dirs(path_env)
    if normalized in refused or os.path.realpath(normalized) in refused:
        raise SpecError(
            where,
            f"{directory} is on the host's PATH, where the fake script would be run as the host's nvidia-smi; "
            f"use a directory of its own, such as the default under {posixpath.dirname(DEFAULT_PLUGIN_DIR)}/",
        )
    return normalized


def apply_inject_flags(
    args: argparse.Namespace, inputs: InventoryInputs, path_env: str | None = None
) -> InventoryInputs:
    """What the ``plugin`` and ``dra`` subcommands make of ``--inject-nvidia-smi`` / ``--nvidia-smi-dir``:
    ``inputs`` with the checked directory, unchanged without injection; SpecError for a directory given
    without ``--inject-nvidia-smi`` or refused by ``check_nvidia_smi_dir``. ``path_env`` defaults to $PATH."""
    if args.command not in DEFAULT_DIRS:
        return inputs
    given: Path | None = args.nvidia_smi_dir
    if not args.inject_nvidia_smi:
        if given is not None:
            raise SpecError("--nvidia-smi-dir", "has no effect without --inject-nvidia-smi")
        return inputs
    path = os.environ.get("PATH") if path_env is None else path_env
    directory = check_nvidia_smi_dir(str(given) if given is not None else DEFAULT_DIRS[args.command], path)
    return dataclasses.replace(inputs, nvidia_smi_dir=directory)
