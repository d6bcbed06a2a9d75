"""NodePrepareResources / NodeUnprepareResources for this node: read the claim, write CDI, checkpoint.

Prepare is two-phase and idempotent: the checkpoint records PrepareStarted (with the devices about to
be prepared) before the CDI spec is written and PrepareCompleted after, so a crash in between is
found at the next start and rolled back, and a repeated call for a completed claim returns the stored
devices without touching anything. Unprepare of an unknown claim succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from fakegpu.dra.boot_reset import forget_previous_boot
from fakegpu.dra.claim_cdi_specs import cdi_vendor, claim_spec, claim_spec_file_name, remove_spec, write_spec
from fakegpu.dra.claim_reader import ClaimReader, read_claim
from fakegpu.dra.consumable_shares import OFF, ConsumableShares
from fakegpu.dra.device_map import published_devices
from fakegpu.dra.feature_gates import FeatureGates
from fakegpu.dra.metrics import DraMetrics
from fakegpu.dra.mps_control_files import MPS_DIR, create_dirs, remove_dirs
from fakegpu.dra.prepare_plan import PreparedResult, PreparePlan, SharingRefused, prepare_plan
from fakegpu.dra.prepared_claims import CheckpointCorrupted, ClaimRef, PreparedClaim, PreparedClaims
from fakegpu.dra.shared_devices import check_no_overlap, held_by_others, other_holders
from fakegpu.dra.sharing_settings import apply_prepared, reset_unprepared
from fakegpu.runtime.boot_id import BOOT_ID_PATH
from fakegpu.sharing.live_inventory import LiveInventory

log = logging.getLogger(__name__)

PHASE_PAUSE_ENV = "FAKEGPU_TEST_PREPARE_PHASE_PAUSE"
"""Test hook, for the restart soaks only: seconds to stall after PrepareStarted is recorded and again after
the CDI spec is written, so a test can kill the daemon between the checkpoint's two phases on purpose
(the crash window is otherwise microseconds wide). Unset, or 0, in any real deployment."""


def phase_pause_from_env() -> float:
    """``$FAKEGPU_TEST_PREPARE_PHASE_PAUSE`` as seconds (0 when unset); a bad value is logged and ignored."""
    raw = os.environ.get(PHASE_PAUSE_ENV, "")
    if not raw:
        return 0.0
    try:
        pause = float(raw)
    except ValueError:
        pause = -1.0
    if not 0.0 <= pause <= 60.0:
        log.error("ignoring %s=%r: expected seconds between 0 and 60", PHASE_PAUSE_ENV, raw)
        return 0.0
    log.warning("test hook %s: every claim preparation stalls %.3fs between its phases", PHASE_PAUSE_ENV, pause)
    return pause


class GpuClaimPreparer:
    def __init__(
        self,
        reader: ClaimReader,
        live: LiveInventory,
        *,
        driver: str,
        mig_mode: Literal["static", "dynamic"],
        cdi_root: Path,
        checkpoint: PreparedClaims,
        metrics: DraMetrics | None = None,
        gates: FeatureGates | None = None,
        mps_root: Path | None = None,
        shares: ConsumableShares = OFF,
        boot_id_path: Path = BOOT_ID_PATH,
    ) -> None:
        self.metrics = metrics if metrics is not None else DraMetrics()
        self.gates = gates or FeatureGates()
        self.shares = shares
        """``--consumable-shares``: several claims may hold one device (``fakegpu.dra.shared_devices``)."""
        self.reader = reader
        self.live = live
        self.driver = driver
        self.mig_mode = mig_mode
        self.cdi_root = cdi_root
        self.checkpoint = checkpoint
        self.mps_root = mps_root if mps_root is not None else checkpoint.path.parent / MPS_DIR
        """MPS control files, beside the checkpoint in the plugin directory as NVIDIA's."""
        self.boot_id_path = boot_id_path
        """The node's boot ID (``fakegpu.dra.boot_reset``): claims of an earlier boot are forgotten at start."""
        self.prepares = 0
        self.unprepares = 0
        self.phase_pause = phase_pause_from_env()
        self._lock = asyncio.Lock()

    @property
    def pool(self) -> str:
        return self.live.inventory.node.name

    @property
    def _nvidia_smi_dir(self) -> str | None:
        """``--inject-nvidia-smi``: carried in the inventory's config, so a reload keeps it."""
        return self.live.inventory.config.nvidia_smi_dir

    def recover(self) -> list[str]:
        """At start: roll back claims a crash left between PrepareStarted and PrepareCompleted (their
        CDI spec may be half there); the kubelet asks for them again. A checkpoint that cannot be read
        is reported, not fatal: the driver still serves and each prepare then says why it fails."""
        try:
            self.checkpoint.load()
            forget_previous_boot(self.checkpoint, self.boot_id_path, self._remove_claim_files)
            started = self.checkpoint.started_only()
        except (CheckpointCorrupted, OSError, ValueError) as exc:
            log.error("the claim checkpoint cannot be used: %s", exc)
            return []
        rolled_back = []
        for claim in started:
            try:
                self._remove_spec(claim.uid, claim.driver, claim.devices)
            except (ValueError, OSError) as exc:
                log.error("cannot remove the CDI spec of half-prepared claim %s: %s", claim.uid, exc)
            self.checkpoint.remove(claim.uid)
            rolled_back.append(claim.uid)
            log.warning(
                "rolled back claim %s/%s (%s): its preparation never completed", claim.namespace, claim.name, claim.uid
            )
        for claim in self.checkpoint.claims():  # a GPU keeps what they set across a restart of the plugin
            apply_prepared(self.live.gpu_policies, claim.devices)
        return rolled_back

    def _remove_claim_files(self, claim: PreparedClaim) -> None:
        try:
            self._remove_spec(claim.uid, claim.driver, claim.devices)
        except (ValueError, OSError) as exc:
            log.error("cannot remove the CDI spec of claim %s of an earlier boot: %s", claim.uid, exc)

    async def prepare(self, ref: ClaimRef) -> tuple[PreparedResult, ...]:
        async with self._lock:
            stored = self.checkpoint.get(ref.uid)
            if stored is not None and stored.completed:
                self._ensure_spec(ref.uid, stored.plan)
                return stored.devices
        claim = await read_claim(self.reader, ref)
        devices = published_devices(self.live.inventory.node, self.mig_mode)
        node, shares = self.live.inventory.node, self.shares.enabled
        refused: SharingRefused | None = None
        try:
            prep = prepare_plan(claim, self.driver, self.pool, devices, self.gates, node=node, shares=shares)
        except SharingRefused as exc:  # NVIDIA refuses it in applySharingConfig, after the overlap check
            refused = exc
            prep = prepare_plan(
                claim, self.driver, self.pool, devices, self.gates, node=node, shares=shares, refuse_mps=False
            )
        async with self._lock:
            stored = self.checkpoint.get(ref.uid)
            if stored is not None and stored.completed:
                return stored.devices
            check_no_overlap(prep, self.checkpoint.claims(), shares=shares)
            if refused is not None:
                raise refused
            self.checkpoint.start(ref, prep)
            apply_prepared(self.live.gpu_policies, prep.results)
            if self.phase_pause:
                await asyncio.sleep(self.phase_pause)
            if prep.results:
                self._write_spec(ref.uid, prep)
            if self.phase_pause:
                await asyncio.sleep(self.phase_pause)
            self.checkpoint.complete(ref.uid)
            self.prepares += 1
        log.info(
            "prepared claim %s/%s (%s): %s",
            ref.namespace,
            ref.name,
            ref.uid,
            ", ".join(r.device for r in prep.results) or "no devices of this driver",
        )
        return prep.results

    def _ensure_spec(self, uid: str, prep: PreparePlan) -> None:
        """/var/run/cdi is a tmpfs: after a reboot the checkpoint remains but the spec is gone, and the
        runtime would fail with 'unresolvable CDI devices'. Write it again from the checkpoint."""
        if prep.results and not (self.cdi_root / claim_spec_file_name(prep.cdi_vendor, uid)).exists():
            self._write_spec(uid, prep)
            log.warning("re-created the missing CDI spec of prepared claim %s", uid)

    def _write_spec(self, uid: str, prep: PreparePlan) -> None:
        """The MPS directories the spec mounts first, then the spec (NVIDIA starts the daemon before)."""
        for daemon_id in _mps_daemon_ids(prep.results):
            create_dirs(self.mps_root, daemon_id)
        spec = claim_spec(
            prep.cdi_vendor, uid, prep.results, nvidia_smi_dir=self._nvidia_smi_dir, mps_root=self.mps_root
        )
        write_spec(self.cdi_root, spec, uid)

    def _remove_spec(self, uid: str, driver: str, devices: Sequence[PreparedResult]) -> None:
        """The spec (YAML, or the JSON of an older fakegpu), then the MPS directories it mounted."""
        remove_spec(self.cdi_root, uid, cdi_vendor(driver))
        for daemon_id in _mps_daemon_ids(devices):
            remove_dirs(self.mps_root, daemon_id)

    async def unprepare(self, ref: ClaimRef) -> None:
        async with self._lock:
            stored = self.checkpoint.get(ref.uid)
            if stored is None:
                self._remove_spec(ref.uid, self.driver, ())
            else:
                self._remove_spec(ref.uid, stored.driver, stored.devices)
                # A started claim too: its prepare set the GPU before failing (NVIDIA's unprepare leaves it).
                others = held_by_others(self.checkpoint.claims(), stored) if self.shares.enabled else ()
                reset_unprepared(self.live.gpu_policies, stored.devices, others)
            self.checkpoint.remove(ref.uid)
            self.unprepares += 1
            still_shared = _still_shared(self.checkpoint.claims(), stored)
        # At INFO like a prepare, so a claim's whole life on the node is in the log.
        log.info(
            "unprepared claim %s/%s (%s): %s%s",
            ref.namespace,
            ref.name,
            ref.uid,
            "not prepared here"
            if stored is None
            else ", ".join(r.device for r in stored.devices) or "no devices of this driver",
            still_shared,
        )


def _still_shared(prepared: Sequence[PreparedClaim], unprepared: PreparedClaim | None) -> str:
    """For the unprepare log: the devices of a shared claim that other claims still hold (consumable shares)."""
    if unprepared is None:
        return ""
    held = {
        r.device: len(other_holders(prepared, unprepared.uid, unprepared.driver, r.device)) for r in unprepared.devices
    }
    shared = [f"{device} by {n} other claim{'s' if n > 1 else ''}" for device, n in held.items() if n]
    return f" (still held: {', '.join(shared)})" if shared else ""


def _mps_daemon_ids(results: Sequence[PreparedResult]) -> list[str]:
    """The MPS control daemons a claim's devices use, each once, in order (its directories' names)."""
    return list(dict.fromkeys(r.mps_daemon_id for r in results if r.mps_daemon_id))
