"""A user's tests: fakegpu's fixture allocates a fake GPU, and the user's own packages still import."""

from dra import DRIVER_NAME
from sharing import fair_share
from telemetry.rpc_metrics import PREFIX

from fakegpu.testing import FakeNodeFactory


async def test_a_pod_gets_one_fake_gpu(fakegpu_node: FakeNodeFactory) -> None:
    node = await fakegpu_node("2xa100-40gb")
    assert node.allocatable() == {"nvidia.com/gpu": 2}
    pod = await node.run_pod("trainer", {"main": {"nvidia.com/gpu": 1}})
    assert pod.admitted
    assert pod.env("main")["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")


def test_own_packages_are_the_users() -> None:
    assert DRIVER_NAME == "gpu.example.com"
    assert fair_share(8, 4) == 2
    assert PREFIX == "example_rpc"
