"""The scenarios shipped with fakegpu: found from any directory, and run by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakegpu.cli.main import main
from fakegpu.cli.scenario_command import CATALOG, catalog_file

ROOT = Path(__file__).resolve().parents[2]


def test_the_catalog_is_the_repositorys_scenarios_directory():
    assert sorted(p.name for p in CATALOG.glob("*.yaml")) == sorted(p.name for p in (ROOT / "scenarios").glob("*.yaml"))
    assert len(list(CATALOG.glob("*.yaml"))) > 0


def test_list_without_paths_shows_the_catalog_by_name_from_anywhere(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)  # no ./scenarios here
    assert main(["scenario", "list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names == [p.stem for p in sorted((ROOT / "scenarios").glob("*.yaml"))]


@pytest.mark.parametrize("given", ["xid-marks-every-replica", "xid-marks-every-replica.yaml"])
def test_a_shipped_scenario_is_found_by_name(monkeypatch, tmp_path, given):
    monkeypatch.chdir(tmp_path)
    assert catalog_file(Path(given)) == CATALOG / "xid-marks-every-replica.yaml"


def test_an_existing_file_or_a_path_with_directories_is_taken_as_given(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "xid-marks-every-replica.yaml").write_text("mine")
    assert catalog_file(Path("xid-marks-every-replica.yaml")) == Path("xid-marks-every-replica.yaml")
    assert catalog_file(Path("sub/xid-marks-every-replica")) == Path("sub/xid-marks-every-replica")
    assert catalog_file(Path("no-such-scenario")) == Path("no-such-scenario")
    too_long = Path("n" * 300 + ".yaml")  # the loader, not the lookup, reports it
    assert catalog_file(too_long) == too_long


def test_run_by_name_from_anywhere(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["scenario", "run", "xid-marks-every-replica"]) == 0
    assert "PASS xid-marks-every-replica" in capsys.readouterr().out
