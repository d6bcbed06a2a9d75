"""The names of NVIDIA's chart that users copy into their commands, as far as fakegpu's DRA overlay carries them.

fakegpu keeps its own namespace (``fakegpu``) and DaemonSet name (``fakegpu-dra``), so it never collides with a
real installation of NVIDIA's chart (README "Differences from NVIDIA"); the pod label and container name NVIDIA's
docs select logs by are NVIDIA's.
"""

from __future__ import annotations

from tests.deploy.manifests import one, only_container, render


def test_nvidias_kubelet_plugin_log_selector_finds_the_dra_pods() -> None:
    """kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu/templates/kubeletplugin.yaml
    and _helpers.tpl at commit 14046d0 (selectorLabels with componentName kubelet-plugin gives
    `dra-driver-nvidia-gpu-component: kubelet-plugin`; the GPU plugin's container is `gpus`), as the driver's
    troubleshooting guides (site/content/docs/guides/kubevirt-vfio-gpu-passthrough.md at commit 20c35fe) read
    `kubectl logs -n dra-driver-nvidia-gpu -l dra-driver-nvidia-gpu-component=kubelet-plugin -c gpus`."""
    ds = one(render("dra"), "DaemonSet", "fakegpu-dra")
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert labels["dra-driver-nvidia-gpu-component"] == "kubelet-plugin"
    assert only_container(ds)["name"] == "gpus"
    # The selector stays fakegpu's own: a DaemonSet's selector cannot change on an update.
    assert ds["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "fakegpu-dra"}
