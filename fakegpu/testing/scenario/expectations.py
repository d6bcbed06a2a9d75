"""The checks of an ``expect`` or ``expect_now`` step: each returns the mismatches as
``what: expected X, got Y`` lines."""

from __future__ import annotations

from collections.abc import Mapping, Set

from fakegpu.kubelet.checkpoint import CheckpointError
from fakegpu.sharing.errors import SpecError
from fakegpu.sharing.inputs import load_labels
from fakegpu.testing.fake_node import FakeNode
from fakegpu.testing.scenario.model import Checks, EnvExpect

ABSENT = "absent"


def _counts(what: str, expected: Mapping[str, int], got: Mapping[str, int]) -> list[str]:
    return [
        f"{what}[{name}]: expected {want}, got {got.get(name, ABSENT)}"
        for name, want in sorted(expected.items())
        if got.get(name) != want
    ]


def _absent(names: list[str], capacity: Mapping[str, int], allocatable: Mapping[str, int]) -> list[str]:
    return [
        f"resources_absent[{name}]: expected absent, got capacity {capacity.get(name, ABSENT)}, "
        f"allocatable {allocatable.get(name, ABSENT)}"
        for name in names
        if name in capacity or name in allocatable
    ]


def _labels(node: FakeNode, expected: Mapping[str, str | None]) -> list[str]:
    try:
        labels = load_labels(node.inputs)
    except SpecError as exc:
        return [f"labels: cannot compute the node's labels: {exc}"]
    out = []
    for key, want in sorted(expected.items()):
        got = labels.get(key)
        if got != want:
            out.append(
                f"labels[{key}]: expected {ABSENT if want is None else repr(want)}, "
                f"got {ABSENT if got is None else repr(got)}"
            )
    return out


def _env(node: FakeNode, expected: EnvExpect) -> list[str]:
    pod = node.kubelet.pods.get(expected.pod)
    if pod is None:
        return [f"env: no pod {expected.pod!r} was allocated"]
    if not pod.admitted:
        return [f"env: pod {expected.pod!r} is {pod.phase} ({pod.reason}: {pod.message})"]
    env = pod.env(expected.container)
    out = []
    for name, want in sorted(expected.vars.items()):
        got = env.get(name)
        if got != want:
            out.append(f"env[{name}]: expected {want!r}, got {ABSENT if got is None else repr(got)}")
    for name, count in sorted(expected.distinct.items()):
        entries = {e for e in env.get(name, "").split(",") if e}
        if len(entries) != count:
            out.append(f"env[{name}]: expected {count} distinct entries, got {len(entries)}: {env.get(name, ABSENT)!r}")
    return out


def _checkpoint_pods(node: FakeNode, expected: list[str]) -> list[str]:
    try:
        data = node.kubelet.checkpoint()
    except CheckpointError as exc:
        return [f"checkpoint_pods: the checkpoint cannot be read: {exc}"]
    want = sorted(set(expected))
    if data is None:
        return [] if not want else [f"checkpoint_pods: expected {want}, got no checkpoint file"]
    got = sorted({e.pod_uid for e in data.pod_device_entries})
    return [] if got == want else [f"checkpoint_pods: expected {want}, got {got}"]


def _same_devices(pods: list[str], pod_devices: Mapping[str, Set[str]]) -> list[str]:
    unknown = [p for p in pods if p not in pod_devices]
    if unknown:
        return [f"same_devices: pod(s) {', '.join(unknown)} were never admitted with devices"]
    common = set.intersection(*(set(pod_devices[p]) for p in pods))
    if common:
        return []
    got = "; ".join(f"{p}={sorted(pod_devices[p])}" for p in pods)
    return [f"same_devices: expected {', '.join(pods)} to hold a common device, got {got}"]


def _serving(node: FakeNode, names: list[str]) -> list[str]:
    running = sorted(n for n, s in node.plugins.servers.items() if s.running)
    missing = [n for n in names if n not in running]
    return [f"serving: expected plugin servers for {missing}, got {running}"] if missing else []


def check(node: FakeNode, expect: Checks, pod_devices: Mapping[str, Set[str]]) -> list[str]:
    """Every mismatch between ``expect`` and the node now; empty when all hold."""
    problems: list[str] = []
    capacity, allocatable = node.capacity(), node.allocatable()
    if expect.capacity is not None:
        problems += _counts("capacity", expect.capacity, capacity)
    if expect.allocatable is not None:
        problems += _counts("allocatable", expect.allocatable, allocatable)
    if expect.resources_absent is not None:
        problems += _absent(expect.resources_absent, capacity, allocatable)
    if expect.labels is not None:
        problems += _labels(node, expect.labels)
    if expect.env is not None:
        problems += _env(node, expect.env)
    if expect.checkpoint_pods is not None:
        problems += _checkpoint_pods(node, expect.checkpoint_pods)
    if expect.same_devices is not None:
        problems += _same_devices(expect.same_devices, pod_devices)
    if expect.serving is not None:
        problems += _serving(node, expect.serving)
    return problems


def describe(expect: Checks) -> str:
    """A short one-line summary of what is checked."""
    parts = []
    if expect.capacity is not None:
        parts.append("capacity " + ", ".join(f"{k}={v}" for k, v in expect.capacity.items()))
    if expect.allocatable is not None:
        parts.append("allocatable " + ", ".join(f"{k}={v}" for k, v in expect.allocatable.items()))
    if expect.resources_absent is not None:
        parts.append("absent " + ", ".join(expect.resources_absent))
    if expect.labels is not None:
        parts.append(f"{len(expect.labels)} label(s)")
    if expect.env is not None:
        env = expect.env
        checks = [f"{k}={v}" for k, v in env.vars.items()] + [f"{k} has {n}" for k, n in env.distinct.items()]
        parts.append(f"env of {env.pod}/{env.container}: {', '.join(checks)}")
    if expect.checkpoint_pods is not None:
        parts.append(f"checkpoint pods [{', '.join(expect.checkpoint_pods)}]")
    if expect.same_devices is not None:
        parts.append(f"same devices for {', '.join(expect.same_devices)}")
    if expect.serving is not None:
        parts.append("serving " + ", ".join(expect.serving))
    return "; ".join(parts)
