"""``fakegpu kubelet``: the kubelet emulator on its own, with its admin socket for ``fakegpu ctl``.

``--kubelet-dir`` as every other command names the kubelet's root dir; ``--dir``, its old name, still
works (hidden, with one deprecation warning). There is no default dir: the emulator removes every socket
in ``device-plugins/`` as a kubelet does on start, which must never hit a real kubelet's
``/var/lib/kubelet`` by accident.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from fakegpu.kubelet.admin_socket import KUBELET_ADMIN_SOCKET, default_admin_socket
from fakegpu.kubelet.daemon import run_kubelet


def add_kubelet_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``kubelet`` to the ``fakegpu`` subcommands (``sub`` is the subparsers action)."""
    kubelet: argparse.ArgumentParser = sub.add_parser(
        "kubelet",
        help="run the kubelet emulator on its own (with an admin socket for 'fakegpu ctl')",
        description="The kubelet emulator on its own: serves kubelet.sock for device plugins, the pod "
        "resources API, and an admin socket through which 'fakegpu ctl --kubelet-dir DIR' runs pods.",
    )
    kubelet.add_argument(
        "--kubelet-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="the kubelet root dir to serve device-plugins/kubelet.sock in (required; never defaults to "
        "/var/lib/kubelet, whose sockets a start removes)",
    )
    kubelet.add_argument("--dir", dest="deprecated_dir", type=Path, default=None, help=argparse.SUPPRESS)
    kubelet.add_argument(
        "--grace-period",
        type=float,
        default=300.0,
        help="seconds before a vanished plugin's resource is dropped (default %(default)s)",
    )
    kubelet.add_argument(
        "--admin-socket",
        default=None,
        metavar="PATH",
        help=f"the owner-only admin socket for 'fakegpu ctl' (default KUBELET_DIR/{KUBELET_ADMIN_SOCKET}; '' for none)",
    )
    return kubelet


def kubelet_dir(args: argparse.Namespace) -> Path:
    """``--kubelet-dir``, or the deprecated ``--dir`` (warned about once); ValueError when neither or
    two different dirs are given."""
    if args.deprecated_dir is not None:
        print("fakegpu: warning: 'fakegpu kubelet --dir' is deprecated; use --kubelet-dir", file=sys.stderr)
        if args.kubelet_dir is not None and args.kubelet_dir != args.deprecated_dir:
            raise ValueError(
                f"--dir {args.deprecated_dir} and --kubelet-dir {args.kubelet_dir} disagree; give --kubelet-dir only"
            )
        return Path(args.deprecated_dir)
    if args.kubelet_dir is None:
        raise ValueError(
            "fakegpu kubelet needs --kubelet-dir DIR (the kubelet root dir to serve in); see 'fakegpu kubelet --help'"
        )
    return Path(args.kubelet_dir)


def admin_socket(args: argparse.Namespace, root: Path) -> Path | None:
    if args.admin_socket is None:
        return default_admin_socket(root)
    return Path(args.admin_socket) if args.admin_socket else None


def run_kubelet_command(args: argparse.Namespace) -> int:
    root = kubelet_dir(args)
    return asyncio.run(run_kubelet(root, args.grace_period, admin_socket=admin_socket(args, root)))
