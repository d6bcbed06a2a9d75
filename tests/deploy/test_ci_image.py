"""CI builds the image: .ci/run calls .ci/build-image.sh before the README's test command (whose summary must
close CI's output), and the script
builds deploy/Containerfile on its own base through the Containerfile's PYTHON_IMAGE argument.

The build itself needs root, buildah and mmdebstrap, so it runs in CI (.ci/run), not here; these checks keep
the wiring from being dropped or drifting from the Containerfile unnoticed.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.deploy.manifests import DEPLOY, ROOT
from tests.test_readme import readme_commands

SCRIPT = ROOT / ".ci" / "build-image.sh"


def test_ci_builds_the_image_then_runs_the_readme_test_command_last() -> None:
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()]
    test_line = ci.index(readme_commands()[1])
    calls = [i for i, line in enumerate(ci) if line.strip() == "bash .ci/build-image.sh"]
    assert calls and calls[0] < test_line, ".ci/run must build the image before the README's test command"
    assert test_line == len(ci) - 1, "the README's test command must be the last line: its summary closes CI's output"


def test_the_script_builds_the_containerfile_on_its_own_base() -> None:
    script = SCRIPT.read_text()
    assert "-f deploy/Containerfile" in script
    assert '--build-arg "PYTHON_IMAGE=$BASE_IMAGE"' in script
    # The argument the script overrides is the one both stages start FROM.
    containerfile = (DEPLOY / "Containerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=", containerfile, flags=re.M)
    assert len(re.findall(r"^FROM \$\{PYTHON_IMAGE\}", containerfile, flags=re.M)) == 2
    # Host-only TLS and index settings are build-time mounts, never part of the Containerfile.
    assert "ca-certificates.crt" not in containerfile and "pip.conf" not in containerfile


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_script_is_valid_bash() -> None:
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
