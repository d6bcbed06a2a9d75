"""A node's place on a multi-node NVLink fabric (GB200/GB300 NVL72 racks): its clique and IMEX channels.

On such a node NVML reports, per GPU, the fabric's cluster UUID and the clique (NVLink partition) the
GPU belongs to. NVIDIA's tools join them as ``<clusterUUID>.<cliqueID>``: GPU Feature Discovery writes it
as the ``nvidia.com/gpu.clique`` label (``internal/lm/resource.go``), and the DRA driver's compute-domain
plugin reads the same string (``cmd/compute-domain-kubelet-plugin/nvlib.go``, ``getCliqueID``). IMEX
channels are character devices ``/dev/nvidia-caps-imex-channels/channel<N>`` that the driver creates
on such nodes (2048 of them, ``getImexChannelCount``); a container needs one to share memory over the
fabric with containers on other nodes of its clique.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Final, Literal

from fakegpu.sharing.identifiers import FAKEGPU_NAMESPACE

IMEX_CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"
IMEX_CHANNEL_COUNT = 2048
"""How many channels the driver makes on a fabric node (the DRA driver hard-codes the same number)."""
MAX_CLIQUE_ID = 0x7FFF
"""NVML's clique ID is a 32-bit field; real GB200 racks report small values (a few thousand at most)."""
ZERO_CLUSTER_UUID: Final = "00000000-0000-0000-0000-000000000000"
"""What NVML reports on NVLink-capable GPUs that are not multi-node NVLink capable (no clique)."""

FabricState = Literal["not-supported", "not-started", "in-progress", "completed"]
FABRIC_STATES: Final[dict[str, int]] = {"not-supported": 0, "not-started": 1, "in-progress": 2, "completed": 3}
"""NVML's ``nvmlGpuFabricState_t`` (``GPU_FABRIC_STATE_*``) by the name the node spec uses, with its number."""
FABRIC_SUCCESS: Final = "SUCCESS"

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_CLIQUE = re.compile(rf"^(?P<uuid>{_UUID})\.(?P<id>\d+)$")


def imex_channel_path(channel: int) -> str:
    return f"{IMEX_CHANNEL_DIR}/channel{channel}"


@dataclass(frozen=True)
class NvlinkFabric:
    """Where a node's GPUs sit on the NVLink fabric; every GPU of a node reports the same values."""

    cluster_uuid: str
    clique_id: int
    imex_channels: int = IMEX_CHANNEL_COUNT
    state: FabricState = "completed"
    """NVML's fabric registration state of every GPU of the node (``nvmlGpuFabricInfo_t.state``): anything but
    ``completed`` on a fabric-capable GPU is an NVLink fabric error the compute-domain plugin refuses to
    start on (gate CrashOnNVLinkFabricErrors)."""
    status: str = FABRIC_SUCCESS
    """NVML's return code of the registration once ``completed`` (``nvmlGpuFabricInfo_t.status``), by name
    (``ERROR_UNKNOWN``); anything but ``SUCCESS`` is a registration error."""
    single_node: bool = False
    """The GPUs sit behind this node's own NVSwitches and Fabric Manager (an HGX board in FabricManager
    partition mode), not on a multi-node NVLink domain: a registration still pending there is expected."""

    @property
    def clique(self) -> str:
        """``<clusterUUID>.<cliqueID>``: the label value and the compute-domain clique name."""
        return f"{self.cluster_uuid}.{self.clique_id}"

    @property
    def attached(self) -> bool:
        """go-nvlib's ``IsFabricAttached``: registration completed without error."""
        return self.state == "completed" and self.status == FABRIC_SUCCESS


def parse_clique(value: str, where: str) -> tuple[str, int]:
    """``<clusterUUID>.<cliqueID>`` as NVIDIA writes it; ``where`` names the flag or field in the error."""
    m = _CLIQUE.match(value.strip())
    if not m:
        raise ValueError(
            f"{where}: expected <cluster UUID>.<clique ID> such as "
            f"1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10.1, found {value!r}"
        )
    clique_id = int(m.group("id"))
    if clique_id > MAX_CLIQUE_ID:
        raise ValueError(f"{where}: clique ID must be at most {MAX_CLIQUE_ID}, found {clique_id}")
    return m.group("uuid").lower(), clique_id


def parse_cluster_uuid(value: str) -> str:
    if not re.fullmatch(_UUID, value.strip()):
        raise ValueError(f"expected a UUID such as 1f0e5c2a-7d61-4c1e-9a6b-3e2d8f4b5a10, found {value!r}")
    return value.strip().lower()


def fabric_cluster_uuid(name: str) -> str:
    """A stable cluster UUID for a named NVLink domain (a rack), so a fleet's cliques reproduce."""
    return str(uuid.uuid5(FAKEGPU_NAMESPACE, f"nvlink-domain/{name}"))
