"""``fakegpu nvidia-smi [inventory options | --devices-file F] [nvidia-smi options]``.

Prints what the fake ``nvidia-smi`` prints for a node (the same renderer the injected script is checked
against), to look at a node without a cluster or to run inside an image that has fakegpu. Devices come
from ``NVIDIA_VISIBLE_DEVICES`` as in a container (all when unset). It never installs anything: the
host's real ``nvidia-smi``, if any, stays untouched.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fakegpu.inventory_options import add_inventory_options, inventory_inputs
from sharing.errors import SpecError
from sharing.inputs import load_inventory
from sharing.nvidia_smi.command import run, timestamp_now
from sharing.nvidia_smi.devices import SmiNode, expand_volume_mounts, from_inventory, from_json
from sharing.nvidia_smi.injection import DEVICES_FILE_ENV
from sharing.nvidia_smi.shell_script import TIME_OVERRIDE_ENV

EXIT_USAGE = 2
_INVENTORY_CHOICES = ("node_spec", "gpus", "mig_config", "mig_layout")


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
        argv.append(option_string or self.option_strings[0])
        if isinstance(values, str):
            argv.append(values)
        setattr(namespace, self.dest, argv)


def add_nvidia_smi_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``nvidia-smi`` to the ``fakegpu`` subcommands (``sub`` is the subparsers action)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "nvidia-smi",
        help="print what the fake nvidia-smi shows for a node (table, -L, --query-gpu, -q)",
        description="Print what the fake nvidia-smi injected into containers shows, for the devices in "
        "NVIDIA_VISIBLE_DEVICES (all when unset). Nothing is installed on the host.",
    )
    add_inventory_options(parser)
    parser.add_argument(
        "--devices-file",
        metavar="FILE",
        help=f"render from a devices.json instead of the inventory options (default ${DEVICES_FILE_ENV} when "
        "no node is described by options)",
    )
    smi = parser.add_argument_group("nvidia-smi options")
    flags = {
        ("-L", "--list-gpus"): "list the GPUs and their MIG devices",
        ("-q", "--query"): "show GPU details (a subset of the real report)",
        ("--version",): "show the driver, NVML and CUDA versions",
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
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise SpecError(path, f"cannot read the devices file: {exc}") from None
        try:
            return from_json(data, path)
        except ValueError as exc:
            raise SpecError(path, str(exc)) from None
    return from_inventory(load_inventory(inventory_inputs(args, env)))


def run_nvidia_smi_command(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    environ = dict(os.environ if env is None else env)
    try:
        node = _node(args, environ)
    except SpecError as exc:
        print(f"fakegpu: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    visible = expand_volume_mounts(environ.get("NVIDIA_VISIBLE_DEVICES"), os.listdir)
    timestamp = environ.get(TIME_OVERRIDE_ENV) or timestamp_now()
    result = run(args.smi_argv or [], node, visible, timestamp)
    sys.stdout.write(result.stdout)
    return result.status
