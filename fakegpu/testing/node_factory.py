"""The ``fakegpu_node`` fixture's factory, and its type for users' annotations.

Importing this module is cheap (the pytest plugin imports it in every test run of every project that has
fakegpu installed): the kubelet emulator, the plugins, gRPC and pydantic are imported on the first call.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fakegpu.fakeplugin.plugin_manager import RegistrationMode
    from fakegpu.testing.fake_node import FakeNode


def _write(root: Path, name: str, content: dict[str, Any] | str | None) -> str | None:
    if content is None:
        return None
    import yaml  # noqa: PLC0415 - only a node with a config pays for YAML

    path = root / name
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return str(path)


class FakeNodeFactory:
    """What ``fakegpu_node`` is: ``node = await fakegpu_node("2xa100-40gb", config={...})``.

    Annotate the fixture with it (``async def test_x(fakegpu_node: FakeNodeFactory) -> None``) and a
    strict type checker sees every keyword and the :class:`~fakegpu.testing.fake_node.FakeNode` returned.
    Each node gets its own directory under ``root``; :meth:`stop_all` stops every node made.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.nodes: list[FakeNode] = []

    async def __call__(
        self,
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
        from fakegpu.sharing.inputs import InventoryInputs  # noqa: PLC0415 - see the module docstring
        from fakegpu.testing.fake_node import FakeNode  # noqa: PLC0415

        sub = self.root / f"n{len(self.nodes)}"
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
        self.nodes.append(node)
        await node.start()
        return node

    async def stop_all(self) -> None:
        """Stop every node, then raise the first failure: a node that cannot stop fails the test."""
        errors: list[Exception] = []
        for node in self.nodes:
            try:
                await node.stop()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
