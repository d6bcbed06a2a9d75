"""deploy/README.md quotes paths, device IDs, counts and labels: each must be what the manifests and fakegpu
give for the kind cluster's nodes, so the walkthrough cannot drift from the code."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from fakegpu.cli.inventory_options import inventory_inputs
from fakegpu.cli.main import main
from fakegpu.cli.slice_commands import dra_feature_gates
from fakegpu.dra.compute_domain.devices import COMPUTE_DOMAIN_DRIVER
from fakegpu.dra.compute_domain.kubelet_plugin import compute_domain_specs
from fakegpu.dra.device_map import published_devices
from fakegpu.dra.resource_slices import SliceOptions, build_slice_specs, slice_objects
from fakegpu.sharing.inputs import InventoryInputs, load_inventory, load_labels, load_node
from fakegpu.sharing.labels import TIMESTAMP_LABEL
from tests.deploy.manifests import (
    APPLIED,
    DEPLOY,
    IMAGE,
    OVERLAYS,
    ROOT,
    SHARED_DEVICE_CLASSES,
    SHARED_NAMESPACE,
    container_env,
    fakegpu_argv,
    load_docs,
    mounts_by_path,
    one,
    only_container,
    parse_cli,
    render,
    write_config_dir,
)
from tests.deploy.test_nvidia_configs import EXPECTED

README = DEPLOY / "README.md"
DP_NODE = "fakegpu-worker"
DRA_NODE = "fakegpu-worker2"
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def text() -> str:
    return README.read_text()


def device_plugin_inputs() -> InventoryInputs:
    container = only_container(one(render("device-plugin"), "DaemonSet", "fakegpu-device-plugin"))
    return inventory_inputs(parse_cli(fakegpu_argv(container)), container_env(container, DP_NODE))


def test_paths_it_mentions_exist() -> None:
    paths = set(re.findall(r"deploy/[\w./-]+[\w/]", text()))
    assert "deploy/overlays/device-plugin" in paths and "deploy/kind/cluster.yaml" in paths
    for path in paths:
        assert (ROOT / path).exists(), f"deploy/README.md mentions {path}, which does not exist"


ENGINES = ("docker", "podman", "buildah")


def _has_domain(name: str) -> bool:
    first, sep, _ = name.partition("/")
    return bool(sep) and ("." in first or ":" in first or first == "localhost")


def kubelet_name(image: str) -> str:
    """The image a pod asks for, as the kubelet and containerd read it: a name without a registry is Docker
    Hub's, one path component is under library/ (distribution/reference normalize.go, splitDockerDomain:
    the first component is a registry only if it has a dot or a colon or is localhost)."""
    if _has_domain(image):
        return image
    return f"docker.io/{image}" if "/" in image else f"docker.io/library/{image}"


def built_name(engine: str, tag: str) -> str:
    """The name `<engine> build -t <tag>` stores: docker qualifies a short name as Docker Hub's, podman and
    buildah as localhost/ (containers/common's short-name handling; the real-cluster reading saw
    localhost/fakegpu:dev from buildah)."""
    if _has_domain(tag) or engine == "docker":
        return kubelet_name(tag)
    return f"localhost/{tag}"


def test_name_normalisation_reproduces_the_err_image_pull_reading() -> None:
    # Seen on a real cluster (v1.36.2, containerd 2.3): buildah's -t fakegpu:dev never reached a pod asking for it
    # (ErrImagePull): containerd held localhost/fakegpu:dev, the pod asked for docker.io/library/fakegpu:dev.
    assert built_name("buildah", "fakegpu:dev") != kubelet_name("fakegpu:dev")
    assert built_name("docker", "fakegpu:dev") == kubelet_name("fakegpu:dev") == "docker.io/library/fakegpu:dev"


def test_every_engines_build_command_yields_the_manifests_image() -> None:
    for engine in ENGINES:
        tags = re.findall(rf"^{engine} build -f deploy/Containerfile -t (\S+) \.$", text(), flags=re.M)
        assert tags, f"deploy/README.md has no `{engine} build` command"
        for tag in tags:
            assert built_name(engine, tag) == kubelet_name(IMAGE), f"{engine} -t {tag}: the pods ask for {IMAGE}"


def test_load_commands_carry_the_manifests_image_into_the_cluster() -> None:
    (cluster,) = load_docs(DEPLOY / "kind" / "cluster.yaml")
    name = f"--name {cluster['name']}"
    readme = text()
    assert f"kind load docker-image {IMAGE} {name}" in readme
    assert f"podman save -o fakegpu.tar {IMAGE}" in readme
    # The name inside the archive is what containerd imports.
    pushed = re.findall(r"^buildah push (\S+) docker-archive:fakegpu\.tar:(\S+)", readme, flags=re.M)
    assert pushed == [(IMAGE, IMAGE)]
    assert f"kind load image-archive fakegpu.tar {name}" in readme
    assert f"minikube image load {IMAGE}" in readme and "minikube image load fakegpu.tar" in readme


def test_walkthrough_applies_shared_directories_first_and_deletes_them_last() -> None:
    applied = re.findall(r"^kubectl apply -k deploy/(\S+)$", text(), flags=re.M)
    deleted = re.findall(r"^kubectl delete -k deploy/(\S+) --ignore-not-found(?: --timeout=\S+)?$", text(), flags=re.M)
    assert set(applied) == set(deleted) == set(APPLIED), "every applied directory is applied and deleted"
    faces = [f"overlays/{o}" for o in OVERLAYS]
    for face in faces:
        assert applied.index(SHARED_NAMESPACE) < applied.index(face)
    for face in ("overlays/dra", "overlays/kwok"):
        assert applied.index(SHARED_DEVICE_CLASSES) < applied.index(face)
        assert deleted.index(SHARED_DEVICE_CLASSES) > deleted.index(face)
    assert deleted[-1] == SHARED_NAMESPACE


def test_device_ids_are_the_kind_nodes_ids(tmp_path: Path) -> None:
    inputs = device_plugin_inputs()
    configs = one(render("device-plugin"), "ConfigMap", "fakegpu-device-plugin-configs")["data"]
    directory = write_config_dir(configs, tmp_path)
    plugin_ids = {
        d.base_id
        for name in configs
        for r in load_inventory(replace(inputs, config_file=str(directory / name))).resources
        for d in r.devices
    }
    dra = only_container(one(render("dra"), "DaemonSet", "fakegpu-dra"))
    dra_args = parse_cli(fakegpu_argv(dra))
    _, mig_mode = dra_feature_gates(dra_args, container_env(dra, DRA_NODE))
    node = load_node(inventory_inputs(dra_args, container_env(dra, DRA_NODE)))
    dra_ids = {d.visible_uuid(node.name) for d in published_devices(node, mig_mode).values()}
    quoted = set(re.findall(rf"(?:GPU|MIG)-{_UUID}", text()))
    assert len(quoted) >= 5
    assert quoted - (plugin_ids | dra_ids) == set(), "IDs no node of the kind cluster has"


def test_allocatable_table_matches_the_configs() -> None:
    rows = re.findall(r"^\| (.+?) \| (`\".+)\|$", text(), flags=re.M)
    seen = set()
    for labels, allocatable in rows:
        counts = {k: int(v) for k, v in re.findall(r'`"([^"]+)":"(\d+)"`', allocatable)}
        for name in re.findall(r"`([\w-]+)`", labels):
            assert EXPECTED[name][0] == counts, f"deploy/README.md: label {name}"
            seen.add(name)
    assert seen == set(EXPECTED)


def test_gfd_labels_block_is_what_the_plugin_writes() -> None:
    block = re.search(r"grep '\^nvidia.com/' \| sort\n(.*?)\n```", text(), flags=re.S)
    assert block is not None
    quoted = dict(line.split("=", 1) for line in block.group(1).splitlines())
    # No label on the node: the named fallback picks the config called default.
    configs = one(render("device-plugin"), "ConfigMap", "fakegpu-device-plugin-configs")["data"]
    path = DEPLOY / "overlays" / "device-plugin" / "configs" / "default.yaml"
    assert path.read_text() == configs["default"]
    # The GFD timestamp is the plugin's start (NVIDIA/k8s-device-plugin internal/lm/timestamp.go): any 10 digits.
    assert re.fullmatch(r"[0-9]{10}", quoted.pop(TIMESTAMP_LABEL))
    assert quoted == load_labels(replace(device_plugin_inputs(), config_file=str(path)))


def test_single_config_patch_names_a_real_volume_and_configmap() -> None:
    m = re.search(r'"volumes":\[\{"name":"([\w-]+)","configMap":\{"name":"([\w-]+)"\}\}\]', text())
    assert m is not None
    volume, config_map = m.groups()
    ds = one(render("device-plugin"), "DaemonSet", "fakegpu-device-plugin")
    mounted = mounts_by_path(ds).values()
    assert any(v["name"] == volume and "configMap" in v for v in mounted), f"no mounted ConfigMap volume {volume}"
    examples = {d["metadata"]["name"] for p in (DEPLOY / "examples" / "configs").glob("*.yaml") for d in load_docs(p)}
    assert config_map in examples


def kubectl_table(header: list[str], rows: list[list[tuple[str, int]]]) -> list[str]:
    """Lines as `kubectl get` prints them (each column as wide as its longest value plus 3 spaces, the last one
    unpadded), from cells given as (shown text, length of the real value): a generated name shows its random
    suffix as `…` but takes the width of the real one."""
    table = [[(h, len(h)) for h in header], *rows]
    widths = [max(length for (length,) in ((c[i][1],) for c in table)) for i in range(len(header))]
    return [
        "".join(text + " " * (widths[i] + 3 - len(text)) for i, (text, _) in enumerate(cells[:-1])) + cells[-1][0]
        for cells in table
    ]


def test_resource_slices_listing_is_what_the_driver_publishes() -> None:
    dra = only_container(one(render("dra"), "DaemonSet", "fakegpu-dra"))
    args = parse_cli(fakegpu_argv(dra))
    assert args.compute_domains, "the overlay's driver runs the compute-domain plugin too"
    env = container_env(dra, DRA_NODE)
    _, mig_mode = dra_feature_gates(args, env)
    node = load_node(inventory_inputs(args, env))
    gpu = SliceOptions(driver=args.driver_name, mig_mode=mig_mode, server_minor=36)
    published = slice_objects(node, gpu, build_slice_specs(node, gpu, {}))
    domains = SliceOptions(driver=COMPUTE_DOMAIN_DRIVER)
    published += slice_objects(node, domains, compute_domain_specs(node, domains, {}))
    suffix = 5  # the API server's random generateName suffix
    rows = [
        [
            (s["metadata"]["generateName"] + "…", len(s["metadata"]["generateName"]) + suffix),
            *((v, len(v)) for v in (s["spec"]["nodeName"], s["spec"]["driver"], s["spec"]["pool"]["name"])),
            ("…", 1),
        ]
        for s in sorted(published, key=lambda s: str(s["metadata"]["generateName"]))
    ]
    expected = kubectl_table(["NAME", "NODE", "DRIVER", "POOL", "AGE"], rows)
    block = re.search(
        rf"^\$ kubectl get resourceslices --field-selector spec.nodeName={DRA_NODE}\n(.*?)\n```",
        text(),
        flags=re.M | re.S,
    )
    assert block is not None
    assert block.group(1).splitlines() == expected


def test_gfd_labels_block_is_what_the_quoted_fakegpu_labels_command_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    found = re.search(
        r"`fakegpu (labels [^`]+)`\nprints, (\d+) with the timestamp [^;]*; without `--timestamp` it prints (\d+)",
        text(),
    )
    assert found is not None, "deploy/README.md names the fakegpu labels command behind the GFD listing"
    command, with_timestamp, without = found.group(1).split(), int(found.group(2)), int(found.group(3))
    block = re.search(r"grep '\^nvidia.com/' \| sort\n(.*?)\n```", text(), flags=re.S)
    assert block is not None
    assert main(command) == 0
    printed = capsys.readouterr().out.splitlines()
    assert block.group(1).splitlines() == sorted(printed)
    assert len(printed) == with_timestamp
    at = command.index("--timestamp")
    assert main(command[:at] + command[at + 2 :]) == 0
    assert len(capsys.readouterr().out.splitlines()) == without
