"""The device plugin's own Node: GFD labels written to it, and the config its label selects.

One task follows the Node (``fakegpu.kube.node_watch``) and one reconciles: whenever the node changes, the
inventory changes, or a resync interval passes, it (1) applies the config the node's
``nvidia.com/device-plugin.config`` label names, as NVIDIA's config-manager sidecar does but in-process
and without ever exiting, and (2) patches the GFD label set onto the node, removing only labels it wrote
before. The API server being away never stops the plugin serving; both steps retry. When the plugin
stops, it takes the labels it owns (and their record) off the Node again, as ``--cleanup-on-exit`` says
(``fakegpu.fakeplugin.cleanup_policy``).

With GFD's ``useNodeFeatureAPI`` in the served config the labels go to the node's NodeFeature instead
(``fakegpu.fakeplugin.node_feature_writer``), for Node Feature Discovery to put on the Node, and any labels
this plugin wrote on the Node before are taken off, as GFD leaves its features file behind when its run
ends. GFD's ``sleepInterval`` paces the NodeFeature's re-checks; ``infinite`` writes the labels (either way)
once per run, and nothing restores them after that until the served config or inventory changes.

``nvidia.com/gfd.timestamp`` is written as NVIDIA's GFD writes it: the time its labelling run started. GFD
takes it once per run (``cmd/gpu-feature-discovery/main.go``: the timestamp labeler is built before the
60 s relabel loop) and starts a new run on start-up and on SIGHUP, which its config-manager sends when the
selected config changes; here, when the plugin starts and when the config it serves changes.

While it runs, GPU faults and recoveries of the served inventory are recorded as Events on the Node
(``fakegpu.kube.node_events``), as a node problem detector would show them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from fakegpu.fakeplugin.cleanup_policy import CleanupOnExit
from fakegpu.fakeplugin.node_feature_writer import NodeFeatureWriter
from fakegpu.fakeplugin.plugin_manager import PluginManager
from fakegpu.kube.backoff import RETRY_PAUSE, jittered_pause, retry_note
from fakegpu.kube.client import api_failure, client_target
from fakegpu.kube.event_wait import wait_event
from fakegpu.kube.node_events import DEVICE_PLUGIN_COMPONENT, NodeEventRecorder, NodeFaultEvents
from fakegpu.kube.node_watch import NodeWatch
from fakegpu.kube.reconcile_loop import reconcile_forever
from fakegpu.runtime.background_tasks import cancel_and_wait
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import CurrentInputs, InventoryInputs
from fakegpu.sharing.label_ownership import label_patch
from fakegpu.sharing.labels import gfd_labels
from fakegpu.sharing.named_configs import DEFAULT_CONFIG_LABEL, DEFAULT_FALLBACKS, FallbackStrategy, choose_config
from fakegpu.sharing.node_feature import DEFAULT_NAMESPACE
from fakegpu.sharing.plugin_config import PluginConfig
from fakegpu.sharing.sleep_interval import sleep_interval_seconds

log = logging.getLogger(__name__)

RELEASE_TIMEOUT = 5.0
"""Per API call on the way out: the kubelet's grace period (30 s by default) must cover the whole stop."""


@dataclass(frozen=True)
class ConfigSelection:
    """``--config-dir`` and friends: where the named configs are and how an unlabelled node picks one."""

    directory: Path
    label: str = DEFAULT_CONFIG_LABEL
    default_config: str = ""
    fallbacks: tuple[FallbackStrategy, ...] = DEFAULT_FALLBACKS

    def inputs_for(self, inputs: InventoryInputs, label_value: str) -> tuple[InventoryInputs, str]:
        """The inputs with the selected config file, and what was selected; SpecError if nothing fits."""
        choice = choose_config(
            label_value, self.directory, default_config=self.default_config, fallbacks=self.fallbacks, label=self.label
        )
        return dataclasses.replace(inputs, config_file=choice.path), choice.describe


@dataclass
class NodeSyncStats:
    label_patches: int = 0
    node_feature_writes: int = 0
    label_errors: int = 0
    selections: int = 0
    selection_errors: list[str] = field(default_factory=list)
    selected: str = ""
    syncs: int = 0
    """Passes over the Node finished (on a change or a resync): once it grew by two, a pass began after
    whatever came before (a test's barrier for "a resync looked and wrote nothing")."""


async def initial_selection(
    make_client: Callable[[], AsyncClient],
    node_name: str,
    selection: ConfigSelection,
    inputs: InventoryInputs,
    stop: asyncio.Event,
    retry_interval: float = RETRY_PAUSE,
) -> tuple[InventoryInputs, str, str] | None:
    """Before the first inventory, as NVIDIA's config-manager init container does: read the label once.

    Like it, nothing is served until the label is known, so the kubelet never sees a config the node's
    label does not ask for; an API server that is away is waited for (None if stopped meanwhile). A Node
    that does not exist has no label. A label naming no config is fatal here: there is nothing to keep.
    """
    failures = 0
    label_value = ""
    while True:
        failures += 1
        pause = jittered_pause(failures, first=retry_interval)
        client = make_client()
        try:
            node = await asyncio.wait_for(client.get(Node, node_name), 10.0)
            label_value = ((node.metadata and node.metadata.labels) or {}).get(selection.label, "")
            break
        except ApiError as exc:
            if exc.status.code == 404:
                log.warning("node %s does not exist; it has no %s label", node_name, selection.label)
                break
            log.warning(
                "reading node %s for its %s label failed (%s): %s",
                node_name,
                selection.label,
                retry_note(failures, pause),
                api_failure(exc.status.message or exc, client_target(client)),
            )
        except Exception as exc:
            log.warning(
                "reading node %s for its %s label failed (%s): %s: %s",
                node_name,
                selection.label,
                retry_note(failures, pause),
                type(exc).__name__,
                api_failure(exc, client_target(client)),
            )
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), 2.0)
        if await wait_event(stop, pause):
            return None
    chosen, selected = selection.inputs_for(inputs, label_value)
    return chosen, selected, label_value


class PluginNodeSync:
    """Keeps the Node's labels and the plugin's selected config in step with each other."""

    def __init__(
        self,
        client_factory: Callable[[], AsyncClient],
        node_name: str,
        manager: PluginManager,
        current: CurrentInputs,
        *,
        label_node: bool,
        selection: ConfigSelection | None,
        base_watch_files: Sequence[Path] = (),
        resync_interval: float = 30.0,
        retry_interval: float = 1.0,
        timestamp: bool = True,
        clock: Callable[[], float] | None = None,
        cleanup_on_exit: CleanupOnExit | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        pod_name: str = "",
    ) -> None:
        self.client_factory = client_factory
        self.node_name = node_name
        self.manager = manager
        self.current = current
        self.label_node = label_node
        self.selection = selection
        self.base_watch_files = list(base_watch_files)
        self.resync_interval = resync_interval
        self.retry_interval = retry_interval
        self.timestamp = timestamp
        """Write ``nvidia.com/gfd.timestamp`` (GFD's default; ``--no-timestamp`` turns it off)."""
        self.clock = clock or time.time
        self.cleanup_on_exit = cleanup_on_exit or CleanupOnExit()
        self._stamp: tuple[int, PluginConfig] | None = None
        self.node_feature = NodeFeatureWriter(node_name, namespace, pod_name)
        """Where the labels go when the served config says ``useNodeFeatureAPI`` (GFD's namespace and pod)."""
        self._written: tuple[bool, dict[str, str]] | None = None
        """What the last labelling pass published: to the NodeFeature or not, and the labels."""
        self._written_at = 0.0
        """The run's timestamp and the config it was taken for."""
        self.stats = NodeSyncStats()
        self.node: Node | None = None
        self._seen_node = False
        self._dirty = asyncio.Event()
        self._selection_key: tuple[str, tuple[tuple[str, int, int], ...]] | None = None
        self._node_events = 0
        self._client: AsyncClient | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._unsubscribe: Callable[[], None] = lambda: None
        self.fault_events: NodeFaultEvents | None = None
        """GPU faults and recoveries as Events on the Node (``fakegpu.kube.node_events``), while started."""

    def set_initial(self, selected: str, label_value: str) -> None:
        """Record what the daemon selected before serving, so the first node event does not reload again."""
        self.stats.selected = selected
        if self.selection is not None:
            self._selection_key = (label_value, self._listing())

    async def start(self) -> None:
        self._client = self.client_factory()
        watch = NodeWatch(self._client, self.node_name, self._on_node, self.retry_interval)
        self._unsubscribe = self.manager.live.subscribe(self._dirty.set)
        recorder = NodeEventRecorder(self._client, self.node_name, DEVICE_PLUGIN_COMPONENT, node_uid=self._node_uid)
        self.fault_events = NodeFaultEvents(self.manager.live, recorder)
        self.fault_events.start()
        self._tasks = [
            asyncio.create_task(watch.run(), name="node-watch"),
            asyncio.create_task(self._loop(), name="node-sync"),
        ]

    def _node_uid(self) -> str | None:
        meta = self.node.metadata if self.node is not None else None
        return meta.uid if meta is not None else None

    async def stop(self) -> None:
        self._unsubscribe()
        if self.fault_events is not None:
            await self.fault_events.stop()
        await cancel_and_wait(self._tasks)
        self._tasks = []
        if self._client is not None and self.label_node:
            try:
                await self._release(self._client)
            except Exception as exc:
                log.warning(
                    "removing fakegpu's labels from node %s on exit failed (%s); they stay", self.node_name, exc
                )
        if self._client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._client.close(), 2.0)
            self._client = None

    def _on_node(self, node: Node | None) -> None:
        self._node_events += 1
        self.node = node
        self._seen_node = True
        self._dirty.set()

    async def _loop(self) -> None:
        await reconcile_forever(
            self._dirty, self.resync_interval, self.sync_once, self._sync_failed, first_pause=self.retry_interval
        )

    def _sync_failed(self, exc: Exception, attempt: int, pause: float) -> None:
        self.stats.label_errors += 1
        target = client_target(self._client) if self._client is not None else None
        log.warning(
            "updating node %s failed (%s): %s", self.node_name, retry_note(attempt, pause), api_failure(exc, target)
        )

    async def sync_once(self) -> None:
        if not self._seen_node:
            return
        if self.selection is not None:
            await self._select()
        if self.label_node and self.node is not None:
            await self._label()
        self.stats.syncs += 1

    def _listing(self) -> tuple[tuple[str, int, int], ...]:
        """The configs and their file stamps: a config added to, or fixed in, the ConfigMap makes a failed
        choice worth retrying. Stamps follow symlinks, so a ConfigMap update (a ``..data`` swap) shows."""
        if self.selection is None:
            return ()
        out = []
        try:
            for entry in sorted(self.selection.directory.iterdir()):
                if entry.name.startswith(".."):
                    continue
                with contextlib.suppress(OSError):
                    st = entry.stat()
                    out.append((entry.name, st.st_mtime_ns, st.st_ino))
        except OSError:
            return ()
        return tuple(out)

    async def _select(self) -> None:
        assert self.selection is not None
        labels = (self.node and self.node.metadata and self.node.metadata.labels) or {}
        value = labels.get(self.selection.label, "")
        key = (value, self._listing())
        if key == self._selection_key:
            return
        if self._selection_key is None or self._selection_key[0] != value:
            log.info("label change detected: %s=%s", self.selection.label, value)
        self._selection_key = key
        try:
            candidate, selected = self.selection.inputs_for(self.current.inputs, value)
        except SpecError as exc:
            self.stats.selection_errors.append(str(exc))
            log.error(
                "config selection rejected, still serving %s: %s", self.stats.selected or "the previous config", exc
            )
            return
        if candidate == self.current.inputs:
            log.info("already configured with %s", selected)
            return
        previous, self.current.inputs = self.current.inputs, candidate
        self._watch_config_of(candidate)
        try:
            applied = await self.manager.reload()
        except BaseException:
            self.current.inputs = previous
            self._watch_config_of(previous)
            raise
        if not applied:
            self.current.inputs = previous
            self._watch_config_of(previous)
            self.stats.selection_errors.append(self.manager.stats.reload_errors[-1])
            return
        self.stats.selections += 1
        self.stats.selected = selected
        log.info("updated to %s", selected)

    def _watch_config_of(self, inputs: InventoryInputs) -> None:
        """Edits to the selected file reload, as with ``--config-file`` (a ConfigMap update swaps it)."""
        selected = [Path(inputs.config_file)] if inputs.config_file else []
        self.manager.set_watch_files([*self.base_watch_files, *selected])

    def _timestamp_for(self, config: PluginConfig) -> int | None:
        """The run's timestamp; a new run (a new stamp) when the served config changed, as GFD restarts."""
        if not self.timestamp:
            return None
        if self._stamp is None or self._stamp[1] != config:
            self._stamp = (int(self.clock()), config)
        return self._stamp[0]

    def _due(self, config: PluginConfig, published: tuple[bool, dict[str, str]]) -> bool:
        """Whether to publish now: a new run (labels or target changed) always; else never with an infinite
        sleep interval, every sleep interval for the NodeFeature (GFD's loop), and on every pass for the
        Node's labels (its watch shows what changed, and the patch is empty when nothing did)."""
        if published != self._written:
            return True
        interval = sleep_interval_seconds(config.sleep_interval, "sleepInterval")
        if interval is None:
            return False
        return not published[0] or self.clock() - self._written_at >= interval

    async def _label(self) -> None:
        # From the inventory being served, not from the files: a config the reload rejected must not
        # show up in the labels while the kubelet still gets the previous one.
        serving = self.manager.live.inventory
        config = serving.config
        wanted = gfd_labels(serving.node, config, self._timestamp_for(config))
        published = (config.use_node_feature_api, wanted)
        if not self._due(config, published):
            return
        if config.use_node_feature_api:
            await self._patch_node({})
            assert self._client is not None
            if await self.node_feature.write(self._client, wanted):
                self.stats.node_feature_writes += 1
        else:
            await self._patch_node(wanted)
        self._written, self._written_at = published, self.clock()

    async def _patch_node(self, wanted: dict[str, str]) -> None:
        """Make the labels this plugin owns on the Node exactly ``wanted`` (none: take them all off)."""
        assert self.node is not None and self._client is not None
        meta = self.node.metadata
        patch = label_patch(meta.labels if meta else None, meta.annotations if meta else None, wanted)
        if patch is None:
            return
        events = self._node_events
        patched = await self._client.patch(Node, self.node_name, patch, patch_type=PatchType.MERGE)
        if self._node_events == events:
            # Only if the watch brought nothing newer meanwhile (it may carry a new config label).
            self.node = patched
        self.stats.label_patches += 1
        log.info("node %s labels updated (%d GFD labels)", self.node_name, len(wanted))

    async def _release(self, client: AsyncClient) -> None:
        """Take the labels this plugin owns and their record off the Node, and the NodeFeature it wrote,
        unless the policy keeps them.

        Read fresh (the watch's view may be old and the policy looks at the current labels); labels other
        writers set are never touched, since only the keys in the ownership record are nulled.
        """
        try:
            node: Node | None = await asyncio.wait_for(client.get(Node, self.node_name), RELEASE_TIMEOUT)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
            node = None
        meta = node.metadata if node is not None else None
        labels = (meta.labels if meta else None) or {}
        if not self.cleanup_on_exit.wanted(labels):
            log.info("keeping fakegpu's labels on node %s (--cleanup-on-exit %s)", self.node_name, self.cleanup_on_exit)
            return
        if self.node_feature.written:
            await self.node_feature.delete(client, RELEASE_TIMEOUT)
        patch = label_patch(labels, meta.annotations if meta else None, {}) if node is not None else None
        if patch is None:
            return
        await asyncio.wait_for(client.patch(Node, self.node_name, patch, patch_type=PatchType.MERGE), RELEASE_TIMEOUT)
        removed = sum(1 for v in patch["metadata"].get("labels", {}).values() if v is None)
        log.info("removed %d fakegpu labels from node %s on exit", removed, self.node_name)
