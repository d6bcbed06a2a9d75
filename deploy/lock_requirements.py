"""Write deploy/requirements.lock: every package the image installs, exact versions and wheel hashes.

Run from the repository root with the development venv (it has `packaging`):

    .venv/bin/python deploy/lock_requirements.py

pip's own resolver does the work, in a throwaway venv with this machine's pip configuration switched off
(PIP_CONFIG_FILE=/dev/null, no PIP_* variables but PIP_CERT), so the lock reflects the public index and
pyproject.toml only. It resolves pyproject's [project] dependencies plus its build-system requirements
(the Containerfile builds fakegpu without build isolation, so the build backend is pinned too) for the
image's interpreter, CPython 3.11 on glibc Linux, once per architecture, wheels only. tests/deploy checks
the lock against pyproject.toml without the network.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
LOCK = ROOT / "deploy" / "requirements.lock"
COMMAND = ".venv/bin/python deploy/lock_requirements.py"
# The image's interpreter: python:3.11-slim, or Debian bookworm's python3 (glibc 2.36) in CI.
PYTHON_VERSION = "3.11"
ARCHITECTURES = ("x86_64", "aarch64")
GLIBC_MINORS = range(17, 37)
# What pip marks the packages pyproject names with, in the lock's `# via` comments.
PROJECT_ROOT = "pyproject.toml"
DIGEST_PREFIX = "# inputs-sha256: "
MARKER_ENV = {
    "python_version": PYTHON_VERSION,
    "python_full_version": f"{PYTHON_VERSION}.0",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "platform_python_implementation": "CPython",
    "implementation_name": "cpython",
}


def project_requirements(pyproject: Mapping[str, Any] | None = None) -> list[str]:
    """pyproject's runtime dependencies and build-system requirements: the image installs both."""
    data = pyproject if pyproject is not None else tomllib.loads(PYPROJECT.read_text())
    return sorted([*data["project"]["dependencies"], *data["build-system"]["requires"]])


def inputs_digest(requirements: Iterable[str]) -> str:
    """A digest of what the lock was resolved from; the test recomputes it from the current pyproject."""
    payload = {"requirements": sorted(requirements), "python": PYTHON_VERSION, "architectures": list(ARCHITECTURES)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@dataclass
class Pin:
    """One locked package: exact version, the wheel hashes of every architecture, who needs it."""

    name: str
    version: str
    hashes: set[str] = field(default_factory=set)
    via: set[str] = field(default_factory=set)


def _pip_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k == "PIP_CERT"}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def _resolve(pip: Path, requirements: list[str], arch: str, workdir: Path) -> list[dict[str, Any]]:
    """pip's installation report for one architecture (a dry run: nothing is installed)."""
    report = workdir / f"report-{arch}.json"
    platforms = [f"--platform=manylinux_2_{minor}_{arch}" for minor in GLIBC_MINORS]
    subprocess.run(
        [
            str(pip),
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--dry-run",
            "--ignore-installed",
            f"--target={workdir / 'target'}",
            "--only-binary=:all:",
            f"--python-version={PYTHON_VERSION}",
            "--implementation=cp",
            f"--abi=cp{PYTHON_VERSION.replace('.', '')}",
            "--abi=abi3",
            "--abi=none",
            *platforms,
            f"--platform=manylinux2014_{arch}",
            f"--report={report}",
            *requirements,
        ],
        check=True,
        env=_pip_env(),
    )
    installs: list[dict[str, Any]] = json.loads(report.read_text())["install"]
    return installs


def _needed_by(installs: list[dict[str, Any]], requirements: list[str]) -> dict[str, set[str]]:
    """name -> the packages (or pyproject.toml) whose requirements pull it in, following extras and markers."""
    metadata = {canonicalize_name(i["metadata"]["name"]): i["metadata"] for i in installs}
    via: dict[str, set[str]] = {}
    expanded: set[tuple[str, str]] = set()
    queue: list[tuple[str, Requirement]] = [(PROJECT_ROOT, Requirement(r)) for r in requirements]
    while queue:
        parent, req = queue.pop()
        name = canonicalize_name(req.name)
        via.setdefault(name, set()).add(parent)
        # "" stands for the package's unconditional requirements, the rest for the extras asked of it.
        for extra in ("", *sorted(req.extras)):
            if (name, extra) in expanded:
                continue
            expanded.add((name, extra))
            for line in metadata[name].get("requires_dist") or []:
                child = Requirement(line)
                applies = child.marker.evaluate({**MARKER_ENV, "extra": extra}) if child.marker else extra == ""
                if applies:
                    queue.append((name, child))
    return via


def resolve(requirements: list[str]) -> dict[str, Pin]:
    """Resolve once per architecture in a fresh venv and merge; the versions must agree."""
    pins: dict[str, Pin] = {}
    with tempfile.TemporaryDirectory(prefix="fakegpu-lock-") as tmp:
        workdir = Path(tmp)
        subprocess.run([sys.executable, "-m", "venv", str(workdir / "venv")], check=True)
        pip = workdir / "venv" / "bin" / "pip"
        for arch in ARCHITECTURES:
            installs = _resolve(pip, requirements, arch, workdir)
            via = _needed_by(installs, requirements)
            for item in installs:
                name = canonicalize_name(item["metadata"]["name"])
                version = item["metadata"]["version"]
                pin = pins.setdefault(name, Pin(name, version))
                if pin.version != version:
                    raise SystemExit(f"{name}: {pin.version} on one architecture, {version} on {arch}")
                if name not in via:
                    raise SystemExit(f"{name}: pip installs it for {arch}, but no requirement pulls it in")
                pin.hashes.add(item["download_info"]["archive_info"]["hashes"]["sha256"])
                pin.via |= via[name]
    return pins


def render(pins: Mapping[str, Pin], requirements: list[str]) -> str:
    lines = [
        "# Every package deploy/Containerfile installs: exact versions and the sha256 of their wheels",
        f"# for CPython {PYTHON_VERSION} on glibc Linux ({', '.join(ARCHITECTURES)}). Generated; do not edit.",
        f"# Regenerate after changing pyproject.toml's dependencies or build-system requirements: {COMMAND}",
        f"{DIGEST_PREFIX}{inputs_digest(requirements)}",
    ]
    for name in sorted(pins):
        pin = pins[name]
        hashes = [f"    --hash=sha256:{h}" for h in sorted(pin.hashes)]
        lines.append(" \\\n".join([f"{name}=={pin.version}", *hashes]))
        lines.append(f"    # via {', '.join(sorted(pin.via))}")
    return "\n".join(lines) + "\n"


def main() -> int:
    requirements = project_requirements()
    LOCK.write_text(render(resolve(requirements), requirements))
    print(f"wrote {LOCK.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
