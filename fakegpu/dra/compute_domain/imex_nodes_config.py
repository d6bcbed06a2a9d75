"""The IMEX daemon's nodes config (``/imexd/nodes.cfg``) and its peer names, as NVIDIA's compute-domain daemon
writes them, under either setting of the gate ``IMEXDaemonsWithDNSNames`` (beta, on by default).

Follows ``cmd/compute-domain-daemon/main.go`` (``writeDaemonsConfig``, ``IMEXDaemonUpdateLoopWithIPs``,
``IMEXDaemonUpdateLoopWithDNSNames``) and ``dnsnames.go`` of kubernetes-sigs/dra-driver-nvidia-gpu at commit
0807eed (the same at v0.4.0):

* gate on: ``nodes.cfg`` is static, the names ``compute-domain-daemon-0000`` ... one per possible member of
  the IMEX domain (``--max-nodes-per-imex-domain``, 18), and each daemon maps the names of its clique's
  members (by their ``index``) to their IPs in ``/etc/hosts``; a member joining or leaving changes only the
  hosts lines, never the nodes config;
* gate off: ``nodes.cfg`` lists the IP of every daemon of the clique, written (and the IMEX daemon
  restarted) only once all ``numNodes`` daemons joined.

fakegpu runs no daemon container, so the emulated daemon writes both files into the domain's directory on
the node (``<plugin dir>/domains/<domain UID>``, the directory NVIDIA mounts at ``/imexd``): ``nodes.cfg`` and
``hosts`` (the lines the daemon would add to its container's ``/etc/hosts``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from fakegpu.runtime.atomic_files import atomic_write
from fakegpu.runtime.directories import ensure_dir

DNS_NAME_PREFIX: Final = "compute-domain-daemon-"
MAX_NODES_PER_IMEX_DOMAIN: Final = 18
"""NVIDIA's ``defaultMaxNodesPerIMEXDomain``: an NVL72 rack's 18 compute trays."""
NODES_CONFIG: Final = "nodes.cfg"
HOSTS: Final = "hosts"
HOSTS_HEADER: Final = "# Compute Domain Daemon mappings"


def dns_name(index: int) -> str:
    """``compute-domain-daemon-%04d``."""
    return f"{DNS_NAME_PREFIX}{index:04d}"


def clique_members(daemons: Iterable[Mapping[str, Any]], clique: str) -> list[Mapping[str, Any]]:
    """The daemons of ``clique`` (entries of a ComputeDomainClique or of ``status.nodes``), by index."""
    return sorted((d for d in daemons if d.get("cliqueID") == clique), key=lambda d: int(d.get("index", 0)))


def static_nodes_config(max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN) -> str:
    return "".join(f"{dns_name(i)}\n" for i in range(max_nodes))


def ip_nodes_config(members: Sequence[Mapping[str, Any]]) -> str:
    return "".join(f"{d['ipAddress']}\n" for d in members)


def hosts_lines(members: Sequence[Mapping[str, Any]], max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN) -> str:
    """``<ip>\\t<dns name>`` per member; NVIDIA's errors for an index outside ``0..max_nodes-1``."""
    lines = [HOSTS_HEADER]
    for d in members:
        index = int(d.get("index", -1))
        name = d.get("nodeName") or d.get("name")
        if index < 0:
            raise ValueError(f"daemon {name} has invalid index {index}")
        if index >= max_nodes:
            raise ValueError(f"daemon {name} has invalid index {index}, must be less than {max_nodes}")
        lines.append(f"{d['ipAddress']}\t{dns_name(index)}")
    return "\n".join(lines) + "\n"


def write_imex_config(
    directory: Path,
    members: Sequence[Mapping[str, Any]],
    *,
    dns_names: bool,
    joined: int,
    num_nodes: int,
    max_nodes: int = MAX_NODES_PER_IMEX_DOMAIN,
) -> bool:
    """Write what the daemon would for its clique's ``members``; False when it waits (IPs: fewer than
    ``num_nodes`` daemons ``joined`` the domain, as NVIDIA's daemon counts ``status.nodes``)."""
    ensure_dir(directory)
    if dns_names:
        _write(directory / NODES_CONFIG, static_nodes_config(max_nodes))
        _write(directory / HOSTS, hosts_lines(members, max_nodes))
        return True
    if joined != num_nodes:
        return False
    _write(directory / NODES_CONFIG, ip_nodes_config(members))
    return True


def _write(path: Path, text: str) -> None:
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except FileNotFoundError:
        pass
    atomic_write(path, text.encode("utf-8"), 0o644)
