"""Device taints as the driver sent them, from a slice the tests' API server stored.

A real API server stamps ``timeAdded`` on a device taint written without one (kubernetes
``pkg/apis/resource/v1/defaults.go``), and so does the tests' API server; fakegpu, as NVIDIA's driver, sends
none. Tests comparing taints exactly check the stamp is there and compare the rest."""

from __future__ import annotations

from typing import Any


def as_sent(taints: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """``taints`` without ``timeAdded``, after checking every one has it (None stays None)."""
    if taints is None:
        return None
    assert all("timeAdded" in t for t in taints), f"the API server stamps timeAdded on every taint: {taints}"
    return [{k: v for k, v in t.items() if k != "timeAdded"} for t in taints]
