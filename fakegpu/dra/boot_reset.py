"""At start: the checkpoint's claims belong to this boot of the node, or they are forgotten.

Follows kubernetes-sigs/dra-driver-nvidia-gpu ``cmd/gpu-kubelet-plugin/device_state.go``
(``NewDeviceState``, since PR #1066 in v0.4.0) and ``checkpointv.go`` (``CheckpointV2.NodeBootID``); PR #1066
gave ``cmd/compute-domain-kubelet-plugin/device_state.go`` the same check with the same texts, so both of
fakegpu's kubelet plugins call this module (``fakegpu.dra.gpu_prepare``,
``fakegpu.dra.compute_domain.domain_prepare``):

* no checkpoint yet: write an empty one with the current boot ID ("Create empty checkpoint");
* a checkpoint without a boot ID (written before boot IDs): keep its claims and inject the current ID
  (logged at NVIDIA's verbosity 4, here DEBUG);
* the same boot ID: keep everything (a restart of the plugin, not of the node);
* another boot ID: the node rebooted and nothing prepare did survived; log
  ``Invalidating checkpoint: checkpoint nodeBootID "<old>" != current "<new>"`` and
  ``Create empty checkpoint``, and start from an empty checkpoint, so the kubelet's next
  NodePrepareResources prepares each claim again instead of being told it is done.

NVIDIA only rewrites the file: after a real reboot the CDI specs were on a tmpfs and are gone. A fake
node's "reboot" (a new boot ID, the files still there) would leave them behind, so the caller removes the
forgotten claims' CDI specs and MPS directories too, which is what a real reboot leaves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from fakegpu.dra.prepared_claims import PreparedClaim, PreparedClaims
from fakegpu.runtime.boot_id import BootIdUnreadable, read_boot_id
from fakegpu.sharing.go_quote import go_quote

log = logging.getLogger(__name__)


def claims_of_other_boot(checkpoint: PreparedClaims, boot_id: str) -> list[PreparedClaim]:
    """Bring the checkpoint to this boot; returns the claims it forgot (those of a previous boot).

    Raises ``CheckpointCorrupted`` or ``OSError`` when the file cannot be read or written.
    """
    exists = checkpoint.path.exists()
    stored = checkpoint.node_boot_id
    if exists and not stored:
        log.debug("The existing checkpoint file does not contain a boot ID, injecting current boot ID")
        return checkpoint.for_boot(boot_id, keep=True)
    if exists and stored == boot_id:
        return []
    if exists:
        old, new = go_quote(stored), go_quote(boot_id)
        log.info("Invalidating checkpoint: checkpoint nodeBootID %s != current %s", old, new)
    log.info("Create empty checkpoint")
    return checkpoint.for_boot(boot_id, keep=False)


def forget_previous_boot(
    checkpoint: PreparedClaims, boot_id_path: Path, remove: Callable[[PreparedClaim], None]
) -> list[PreparedClaim]:
    """``claims_of_other_boot`` with the boot ID read from ``boot_id_path``, then ``remove`` for each claim
    forgotten. NVIDIA's plugin does not start without a boot ID; fakegpu, which also runs where there is no
    ``/proc`` (a laptop), logs NVIDIA's error and keeps the claims unchecked."""
    try:
        boot_id = read_boot_id(boot_id_path)
    except BootIdUnreadable as exc:
        log.error("%s; keeping the checkpoint's claims without a boot check", exc)
        return []
    forgotten = claims_of_other_boot(checkpoint, boot_id)
    for claim in forgotten:
        remove(claim)
    return forgotten
