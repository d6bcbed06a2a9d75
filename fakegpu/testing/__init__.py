"""Test harness over the real faces: the pytest plugin, the in-process fake node and scenarios.

Nothing heavy is imported here: pytest loads the plugin in every run of every project that installs
fakegpu, so the fixtures import the kubelet emulator and the plugins only when a test uses them.
``FakeNodeFactory`` is the type of the ``fakegpu_node`` fixture, for annotations.
"""

from fakegpu.testing.node_factory import FakeNodeFactory

__all__ = ["FakeNodeFactory"]
