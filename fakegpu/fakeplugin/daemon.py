"""``fakegpu plugin``: the device plugin daemon, as a DaemonSet or by hand next to a kubelet.

SIGHUP or a changed config file reloads (a bad config is reported and the running inventory keeps
serving); SIGINT, SIGTERM and SIGQUIT stop the servers and remove their sockets, and with ``--label-node``
take the plugin's labels off the Node as ``--cleanup-on-exit`` says.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from lightkube import AsyncClient

from fakegpu.control.server import AdminServer
from fakegpu.fakeplugin.admin_ops import device_plugin_ops
from fakegpu.fakeplugin.cleanup_policy import CleanupOnExit
from fakegpu.fakeplugin.node_sync import ConfigSelection, PluginNodeSync, initial_selection
from fakegpu.fakeplugin.plugin_manager import RegistrationMode
from fakegpu.fakeplugin.plugin_stack import PluginStack
from fakegpu.kube.client import client_factory
from fakegpu.kube.pod_annotations import PodAnnotations
from fakegpu.runtime.daemon_lifecycle import DaemonLifecycle
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.bug_modes import BugMode
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.sharing.node_feature import DEFAULT_NAMESPACE
from fakegpu.telemetry.health_endpoint import Readiness
from fakegpu.telemetry.telemetry_settings import TelemetrySettings

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class NodeSettings:
    """What the plugin does with its Node object; nothing (and no API client) unless asked."""

    label_node: bool = False
    selection: ConfigSelection | None = None
    kubeconfig: str | None = None
    resync_interval: float = 30.0
    timestamp: bool = True
    """Write ``nvidia.com/gfd.timestamp`` with the labels (GFD's default; ``--no-timestamp``)."""
    cleanup_on_exit: CleanupOnExit = dataclasses.field(default_factory=CleanupOnExit)
    """With ``label_node``: whether the labels go when the plugin stops (``--cleanup-on-exit``)."""
    namespace: str = DEFAULT_NAMESPACE
    """GFD's ``--namespace`` / ``NAMESPACE``: where the NodeFeature goes with ``useNodeFeatureAPI``."""
    pod_name: str = ""
    """GFD's ``POD_NAME``: the pod whose DaemonSet owns the NodeFeature (none: no owner references)."""

    @property
    def wanted(self) -> bool:
        return self.label_node or self.selection is not None


def pod_annotations(kubeconfig: str | None, make_client: Callable[[], AsyncClient] | None) -> PodAnnotations | None:
    """Where the DCGM exporter reads pods' fakegpu.io/gpu-utilization annotations: the API server, if any."""
    if make_client is None:
        try:
            make_client = client_factory(kubeconfig)
        except SpecError as exc:
            log.info("no API server (%s): the DCGM exporter does not read pod annotations", exc)
            return None
    return PodAnnotations(make_client)


async def run_plugin_daemon(
    inputs: InventoryInputs,
    paths: KubeletPaths,
    *,
    registration: RegistrationMode = "kubelet",
    pre_start_required: bool = False,
    bug_modes: frozenset[BugMode] = frozenset(),
    stop: asyncio.Event | None = None,
    admin_socket: Path | None = None,
    node: NodeSettings | None = None,
    telemetry: TelemetrySettings | None = None,
    cdi_root: Path | None = None,
) -> int:
    """Serve until a stop signal; raises SpecError before serving if the first inventory is bad.

    With ``admin_socket``, also serve the owner-only admin socket ``fakegpu ctl`` talks to (none by default).
    With ``node``, label the Node and/or follow its config label (``--label-node``, ``--config-dir``).
    With ``telemetry``, serve Prometheus metrics and/or the fake dcgm-exporter, attributed through the
    kubelet's PodResources, and/or the kubelet's probes from the start (``PluginManager.not_ready``; none by
    default).
    With ``cdi_root``, write the plugin's CDI specs there whenever a CDI deviceListStrategy is configured
    (``fakegpu.fakeplugin.plugin_cdi_specs``; none by default, ``fakegpu plugin`` passes ``/var/run/cdi``).
    """
    node = node or NodeSettings()
    telemetry = telemetry or TelemetrySettings()
    # With --config-dir the selected config file is watched by the node sync, so the base excludes it.
    base_watch = [Path(p) for p in (inputs.node_spec, inputs.mig_config) if p]
    make_client = client_factory(node.kubeconfig) if node.wanted else None
    readiness = Readiness(
        f"reading node {inputs.node_name}'s {node.selection.label} label from the API server"
        if node.selection is not None
        else "starting"
    )
    async with DaemonLifecycle(stop) as daemon:
        await daemon.serve_first(telemetry.health(readiness))
        selected, label_value = "", ""
        if node.selection is not None and make_client is not None:
            # As NVIDIA's config-manager init container: nothing is served until the label has been read.
            chosen = await initial_selection(make_client, inputs.node_name, node.selection, inputs, daemon.stop)
            if chosen is None:
                return 0
            inputs, selected, label_value = chosen
            log.info("selected %s for node %s", selected, inputs.node_name)
        stack = PluginStack(
            inputs,
            paths,
            bug_modes=bug_modes,
            registration=registration,
            pre_start_required=pre_start_required,
            cdi_root=cdi_root,
        )
        # A required IMEX channel the node lacks stops the start before any CDI spec is written; the specs
        # and the nvidia-smi files are then rewritten on every inventory change.
        stack.write_files()
        daemon.cleanup(stack.close)
        live, manager, current = stack.live, stack.manager, stack.current
        if live.inventory.config.use_node_feature_api and not node.label_node:
            # GFD's NodeFeature output is how --label-node publishes; alone it would be silently ignored.
            log.warning("useNodeFeatureAPI has no effect without --label-node: no NodeFeature is written")
        readiness.follow(manager.not_ready)
        sync: PluginNodeSync | None = None
        if make_client is not None:
            sync = PluginNodeSync(
                make_client,
                inputs.node_name,
                manager,
                current,
                label_node=node.label_node,
                selection=node.selection,
                base_watch_files=base_watch,
                resync_interval=node.resync_interval,
                timestamp=node.timestamp,
                cleanup_on_exit=node.cleanup_on_exit,
                namespace=node.namespace,
                pod_name=node.pod_name,
            )
            sync.set_initial(selected, label_value)
        admin = (
            AdminServer(admin_socket, device_plugin_ops(live, manager, stack.calls, current, sync))
            if admin_socket
            else None
        )
        daemon.on_reload(lambda: daemon.loop.create_task(manager.reload()))
        await daemon.serve(
            *([stack] if sync is None else [stack, sync]),
            admin=admin,
            endpoints=telemetry.endpoints(
                stack.metrics.registry,
                live,
                paths.root,
                annotations=lambda: pod_annotations(node.kubeconfig, make_client),
            ),
        )
        log.info("serving %s for node %s", ", ".join(manager.wanted()) or "no resources", live.inventory.node.name)
        await daemon.wait()
    return 0
