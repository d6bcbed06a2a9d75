"""Device IDs are deterministic per node and unique within it."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakegpu.sharing.catalog import CATALOG
from fakegpu.sharing.identifiers import gpu_uuid, mig_uuid, strip_replica
from fakegpu.sharing.inputs import InventoryInputs, load_inventory

MODELS = sorted(CATALOG)
MIG_MODELS = sorted(k for k, m in CATALOG.items() if m.mig_capable)


def _ids(node: str, gpus: str, layout: str | None, strategy: str, replicas: int, tmp: Path) -> list[str]:
    config = None
    if replicas > 1:
        config = tmp / "c.yaml"
        name = "nvidia.com/gpu"
        config.write_text(
            f"version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: {name}\n      replicas: {replicas}\n"
        )
    inv = load_inventory(
        InventoryInputs(
            node_name=node,
            gpus=(gpus,),
            mig_layout=layout,
            config_file=str(config) if config else None,
            cli_flags={"mig_strategy": strategy},
        )
    )
    return [d.id for r in inv.resources for d in r.devices]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    node=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=40),
    model=st.sampled_from(MIG_MODELS),
    count=st.integers(1, 8),
    layout=st.sampled_from([None, "all-balanced", "all-disabled"]),
    strategy=st.sampled_from(["none", "mixed"]),
    replicas=st.integers(1, 6),
)
def test_ids_unique_and_stable(tmp_path, node, model, count, layout, strategy, replicas):
    first = _ids(node, f"{count}x{model}", layout, strategy, replicas, tmp_path)
    again = _ids(node, f"{count}x{model}", layout, strategy, replicas, tmp_path)
    assert first == again
    assert len(first) == len(set(first))
    other = _ids(node + "-other", f"{count}x{model}", layout, strategy, replicas, tmp_path)
    assert not set(map(strip_replica, first)) & set(map(strip_replica, other))


def test_known_values_never_change():
    """Pinned: a change here would orphan every checkpointed allocation after an upgrade."""
    assert gpu_uuid("node-a", 0) == gpu_uuid("node-a", 0)
    assert gpu_uuid("node-a", 0) != gpu_uuid("node-a", 1)
    assert gpu_uuid("kind-worker", 0) == "GPU-edd28c9c-56c8-5299-832b-70173c58b28d"
    assert mig_uuid("kind-worker", 0, "1g.10gb", 0) == "MIG-2cd14eec-7124-5df8-8172-0668ac69f30e"
    assert mig_uuid("n", 0, "1g.10gb", 0) != mig_uuid("n", 0, "1g.10gb", 1)
    assert strip_replica("GPU-x::3") == "GPU-x"
