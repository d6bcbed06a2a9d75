"""pytest plugin (entry point ``fakegpu``): fake GPU nodes for integration tests.

Fixtures:

- ``fakegpu_dir``: a short temporary kubelet root (Unix socket paths must stay under 108 bytes).
- ``fakegpu_node``: an async factory (:class:`~fakegpu.testing.FakeNodeFactory`);
  ``node = await fakegpu_node(gpus="8xh100-80gb", config={...})`` starts a kubelet emulator and
  fakegpu's device plugins and waits until the kubelet sees every device. The node offers
  ``capacity()``, ``allocatable()``, ``run_pod()``, ``await set_health()``, ``restart_kubelet()`` and more
  (each action returns once the kubelet has seen its effect, so a test can assert right after it); it is
  stopped when the test ends.

Needs pytest-asyncio (``pip install 'fakegpu[pytest]'``). pytest loads this module in every run of every
project that installs fakegpu, so it imports only the standard library and pytest: the emulator and the
plugins load when a test first asks for ``fakegpu_node``.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from fakegpu.testing.node_factory import FakeNodeFactory

HAVE_PYTEST_ASYNCIO = importlib.util.find_spec("pytest_asyncio") is not None


@pytest.fixture
def fakegpu_dir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="fgpu-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


if HAVE_PYTEST_ASYNCIO:
    import pytest_asyncio

    @pytest_asyncio.fixture
    async def fakegpu_node(fakegpu_dir: Path) -> AsyncIterator[FakeNodeFactory]:
        factory = FakeNodeFactory(fakegpu_dir)
        try:
            yield factory
        finally:
            await factory.stop_all()

else:  # pragma: no cover

    @pytest.fixture
    def fakegpu_node() -> None:
        pytest.fail("the fakegpu_node fixture needs pytest-asyncio: pip install 'fakegpu[pytest]'")
