"""fakegpu installed as a user installs it: built into a wheel and an sdist, put in a fresh venv, and used
by a user's project that has its own ``dra/``, ``sharing/`` and ``telemetry/`` packages.

The wheel is built from the sdist (``python -m build`` does that when asked for both), so a file the sdist
forgets fails here too. Nothing of this checkout is on the fresh venv's path: the user's tests see only
the wheel.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USER_PROJECT = Path(__file__).resolve().parent / "user_project"
SCENARIOS = sorted(p.name for p in (ROOT / "scenarios").glob("*.yaml"))


@dataclass(frozen=True)
class Installed:
    wheel: Path
    sdist: Path
    venv: Path
    project: Path

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)


def clean_env() -> dict[str, str]:
    """The environment without this checkout's venv or path, as a user's shell would have it."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(*args: str, cwd: Path | str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, check=False, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def pinned(name: str) -> str:
    """The requirement our own test extras use for ``name``, so the fresh venv installs the same tool."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    for requirement in extras:
        if re.split(r"[<>=!~\[ ]", requirement, maxsplit=1)[0].lower() == name:
            return str(requirement)
    raise AssertionError(f"{name} is not among the test extras")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    work = tmp_path_factory.mktemp("wheel")
    dist = work / "dist"
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT), cwd=work)
    (wheel,) = dist.glob("fakegpu-*.whl")
    (sdist,) = dist.glob("fakegpu-*.tar.gz")
    venv = work / "venv"
    run(sys.executable, "-m", "venv", str(venv), cwd=work)
    run(
        str(venv / "bin" / "pip"),
        "install",
        "-q",
        f"{wheel}[pytest]",
        pinned("mypy"),
        cwd=work,
    )
    project = work / "user-project"
    shutil.copytree(USER_PROJECT, project, ignore=shutil.ignore_patterns("__pycache__", ".mypy_cache"))
    yield Installed(wheel, sdist, venv, project)


def test_the_wheel_installs_only_the_fakegpu_package(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    version = installed.wheel.name.split("-")[1]
    assert tops == {"fakegpu", f"fakegpu-{version}.dist-info"}
    assert "fakegpu/py.typed" in names
    assert sorted(n.removeprefix("fakegpu/scenarios/") for n in names if n.endswith(".yaml")) == SCENARIOS
    entry_points = zipfile.ZipFile(installed.wheel).read(
        next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    )
    assert b"fakegpu = fakegpu.testing.pytest_plugin" in entry_points


def test_the_sdist_carries_the_scenarios(installed: Installed) -> None:
    with tarfile.open(installed.sdist) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
    assert {f"fakegpu/scenarios/{name}" for name in SCENARIOS} <= members
    assert "fakegpu/py.typed" in members


def test_a_user_project_with_its_own_dra_sharing_telemetry_passes(installed: Installed) -> None:
    done = run(installed.bin("python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=installed.project)
    assert re.search(r"^2 passed", done.stdout, re.M), done.stdout


def test_the_users_test_is_mypy_strict_clean(installed: Installed) -> None:
    done = run(installed.bin("python"), "-m", "mypy", "--strict", "tests", cwd=installed.project)
    assert done.stdout.startswith("Success: no issues found in 1 source file"), done.stdout


def test_the_shipped_scenarios_are_listed_from_anywhere(installed: Installed) -> None:
    done = run(installed.bin("fakegpu"), "scenario", "list", cwd="/")
    listed = [line.split()[0] for line in done.stdout.splitlines()]
    assert listed == [name.removesuffix(".yaml") for name in SCENARIOS]


def test_version(installed: Installed) -> None:
    version = installed.wheel.name.split("-")[1]
    for flag in ("--version", "-V"):
        done = run(installed.bin("fakegpu"), flag, cwd="/")
        assert re.fullmatch(
            rf"fakegpu {re.escape(version)} \(emulated NVIDIA driver [0-9.]+, CUDA [0-9.]+\)\n", done.stdout
        ), done.stdout


def test_the_pytest_plugin_loads_nothing_heavy(installed: Installed) -> None:
    """pytest imports the plugin in every run of every project that installs fakegpu."""
    probe = (
        "import sys, fakegpu.testing.pytest_plugin\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'grpc', 'google', 'lightkube', 'pydantic', 'yaml', 'prometheus_client', 'httpx2'} "
        "or (m.startswith('fakegpu.') and not m.startswith('fakegpu.testing')))\n"
        "print(heavy)\n"
    )
    done = run(installed.bin("python"), "-c", probe, cwd="/")
    assert done.stdout.strip() == "[]"
