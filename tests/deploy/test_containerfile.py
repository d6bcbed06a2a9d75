"""deploy/Containerfile builds from the repository root: every path it copies exists, it copies every package
pyproject.toml installs, and the final stage runs `fakegpu` (the manifests pass only its arguments)."""

from __future__ import annotations

import json
import re
import tomllib

from tests.deploy.manifests import DEPLOY, IMAGE, OVERLAYS, ROOT, WORKLOAD_KINDS, pod_spec, render

CONTAINERFILE = DEPLOY / "Containerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for instruction in instructions():
        if instruction[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def test_two_stages_from_the_same_python_image() -> None:
    builder, final = stages()
    assert builder[0][1].endswith(" AS builder")
    assert final[0][1] == builder[0][1].removesuffix(" AS builder")
    args = {
        rest.split("=", 1)[0]: rest.split("=", 1)[1] for word, rest in instructions() if word == "ARG" and "=" in rest
    }
    assert args.get("PYTHON_IMAGE") == "python:3.11-slim"
    # Nothing but the built environment reaches the final image.
    assert [w for w, _ in final if w in ("RUN", "ADD")] == []
    assert [rest for w, rest in final if w == "COPY"] == ["--from=builder /opt/fakegpu /opt/fakegpu"]


def test_builder_copies_every_installed_package_and_nothing_missing() -> None:
    builder, _ = stages()
    sources = [src for w, rest in builder if w == "COPY" for src in rest.split()[:-1]]
    for src in sources:
        assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages <= set(sources), f"packages not copied into the image: {packages - set(sources)}"
    assert {"pyproject.toml", pyproject["project"]["readme"]} <= set(sources)


def test_entrypoint_is_the_fakegpu_console_script() -> None:
    _, final = stages()
    (entrypoint,) = [rest for w, rest in final if w == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["fakegpu"]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "fakegpu" in pyproject["project"]["scripts"]
    for overlay in OVERLAYS:
        for workload in (o for o in render(overlay) if o["kind"] in WORKLOAD_KINDS):
            for container in pod_spec(workload)["containers"]:
                assert container["image"] == IMAGE
                assert "command" not in container, "the image's ENTRYPOINT runs fakegpu; pass arguments only"
