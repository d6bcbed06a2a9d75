"""README.md says which NVIDIA DRA driver its fault table follows, and where fakegpu parts from NVIDIA's GPU
health checking guide (kubernetes-sigs/dra-driver-nvidia-gpu ``site/content/docs/guides/gpu-health-checking.md``
@ 132094a): the guide's built-in non-fatal XIDs are fakegpu's, and its gate rule (``NVMLDeviceHealthCheck``
refused with ``DynamicMIG`` or ``PassthroughSupport``) is v0.4.x's, where fakegpu follows ``ValidateFeatureGates``
on main (``pkg/featuregates/featuregates.go`` @ 0807eed), which allows ``DynamicMIG`` with it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fakegpu.dra.feature_gates import parse_feature_gates, validate_feature_gates
from fakegpu.sharing.health import DEFAULT_IGNORED_XIDS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
GUIDE = "`site/content/docs/guides/gpu-health-checking.md` at commit 132094a"


def test_the_fault_table_names_the_driver_docs_it_follows_and_their_non_fatal_xids_are_ours():
    after_table = README.split("| kind | XIDs | device plugin (ListAndWatch) |", 1)[1]
    paragraph = " ".join(after_table.split("\n\n", 2)[1].split())
    assert GUIDE in paragraph
    listed = re.search(r"the built-in non-fatal ([\d, ]+) plus", paragraph)
    assert listed is not None, paragraph
    assert {int(x) for x in listed.group(1).split(",")} == set(DEFAULT_IGNORED_XIDS)


def test_the_gate_exclusion_the_guide_states_is_a_difference_row_and_true_of_the_code():
    differences = README.split("## Differences from NVIDIA", 1)[1]
    (row,) = [x for x in differences.splitlines() if x.startswith("| `NVMLDeviceHealthCheck` with `DynamicMIG` |")]
    assert "gpu-health-checking.md" in row and "0807eed" in row
    validate_feature_gates(parse_feature_gates("DynamicMIG=true,NVMLDeviceHealthCheck=true"))
    with pytest.raises(
        ValueError, match="PassthroughSupport is currently mutually exclusive with NVMLDeviceHealthCheck"
    ):
        validate_feature_gates(parse_feature_gates("PassthroughSupport=true,NVMLDeviceHealthCheck=true"))
