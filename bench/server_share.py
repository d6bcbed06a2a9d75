"""What the API server side spent over a benchmark phase, read where it can be read, and named by where.

A benchmark against a real cluster can say what the client cost; what the server paid tells whether the
client or the server sets the pace. Two sources, tried in order:

- the control-plane processes of this machine (``kube-apiserver``, ``etcd``, ``kube-scheduler``,
  ``kube-controller-manager``) from /proc: CPU (user + system) and resident memory of each, for a cluster
  running here (kubeadm, kind's node container seen from the host, a host-process control plane);
- the API server's own ``/metrics`` (``process_cpu_seconds_total``, ``process_resident_memory_bytes``),
  read with the kubeconfig's credentials, for a server elsewhere (its user needs ``get`` on ``/metrics``).

A reading that neither gives is reported as not readable, never guessed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig

from tests.reliability.process_probe import rss_bytes

CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager")


@dataclass(frozen=True)
class ProcessReading:
    cpu: float
    """seconds of CPU, user + system"""
    rss_mib: float


@dataclass(frozen=True)
class ServerReading:
    source: str
    """where the figures came from, as the report prints it"""
    processes: dict[str, ProcessReading]


def _proc_reading(pid: str) -> ProcessReading | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        rss = rss_bytes(int(pid))
    except OSError:
        return None
    return ProcessReading((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), rss / 2**20)


def pid_reading(pid: int | None, name: str, source: str) -> ServerReading | None:
    """One known process (the fake API server's), or None when /proc does not tell."""
    reading = _proc_reading(str(pid)) if pid is not None else None
    return ServerReading(source, {name: reading}) if reading is not None else None


def local_control_plane() -> ServerReading | None:
    """The control-plane processes running on this machine, summed per name; None when there are none."""
    found: dict[str, ProcessReading] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if name not in CONTROL_PLANE:
            continue
        reading = _proc_reading(entry.name)
        if reading is not None:
            before = found.get(name, ProcessReading(0.0, 0.0))
            found[name] = ProcessReading(before.cpu + reading.cpu, before.rss_mib + reading.rss_mib)
    return ServerReading("control-plane processes of this machine, /proc", found) if found else None


def server_metrics(kubeconfig: str) -> ServerReading | None:
    """The API server's process figures from its ``/metrics``; None when it cannot be read (no access)."""
    config = KubeConfig.from_file(kubeconfig)
    client = Client(config=config)
    http = client._client._client  # lightkube has no call for /metrics: its HTTP client, its credentials
    try:
        response = http.get("/metrics")
        if response.status_code != 200:
            return None
        values: dict[str, float] = {}
        for line in response.text.splitlines():
            name, _, value = line.partition(" ")
            if name in ("process_cpu_seconds_total", "process_resident_memory_bytes"):
                values[name] = float(value)
    except Exception:
        return None
    finally:
        http.close()
    if len(values) != 2:
        return None
    single = config.get()
    server = single.cluster.server if single is not None else kubeconfig
    reading = ProcessReading(values["process_cpu_seconds_total"], values["process_resident_memory_bytes"] / 2**20)
    return ServerReading(f"{server}/metrics", {"kube-apiserver": reading})


def read_server(kubeconfig: str) -> ServerReading | None:
    return local_control_plane() or server_metrics(kubeconfig)


def share_text(before: ServerReading | None, after: ServerReading | None) -> str:
    """CPU spent per process over the phase, and its RSS before and after; or why there is none."""
    if before is None or after is None:
        return "server share: not readable (no control plane on this machine, no access to /metrics)"
    parts = []
    for name, end in after.processes.items():
        start = before.processes.get(name, ProcessReading(0.0, end.rss_mib))
        parts.append(f"{name} {end.cpu - start.cpu:.1f} s CPU, RSS {start.rss_mib:.0f} -> {end.rss_mib:.0f} MiB")
    return f"server share ({after.source}): " + "; ".join(parts)
