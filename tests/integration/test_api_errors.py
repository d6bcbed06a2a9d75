"""API-server failures name the server and the kubeconfig, and retries show their count and pause (issue 15, §3).

``fakegpu dra`` against an API server that refuses connections used to log ``cannot publish ResourceSlices
yet: [Errno 111] Connection refused; retrying`` for ever: which server, from which kubeconfig, and whether it
backs off were not said. Now each line names the server and the kubeconfig and counts the attempts, with
the pause doubling (``fakegpu.kube.backoff``). The device plugin's node sync says the same.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

import fakegpu.dra.daemon as dra_daemon
from fakegpu.dra.daemon import DraSettings, run_dra_daemon
from fakegpu.kube.client import IN_CLUSTER, ApiTarget, api_failure, api_target, load_config
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.inputs import InventoryInputs
from tests.daemon_tasks import stop_and_wait
from tests.eventually import eventually

ATTEMPT = re.compile(r"publishing ResourceSlices failed \(attempt (\d+), next in ([\d.]+) s\): (.*)")


def refused_server(root: Path) -> tuple[str, Path]:
    """A kubeconfig naming a local port nobody listens on (bound, then closed)."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    probe.close()
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = root / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return url, path


async def test_dra_names_the_server_and_backs_off_with_a_visible_count(
    root: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dra_daemon, "FIRST_PUBLISH_RETRY", 0.05)
    caplog.set_level(logging.ERROR, logger="fakegpu.dra")
    url, kubeconfig = refused_server(root)
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_dra_daemon(
            InventoryInputs(node_name="api-errors", gpus=("1xl4",)),
            KubeletPaths(root / "kubelet"),
            DraSettings(cdi_root=root / "cdi", kubeconfig=str(kubeconfig)),
            stop=stop,
        )
    )

    def attempts() -> list[tuple[int, float, str]]:
        found = (ATTEMPT.fullmatch(r.getMessage()) for r in caplog.records)
        return [(int(m.group(1)), float(m.group(2)), m.group(3)) for m in found if m]

    try:
        await eventually(lambda: len(attempts()) >= 4, "four failed publishing attempts", 10.0)
    finally:
        assert await stop_and_wait(stop, task) == [0]
    seen = attempts()
    assert [n for n, _, _ in seen[:4]] == [1, 2, 3, 4]
    # Doubling from 0.05 s less up to half of jitter: the fourth pause (0.2-0.4 s) exceeds the first (<= 0.05 s).
    assert seen[3][1] > seen[0][1]
    for _, _, error in seen:
        assert error.endswith(f"(API server {url}, kubeconfig {kubeconfig})"), error


def test_the_target_of_a_kubeconfig_and_of_the_in_cluster_config(root: Path) -> None:
    url, kubeconfig = refused_server(root)
    assert api_target(load_config(str(kubeconfig)).get()) == ApiTarget(url, str(kubeconfig))
    in_cluster = load_config(str(kubeconfig)).get()
    assert in_cluster is not None
    assert api_target(in_cluster._replace(fname=None)) == ApiTarget(url, IN_CLUSTER)
    assert api_target(None) is None


def test_a_failure_is_one_line_naming_the_target() -> None:
    target = ApiTarget("https://10.0.0.1:6443", "/home/me/.kube/config")
    assert api_failure(ConnectionRefusedError(111, "Connection refused"), target) == (
        "[Errno 111] Connection refused (API server https://10.0.0.1:6443, kubeconfig /home/me/.kube/config)"
    )
    assert api_failure(TimeoutError(), None) == "TimeoutError"
    assert api_failure("forbidden:\n  nodes is forbidden", target).startswith("forbidden: nodes is forbidden (API")
