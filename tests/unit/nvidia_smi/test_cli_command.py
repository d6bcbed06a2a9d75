"""``fakegpu nvidia-smi``: inventory options or a devices.json, nvidia-smi's options after them."""

from __future__ import annotations

import argparse
import json

import pytest

from fakegpu.nvidia_smi_command import add_nvidia_smi_parser, run_nvidia_smi_command
from sharing.nvidia_smi.devices import to_json
from tests.unit.nvidia_smi.helpers import TS, mixed


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fakegpu")
    add_nvidia_smi_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["nvidia-smi", *argv])


def test_options_keep_nvidia_smis_order():
    args = parse("--gpus", "2xt4", "-q", "-i", "1", "--query-gpu=name", "--format", "csv", "-L")
    assert args.smi_argv == ["-q", "-i", "1", "--query-gpu", "name", "--format", "csv", "-L"]
    assert parse("--gpus", "2xt4").smi_argv == []


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
