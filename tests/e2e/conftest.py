"""End-to-end tests need a real cluster: they run only when KUBECONFIG points at one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REASON = "end-to-end test: set KUBECONFIG to a real cluster's kubeconfig to run it (skipped otherwise)"


def real_cluster() -> bool:
    path = os.environ.get("KUBECONFIG", "")
    return bool(path) and Path(path.split(os.pathsep)[0]).is_file()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if real_cluster():
        return
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.skip(reason=REASON))
