"""NVIDIA's ``--kubelet-socket`` (env ``KUBELET_SOCKET``) for ``fakegpu plugin``.

NVIDIA v0.20.0 (``cmd/nvidia-device-plugin/main.go``) dials this socket to register and watches its
directory for kubelet restarts; empty means "serve, but do not register". fakegpu serves its plugin
sockets beside the kubelet socket, so a path must be ``<kubelet dir>/device-plugins/kubelet.sock``; it
then stands for ``--kubelet-dir <kubelet dir>``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

from fakegpu.fakeplugin.plugin_manager import RegistrationMode
from fakegpu.runtime.kubelet_paths import DEFAULT_ROOT, KUBELET_SOCKET, KubeletPaths
from fakegpu.sharing.errors import SpecError

ENV = "KUBELET_SOCKET"
DEFAULT_KUBELET_SOCKET = str(KubeletPaths(DEFAULT_ROOT).kubelet_socket)


def add_kubelet_socket_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubelet-socket",
        default=None,
        metavar="PATH",
        help=f"NVIDIA's flag: the kubelet's registration socket, <kubelet dir>/device-plugins/{KUBELET_SOCKET} "
        f"(stands for --kubelet-dir); empty: serve without registering (env {ENV}; default {DEFAULT_KUBELET_SOCKET})",
    )


def kubelet_target(
    kubelet_socket: str | None, kubelet_dir: Path, registration: RegistrationMode, env: Mapping[str, str]
) -> tuple[KubeletPaths, RegistrationMode]:
    """The kubelet paths and registration mode a ``--kubelet-socket`` (flag, else env) asks for."""
    origin = "--kubelet-socket"
    if kubelet_socket is None:
        kubelet_socket, origin = env.get(ENV), f"environment variable {ENV}"
    if kubelet_socket is None:
        return KubeletPaths(kubelet_dir), registration
    if kubelet_socket == "":
        return KubeletPaths(kubelet_dir), "none"
    socket = Path(kubelet_socket)
    if socket.name != KUBELET_SOCKET or socket.parent.name != "device-plugins" or not socket.is_absolute():
        raise SpecError(
            origin,
            f"expected an absolute <kubelet dir>/device-plugins/{KUBELET_SOCKET} (fakegpu serves its plugin "
            f"sockets beside the kubelet's), found {kubelet_socket!r}",
        )
    root = socket.parent.parent
    if kubelet_dir not in (DEFAULT_ROOT, root):
        raise SpecError(origin, f"{kubelet_socket} is not in --kubelet-dir {kubelet_dir}")
    return KubeletPaths(root), registration
