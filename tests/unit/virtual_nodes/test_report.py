"""The summary lines: what was written, per kind, in short lines."""

from __future__ import annotations

import collections

from fakegpu.virtual_nodes.extended_classes import delete_selector
from fakegpu.virtual_nodes.report import CLASS_SELECTOR, BringUpReport, DeleteReport, Outcome, calls_line


def test_a_node_whose_only_change_was_its_slices_is_not_an_updated_node():
    report = BringUpReport(seconds=2.0)
    for i in range(20):
        name = f"vn-{i:04d}"
        report.outcomes[name] = Outcome.UNCHANGED
        report.note_slices(name, collections.Counter(updated=1, created=8, deleted=1))
    report.outcomes["vn-0020"] = Outcome.UNCHANGED
    report.note_slices("vn-0020", collections.Counter())  # nothing written: not a node with slice writes
    nodes, slices = report.lines()
    assert nodes == "nodes: 0 created, 0 adopted, 0 updated, 21 unchanged, 0 refused, 0 failed in 2.00 s (10/s)"
    assert slices == "ResourceSlices: 160 created, 20 updated, 20 deleted on 20 node(s)"
    assert report.ok and report.count(Outcome.UPDATED) == 0


def test_a_run_that_wrote_nothing_says_so_without_the_extras():
    report = BringUpReport()
    report.outcomes["vn-0000"] = Outcome.UNCHANGED
    assert report.lines() == [
        "nodes: 0 created, 0 adopted, 0 updated, 1 unchanged, 0 refused, 0 failed in 0.00 s",
        "ResourceSlices: 0 created, 0 updated, 0 deleted",
    ]


def test_device_classes_get_their_line_once_counted_and_lines_stay_short():
    report = BringUpReport(seconds=1.5)
    report.outcomes.update({"vn-0000": Outcome.CREATED, "vn-0001": Outcome.ADOPTED, "vn-0002": Outcome.UPDATED})
    report.slices["created"] += 2  # the controller's way of counting keeps working
    report.device_classes["created"] += 2
    lines = report.lines()
    assert lines[0].startswith("nodes: 1 created, 1 adopted, 1 updated, 0 unchanged")
    assert lines[1] == "ResourceSlices: 2 created, 0 updated, 0 deleted"
    assert lines[2] == "DeviceClasses: 2 created, 0 replaced"
    unchanged = BringUpReport()
    unchanged.device_classes["created"] += 0  # dra-extended in play, nothing to write
    assert unchanged.lines()[-1] == "DeviceClasses: 0 created, 0 replaced"
    assert all(len(line) <= 100 for line in lines)


def test_problems_and_leftovers_are_capped():
    report = BringUpReport(leftovers=[f"old-{i}" for i in range(7)])
    report.problems.update({f"vn-{i:04d}": "500 boom" for i in range(12)})
    lines = report.lines()
    assert not report.ok
    assert "7 virtual node(s) of an earlier run" in lines[2] and lines[2].count("old-") == 5
    assert lines[-1] == "error: ... and 2 more" and sum(line.startswith("error: vn-") for line in lines) == 10


def test_delete_lines_name_the_device_classes_it_keeps():
    report = DeleteReport(nodes_deleted=3, nodes_released=1, slices_deleted=9, seconds=0.5)
    assert report.lines() == [
        "deleted 3 node(s) with their ResourceSlices, handed back 1 adopted node(s) and deleted 9 of their "
        "ResourceSlice(s) in 0.50 s"
    ]
    report.classes_kept = ["gpu.nvidia.com", "mig.nvidia.com"]
    kept = report.lines()[1]
    assert "gpu.nvidia.com, mig.nvidia.com" in kept and f"kubectl delete deviceclass -l {delete_selector()}" in kept
    assert delete_selector() == CLASS_SELECTOR


def test_calls_line():
    assert calls_line({"create": 3, "list": 2, "patch": 0}) == "API calls: 5 (create 3, list 2)"
    assert calls_line({}) == "API calls: 0"
