"""deploy/requirements.lock pins exactly what pyproject.toml makes the image install, and the Containerfile
installs through it (no network here: the lock is read, not resolved).

Not NVIDIA behaviour: NVIDIA's images install Go binaries. The pattern follows pip's secure installs
(pypa/pip/docs/html/topics/secure-installs.md: --require-hashes with every requirement pinned).
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from deploy.lock_requirements import (
    DIGEST_PREFIX,
    LOCK,
    PROJECT_ROOT,
    inputs_digest,
    project_requirements,
)
from tests.deploy.manifests import ROOT
from tests.deploy.test_containerfile import stages

_PIN = re.compile(r"^(?P<name>[a-z0-9-]+)==(?P<version>[^\s\\]+)(?P<hashes>(?:\s*\\\s*--hash=sha256:[0-9a-f]{64})+)")


def parse_lock(text: str) -> dict[str, tuple[str, set[str]]]:
    """name -> (version, the names in its `# via` comment); every entry must carry at least one hash."""
    pins: dict[str, tuple[str, set[str]]] = {}
    entries = re.split(r"\n(?=[a-z0-9])", text.split("\n", 1)[1] if text.startswith("#") else text)
    for entry in entries:
        if entry.startswith("#"):
            continue
        match = _PIN.match(entry)
        assert match is not None, f"not an exact pin with sha256 hashes: {entry.splitlines()[0]!r}"
        via = re.search(r"^\s+# via (.+)$", entry, flags=re.M)
        assert via is not None, f"{match['name']}: no `# via` line"
        assert match["name"] not in pins, f"{match['name']} pinned twice"
        pins[match["name"]] = (match["version"], {v.strip() for v in via.group(1).split(",")})
    return pins


def lock_pins() -> dict[str, tuple[str, set[str]]]:
    return parse_lock(LOCK.read_text())


def pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_lock_was_generated_from_the_current_dependency_list() -> None:
    (digest,) = [line for line in LOCK.read_text().splitlines() if line.startswith(DIGEST_PREFIX)]
    assert digest.removeprefix(DIGEST_PREFIX) == inputs_digest(project_requirements()), (
        "pyproject.toml's dependencies changed since deploy/requirements.lock was written: "
        "run .venv/bin/python deploy/lock_requirements.py"
    )


def test_digest_changes_with_the_dependency_list() -> None:
    data = pyproject()
    changed = tomllib.loads((ROOT / "pyproject.toml").read_text())
    changed["project"]["dependencies"].append("rich>=13")
    assert inputs_digest(project_requirements(changed)) != inputs_digest(project_requirements(data))


def test_every_requirement_is_pinned_to_a_version_it_allows() -> None:
    pins = lock_pins()
    for line in project_requirements():
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in pins, f"{line} (pyproject.toml) is not in deploy/requirements.lock"
        version, via = pins[name]
        assert req.specifier.contains(version, prereleases=True), f"{name}=={version} does not satisfy {line}"
        assert PROJECT_ROOT in via, f"{name} is a direct requirement but the lock says it comes via {via}"


def test_nothing_is_pinned_that_the_package_does_not_need() -> None:
    pins = lock_pins()
    direct: set[str] = {canonicalize_name(Requirement(line).name) for line in project_requirements()}
    assert {name for name, (_, via) in pins.items() if PROJECT_ROOT in via} == direct
    reached: set[str] = set(direct)
    frontier = set(direct)
    while frontier:
        frontier = {name for name, (_, via) in pins.items() if via & frontier} - reached
        reached |= frontier
    for name, (_, via) in pins.items():
        assert via <= set(pins) | {PROJECT_ROOT}, f"{name} comes via {via - set(pins)}, which the lock lacks"
    assert set(pins) == reached, f"pinned but needed by nothing pyproject.toml asks for: {set(pins) - reached}"


def test_every_via_is_a_real_requirement_of_the_installed_parent() -> None:
    """The lock's `# via` edges, checked against the metadata of the packages this venv installed from
    pyproject.toml (versions may differ from the lock; dependency names rarely do)."""
    for name, (_, via) in lock_pins().items():
        for parent in via - {PROJECT_ROOT}:
            try:
                requires = importlib.metadata.requires(parent) or []
            except importlib.metadata.PackageNotFoundError:
                pytest.fail(f"{parent} (which the lock says needs {name}) is not installed: pip install -e '.[test]'")
            names = {canonicalize_name(Requirement(line).name) for line in requires}
            assert name in names, f"the lock says {parent} needs {name}; {parent}'s metadata does not name it"


def test_parse_lock_rejects_loose_or_unhashed_pins() -> None:
    good = "annotated-types==0.8.0 \\\n    --hash=sha256:" + "a" * 64 + "\n    # via pydantic\n"
    assert parse_lock(good) == {"annotated-types": ("0.8.0", {"pydantic"})}
    for bad in ("annotated-types>=0.8.0 \\\n    --hash=sha256:" + "a" * 64, "annotated-types==0.8.0\n    # via x"):
        with pytest.raises(AssertionError):
            parse_lock(bad + "\n")


def test_containerfile_installs_through_the_lock_and_nothing_else() -> None:
    builder, _ = stages()
    copies = [rest.split() for word, rest in builder if word == "COPY"]
    lock = str(LOCK.relative_to(ROOT))
    assert [lock, f"./{lock}"] in copies
    (run,) = [rest for word, rest in builder if word == "RUN"]
    installs = [cmd.split() for cmd in run.split("&&") if " install " in cmd]
    assert len(installs) == 2, run
    deps, project = installs
    assert {"--require-hashes", "--only-binary=:all:"} <= set(deps) and deps[-2:] == ["-r", lock]
    # fakegpu itself: no resolution (so no unpinned dependency), no isolated build env, no index.
    assert {"--no-deps", "--no-build-isolation", "--no-index"} <= set(project) and project[-1] == "/src"
    assert Path(ROOT / lock).is_file()
