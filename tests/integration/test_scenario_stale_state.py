"""Scenarios cannot pass on stale state: an inject step returns only once the kubelet has seen its effect,
so an ``expect`` right after it checks the new state, never the old one (issue 15, section 1)."""

from __future__ import annotations

import io
from pathlib import Path

from fakegpu.testing.scenario import EXIT_FAIL, EXIT_PASS, run_files

HEADER = "name: t\nissue: example/repo#1\ndescription: a stale-state regression\nnode: {gpus: 2xh100-80gb}\n"


async def run(tmp_path: Path, steps: str) -> tuple[int, str]:
    path = tmp_path / "s.yaml"
    path.write_text(HEADER + "steps:\n" + steps)
    out, err = io.StringIO(), io.StringIO()
    status = await run_files([path], out, err)
    return status, out.getvalue() + err.getvalue()


async def test_an_expect_right_after_an_xid_sees_the_xid(tmp_path):
    """The false PASS of issue 15: ``xid 79`` on GPU 0 then ``expect allocatable 2`` printed PASS in 0 ms
    (the kubelet had not seen the XID yet); the right value is 1, so the expect must fail."""
    status, out = await run(
        tmp_path,
        "  - xid: {gpu: 0, xid: 79}\n  - expect: {allocatable: {nvidia.com/gpu: 2}, within: 0.3}\n",
    )
    assert status == EXIT_FAIL, out
    assert "allocatable[nvidia.com/gpu]: expected 2, got 1" in out


async def test_the_true_value_passes_right_after_the_xid(tmp_path):
    status, out = await run(
        tmp_path, "  - xid: {gpu: 0, xid: 79}\n  - expect_now: {allocatable: {nvidia.com/gpu: 1}}\n"
    )
    assert status == EXIT_PASS, out
