"""pytest plugin (entry point ``fakegpu``): fake GPU nodes for integration tests.

Fixtures:

- ``fakegpu_dir``: a short temporary kubelet root (Unix socket paths must stay under 108 bytes).
- ``fakegpu_node``: an async factory; ``node = await fakegpu_node(gpus="8xh100-80gb", config={...})``
  starts a kubelet emulator and fakegpu's device plugins and waits until the kubelet sees every
  device. The node offers ``capacity()``, ``allocatable()``, ``run_pod()``, ``set_health()``,
  ``restart_kubelet()`` and more; it is stopped when the test ends.

Needs pytest-asyncio (``pip install 'fakegpu[pytest]'``).
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakegpu.fakeplugin.plugin_manager import RegistrationMode
from fakegpu.sharing.inputs import InventoryInputs
from fakegpu.testing.fake_node import FakeNode

HAVE_PYTEST_ASYNCIO = importlib.util.find_spec("pytest_asyncio") is not None


@pytest.fixture
def fakegpu_dir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="fgpu-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _write(root: Path, name: str, content: dict[str, Any] | str | None) -> str | None:
    if content is None:
        return None
    path = root / name
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return str(path)


async def _node_factory(root: Path) -> AsyncIterator[Callable[..., Awaitable[FakeNode]]]:
    nodes: list[FakeNode] = []

    async def make(
        gpus: str | tuple[str, ...] = "8xh100-80gb",
        *,
        config: dict[str, Any] | str | None = None,
        node_spec: dict[str, Any] | str | None = None,
        mig_layout: str | None = None,
        mig_strategy: str | None = None,
        flags: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        node_name: str = "fake-node",
        registration: RegistrationMode = "kubelet",
        pre_start_required: bool = False,
        grace_period: float = 300.0,
        bugs: tuple[str, ...] = (),
    ) -> FakeNode:
        sub = root / f"n{len(nodes)}"
        sub.mkdir()
        cli: dict[str, str | bool | None] = dict(flags or {})
        if mig_strategy is not None:
            cli["mig_strategy"] = mig_strategy
        spec_file = _write(sub, "node.yaml", node_spec)
        inputs = InventoryInputs(
            node_name=node_name,
            node_spec=spec_file,
            gpus=() if spec_file else ((gpus,) if isinstance(gpus, str) else tuple(gpus)),
            mig_layout=mig_layout,
            config_file=_write(sub, "config.yaml", config),
            cli_flags=cli,
            env=env or {},
        )
        node = FakeNode(
            sub / "kubelet",
            inputs,
            registration=registration,
            pre_start_required=pre_start_required,
            grace_period=grace_period,
            bugs=bugs,
        )
        nodes.append(node)
        await node.start()
        return node

    try:
        yield make
    finally:
        for node in nodes:
            await node.stop()


if HAVE_PYTEST_ASYNCIO:
    import pytest_asyncio

    @pytest_asyncio.fixture
    async def fakegpu_node(fakegpu_dir: Path) -> AsyncIterator[Callable[..., Awaitable[FakeNode]]]:
        async for make in _node_factory(fakegpu_dir):
            yield make

else:  # pragma: no cover

    @pytest.fixture
    def fakegpu_node() -> None:
        pytest.fail("the fakegpu_node fixture needs pytest-asyncio: pip install 'fakegpu[pytest]'")
