"""``fakegpu nvidia-smi``: inventory options or a devices.json, nvidia-smi's options after them."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from fakegpu.cli.inventory_options import inventory_inputs
from fakegpu.cli.main import full_parser, main
from fakegpu.cli.nvidia_smi_command import (
    add_nvidia_smi_parser,
    apply_inject_flags,
    check_nvidia_smi_dir,
    run_nvidia_smi_command,
)
from fakegpu.sharing.errors import SpecError
from fakegpu.telemetry.nvidia_smi.devices import to_json
from fakegpu.telemetry.nvidia_smi.injection import DEFAULT_DRA_DIR, DEFAULT_PLUGIN_DIR
from tests.unit.nvidia_smi.helpers import QTS, TS, mixed


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fakegpu")
    add_nvidia_smi_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["nvidia-smi", *argv])


def test_options_keep_nvidia_smis_order():
    args = parse("--gpus", "2xt4", "-q", "-i", "1", "--query-gpu=name", "--format", "csv", "-L")
    assert args.smi_argv == ["-q", "-i", "1", "--query-gpu", "name", "--format", "csv", "-L"]
    assert parse("--gpus", "2xt4").smi_argv == []


def test_subcommands_come_first_whatever_their_place_among_the_inventory_options():
    assert parse("topo", "--gpus", "2xt4", "-m").smi_argv == ["topo", "-m"]
    assert parse("--gpus", "2xt4", "mig", "-i", "0", "-lgip").smi_argv == ["mig", "-i", "0", "-lgip"]
    assert parse("--gpus", "2xt4", "mig", "--list-compute-instances").smi_argv == ["mig", "--list-compute-instances"]
    with pytest.raises(SystemExit):
        parse("--gpus", "2xt4", "nvlink", "-s")


def test_topo_and_mig_through_main(capsys):
    """What scripts run on a node: ``fakegpu nvidia-smi topo -m`` and ``mig -lgi`` as nvidia-smi prints them."""
    env = {"NODE_NAME": "node-a"}
    assert run_nvidia_smi_command(parse("--gpus", "2xh100-80gb", "topo", "-m"), env) == 0
    assert capsys.readouterr().out.splitlines()[:2] == [
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID",
        "GPU0\t X \tNV18\t\t0\t\tN/A",
    ]
    argv = ["nvidia-smi", "--gpus", "2xh100-80gb", "--mig-layout", "all-balanced", "mig", "-lgi"]
    assert main(argv) == 0
    assert capsys.readouterr().out.count("|   1  MIG ") == 4
    assert main(["nvidia-smi", "--gpus", "1xt4", "mig", "-lgip"]) == 6
    assert capsys.readouterr().out == "No MIG-enabled devices found.\n"


def test_inventory_options_and_visible_devices(capsys):
    env = {"NODE_NAME": "node-a", "NVIDIA_VISIBLE_DEVICES": "1", "FAKEGPU_NVIDIA_SMI_TIME": TS}
    assert (
        run_nvidia_smi_command(parse("--gpus", "2xt4", "--query-gpu=index,pci.bus_id,count", "--format=csv"), env) == 0
    )
    assert capsys.readouterr().out == "index, pci.bus_id, count\n0, 00000000:28:00.0, 1\n"


def test_devices_file_from_flag_or_environment(tmp_path, capsys):
    node = mixed()
    path = tmp_path / "devices.json"
    path.write_text(json.dumps(to_json(node)))
    assert run_nvidia_smi_command(parse("--devices-file", str(path), "-L"), {"NODE_NAME": "x"}) == 0
    listing = capsys.readouterr().out
    assert listing.count("MIG ") == 3
    assert run_nvidia_smi_command(parse("-L"), {"FAKEGPU_DEVICES_FILE": str(path)}) == 0
    assert capsys.readouterr().out == listing


def test_exit_status_is_nvidia_smis(capsys):
    env = {"NODE_NAME": "n", "NVIDIA_VISIBLE_DEVICES": "none"}
    assert run_nvidia_smi_command(parse("-L"), env) == 6
    assert capsys.readouterr().out == "No devices were found\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--devices-file", "/nonexistent/devices.json"], "cannot read the devices file"),
        (["--devices-file", "{path}", "--gpus", "1xt4"], "cannot be combined with --gpus"),
        (["--devices-file", "{path}"], "expected kind"),
    ],
)
def test_bad_devices_file_is_a_usage_error(tmp_path, capsys, argv, message):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    args = parse(*(a.format(path=bad) for a in argv))
    assert run_nvidia_smi_command(args, {"NODE_NAME": "n"}) == 2
    assert message in capsys.readouterr().err


def test_fakegpu_visible_devices_wins_and_unset_means_all_on_the_host(capsys):
    base = {"NODE_NAME": "node-a", "FAKEGPU_NVIDIA_SMI_QUERY_TIME": QTS}
    args = parse("--gpus", "4xt4", "--query-gpu=index,pci.bus_id,count,timestamp", "--format=csv,noheader")
    env = {**base, "NVIDIA_VISIBLE_DEVICES": "all", "FAKEGPU_VISIBLE_DEVICES": "2"}
    assert run_nvidia_smi_command(args, env) == 0
    assert capsys.readouterr().out == f"0, 00000000:38:00.0, 1, {QTS}\n"
    assert run_nvidia_smi_command(args, base) == 0
    assert capsys.readouterr().out.count("\n") == 4


def test_nvidia_smi_options_are_never_abbreviated():
    with pytest.raises(SystemExit) as exited:
        parse("--gpus", "1xt4", "--list")
    assert exited.value.code == 2


# --- the daemons' --inject-nvidia-smi / --nvidia-smi-dir ------------------------------------------------


def daemon_args(command: str, *extra: str) -> argparse.Namespace:
    return full_parser().parse_args([command, "--node-name", "n1", "--gpus", "1xt4", *extra])


@pytest.mark.parametrize("command", ["plugin", "dra"])
def test_inject_flags_reach_the_inputs(command, tmp_path):
    def inputs(*extra: str) -> str | None:
        args = daemon_args(command, *extra)
        return apply_inject_flags(args, inventory_inputs(args, {}), path_env="").nvidia_smi_dir

    assert inputs() is None
    default = {"plugin": DEFAULT_PLUGIN_DIR, "dra": DEFAULT_DRA_DIR}[command]
    assert inputs("--inject-nvidia-smi") == default
    assert inputs("--inject-nvidia-smi", "--nvidia-smi-dir", f"{tmp_path}/smi/") == f"{tmp_path}/smi"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--nvidia-smi-dir", "/var/run/x"], "--nvidia-smi-dir: has no effect without --inject-nvidia-smi"),
        (["--inject-nvidia-smi", "--nvidia-smi-dir", "smi"], "'smi' is not an absolute path"),
        (["--inject-nvidia-smi", "--nvidia-smi-dir", "/usr/bin"], "/usr/bin is on the host's PATH"),
        (["--inject-nvidia-smi", "--nvidia-smi-dir", "/usr/local/bin/"], "/usr/local/bin is on the host's PATH"),
        (["--inject-nvidia-smi", "--nvidia-smi-dir", "/usr/../bin"], "/usr/../bin is on the host's PATH"),
        (["--inject-nvidia-smi", "--nvidia-smi-dir", "/sbin"], "/sbin is on the host's PATH"),
    ],
)
@pytest.mark.parametrize("command", ["plugin", "dra"])
def test_bad_nvidia_smi_dir_is_one_usage_line_through_main(command, extra, message, capsys):
    """Refused before anything starts: exit 2 and one line, never the script installed as nvidia-smi."""
    assert main([command, "--node-name", "n1", "--gpus", "1xt4", *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fakegpu: error: --nvidia-smi-dir: ") and message in err


def test_directories_on_path_or_linked_to_one_are_refused(tmp_path):
    on_path = tmp_path / "tools"
    on_path.mkdir()
    link = tmp_path / "link"
    link.symlink_to("/usr/bin")
    for directory in (on_path, link):
        with pytest.raises(SpecError, match="on the host's PATH"):
            check_nvidia_smi_dir(str(directory), f"/opt/x{os.pathsep}{on_path}")
    assert check_nvidia_smi_dir(f"{tmp_path}/smi", f"{on_path}") == f"{tmp_path}/smi"
    assert check_nvidia_smi_dir(DEFAULT_PLUGIN_DIR, os.environ.get("PATH")) == DEFAULT_PLUGIN_DIR


def test_the_cli_builds_daemon_inputs_with_apply_inject_flags():
    """The daemons' runs have no inline flag handling left to miss: both go through apply_inject_flags."""
    source = Path(__file__).parents[3].joinpath("fakegpu", "cli", "daemon_runs.py").read_text()
    assert source.count("apply_inject_flags(args, inventory_inputs(args))") == 2
    assert "nvidia_smi_dir=" not in source
