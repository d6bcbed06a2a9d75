"""The injected script, run by real shells and awks, prints exactly what the Python renderer prints.

Every combination found on this machine runs: dash and busybox sh, with mawk, gawk, the one true awk and
busybox awk. PATH holds only ``awk`` and ``date``, so the script can use nothing a busybox container
lacks. Combinations that are not installed are skipped. The expected output is ``command.run`` given
what ``devices.visible_devices`` makes of the same environment with container semantics (neither
variable set: no devices).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fakegpu.sharing.node import build_node
from fakegpu.sharing.node_spec import parse_node_spec
from fakegpu.telemetry.nvidia_smi.command import run
from fakegpu.telemetry.nvidia_smi.devices import SmiNode, from_node, visible_devices
from fakegpu.telemetry.nvidia_smi.shell_script import (
    QUERY_TIME_OVERRIDE_ENV,
    TIME_OVERRIDE_ENV,
    data_records,
    render_script,
)
from tests.unit.nvidia_smi.helpers import QTS, TS, mixed, node, smi_node, struck


def _found(*names: str) -> str | None:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


BUSYBOX = _found("busybox")
BASH = _found("bash")
SHELLS = (
    {"dash": [_found("dash") or "/bin/sh"]}
    | ({"busybox-sh": [BUSYBOX, "sh"]} if BUSYBOX else {})
    | ({"bash": [BASH, "--posix"]} if BASH else {})
)
AWKS = {
    name: path
    for name, path in (
        ("mawk", _found("mawk")),
        ("gawk", _found("gawk")),
        ("nawk", _found("original-awk")),
        ("busybox-awk", BUSYBOX),
    )
    if path
}
AWKS = AWKS or {"awk": _found("awk") or "awk"}
COMBOS = [(s, a) for s in SHELLS for a in AWKS]


NVIDIA = "NVIDIA_VISIBLE_DEVICES"
FAKEGPU = "FAKEGPU_VISIBLE_DEVICES"


@pytest.fixture(scope="module")
def nodes() -> dict[str, SmiNode]:
    return {
        "h100x8": smi_node("8xh100-80gb"),
        "a100x2": smi_node("2xa100-40gb"),
        "t4": smi_node("1xt4"),
        "h100-1g": smi_node("2xh100-80gb", "all-1g.10gb"),
        "mixed": mixed(),
        "dynamic": from_node(node("2xa100-40gb", "all-balanced"), dynamic_mig=True),
        "topology": from_node(build_node(parse_node_spec(TOPOLOGY, "test"), "node-a", source="test")),
        "mps": exclusive_first(smi_node("2xh100-80gb")),
        "faults": struck(node("3xh100-80gb"), (0, "ecc-uncorrectable count=2"), (0, "thermal"), (1, "off-bus")),
        "v100-faults": struck(node("2xv100-32gb"), (0, "ecc-uncorrectable"), (1, "power"), (1, "fabric")),
    }


def exclusive_first(smi: SmiNode) -> SmiNode:
    """GPU 0 in ``Exclusive_Process``, as the DRA driver leaves it while an MPS claim is prepared."""
    gpus = (dataclasses.replace(smi.gpus[0], compute_mode="Exclusive_Process"), *smi.gpus[1:])
    return dataclasses.replace(smi, gpus=gpus)


TOPOLOGY = {
    "driverVersion": "580.173.02",
    "numaNodes": 2,
    "nvlink": [[0, 1], [2, 3]],
    "gpus": [
        {
            "model": "h100-80gb",
            "migEnabled": True,
            "migDevices": [
                {"profile": "1g.10gb", "start": 6},
                {"profile": "3g.40gb", "start": 0},
                {"profile": "1g.10gb+me", "start": 4},
            ],
        },
        {"model": "h100-80gb", "count": 2},
        {"model": "h100-80gb", "migEnabled": True, "migDevices": {}},
    ],
}
"""Driver 580 (the wider MIG boxes), two NVLink groups over two NUMA nodes, a GPU in MIG mode without
instances: what ``topo -m`` and ``mig`` need beyond the other nodes."""


@pytest.fixture(scope="module")
def scripts(nodes, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("smi")
    out = {}
    for name, smi in nodes.items():
        path = root / name
        path.write_text(render_script(smi, volume_mounts_root=str(root / "devs")))
        path.chmod(0o755)
        out[name] = path
    return out


def bin_dir(tmp: Path, awk: str) -> Path:
    """A PATH with only awk and date: what the script may rely on in the smallest image."""
    d = tmp / "bin"
    d.mkdir(exist_ok=True)
    for name, target in (("awk", awk), ("date", BUSYBOX if awk == BUSYBOX else _found("date"))):
        link = d / name
        if link.exists() or link.is_symlink():
            link.unlink()
        assert target
        link.symlink_to(target)
    return d


def run_script(shell: list[str], script: Path, argv: list[str], env: dict[str, str]) -> tuple[str, int]:
    done = subprocess.run(
        [*shell, str(script), *argv], env=env, capture_output=True, text=True, timeout=20, check=False
    )
    assert done.stderr == "", done.stderr
    return done.stdout, done.returncode


Env = dict[str, str]


def visible_cases(node: SmiNode) -> list[Env]:
    """Environments a container may have: device lists in NVIDIA_VISIBLE_DEVICES, FAKEGPU_VISIBLE_DEVICES
    winning over it, and neither."""
    g = node.gpus
    last = g[-1]
    values = ["all", "none", "void", "", " 0 ", f"{last.uuid}::3", "9,GPU-nope", "0,0", "0\n", " \r1\t,\n0", "0\n1"]
    if len(g) > 1:
        values += [f"{g[1].uuid},{g[0].uuid}", "1"]
    migs = [m for gpu in g for m in gpu.migs]
    if migs:
        values += [migs[-1].uuid, f"{migs[0].uuid}::1,{migs[-1].uuid}", "0:1,0:2", f"0:0, {last.uuid}"]
    options = [m for gpu in g for m in gpu.mig_options]
    if options:
        values += [options[0].uuid, f"{options[-1].uuid},{options[3].uuid}", f"0,{options[0].uuid}", "0:9"]
    cases: list[Env] = [{}, {FAKEGPU: ""}, {NVIDIA: "all", FAKEGPU: "none"}]
    cases += [{NVIDIA: v} for v in values]
    cases += [{NVIDIA: "all", FAKEGPU: v} for v in values[4:]]
    return cases


ARGVS: list[list[str]] = [
    [],
    ["-L"],
    ["-q"],
    ["--query-gpu=index,name,uuid,memory.total,memory.free,utilization.gpu,mig.mode.current,count", "--format=csv"],
    ["--query-gpu", "gpu_name,power.draw,fan.speed,timestamp,clocks.sm", "--format", "csv,noheader,nounits"],
    ["--query-gpu=memory.used,memory.reserved,clocks_throttle_reasons.active,ecc.mode.current", "--format=csv"],
    ["--query-gpu=name,foo", "--format=csv"],
    ["--query-gpu=name,", "--format=csv"],
    ["--query-gpu=name\nindex", "--format=csv"],
    ["--query-gpu=name", "--format=csv\nnoheader"],
    ["-i", "0\n1", "-L"],
    ["--query-gpu=name", "--format=csv,json"],
    ["--query-gpu=name"],
    ["-L", "--format=csv"],
    ["-i", "1", "-L"],
    ["--id=0,00000000:28:00.0", "-q"],
    ["-i", "", "-L"],
    ["-x"],
    ["-L", "--id"],
    ["-L", "--query-gpu=name", "--format=csv"],
    ["-q", "-L"],
    ["-L", "-L", "-q", "-h"],
    ["--version"],
    ["-h"],
    ["topo"],
    ["topo", "-m", "-i", "0"],
    ["topo", "-L"],
    ["mig"],
    ["mig", "-i", "0"],
    ["mig", "-lgi", "-lci"],
    ["mig", "-lgi", "--format=csv,noheader"],
    ["mig", "--format", "csv", "-lgip"],
    ["mig", "-lgi", "-i"],
    ["mig", "-lci", "-h"],
    ["topo", "--matrix", "--help"],
    ["-lgi"],
    ["-L", "topo", "-m"],
]
SUBCOMMAND_ARGVS: list[list[str]] = [
    ["topo", "-m"],
    ["mig", "-lgip"],
    ["mig", "--list-gpu-instances"],
    ["mig", "-lci"],
    ["mig", "-i", "1", "-lgi"],
    ["topo", "--matrix"],
    ["mig", "--id=0,3", "--list-gpu-instance-profiles"],
    ["mig", "-lgi", "--id", "0"],
]
"""``topo -m`` and ``mig`` listings, run over every selection like the first five of ARGVS."""


def check_cases(
    shell: str, awk: str, node: SmiNode, script: Path, tmp: Path, cases: list[tuple[list[str], Env]]
) -> None:
    path = str(bin_dir(tmp, AWKS[awk]))
    root = str(script.parent / "devs")
    for argv, extra in cases:
        env = {"PATH": path, TIME_OVERRIDE_ENV: TS, QUERY_TIME_OVERRIDE_ENV: QTS, **extra}
        expected = run(argv, node, visible_devices(env, os.listdir, unset="", root=root), TS, QTS)
        assert run_script(SHELLS[shell], script, argv, env) == (expected.stdout, expected.status), (argv, extra)


PRIMARY = COMBOS[0]
"""dash with the first awk found: every node, every argument list, every selection."""


@pytest.mark.parametrize(
    "name", ["h100x8", "a100x2", "t4", "h100-1g", "mixed", "dynamic", "topology", "mps", "faults", "v100-faults"]
)
def test_script_equals_the_python_renderer(name, nodes, scripts, tmp_path):
    node = nodes[name]
    cases = [(argv, env) for argv in ARGVS[:5] + SUBCOMMAND_ARGVS for env in visible_cases(node)]
    cases += [(argv, {NVIDIA: "0"}) for argv in ARGVS[5:]]
    check_cases(*PRIMARY, node, scripts[name], tmp_path, cases)


@pytest.mark.parametrize(("shell", "awk"), COMBOS[1:])
@pytest.mark.parametrize("name", ["mixed", "dynamic", "topology"])
def test_every_shell_and_awk_agree(shell, awk, name, nodes, scripts, tmp_path):
    """The other combinations, on the nodes with MIG devices and whole GPUs: fewer selections, all modes."""
    node = nodes[name]
    selections = visible_cases(node)[::3]
    cases = [(argv, env) for argv in ARGVS[:5] + SUBCOMMAND_ARGVS for env in selections]
    cases += [(argv, {NVIDIA: "all"}) for argv in ARGVS[5:]]
    check_cases(shell, awk, node, scripts[name], tmp_path, cases)


@pytest.mark.parametrize(("shell", "awk"), COMBOS)
def test_volume_mounts_directory_is_read_like_the_runtime_does(shell, awk, nodes, scripts, tmp_path):
    node = nodes["mixed"]
    devs = scripts["mixed"].parent / "devs"
    shutil.rmtree(devs, ignore_errors=True)
    (devs / "imex").mkdir(parents=True)
    for device in (node.gpus[1].uuid, node.gpus[0].migs[2].uuid, ".hidden"):
        (devs / device).touch()
    env = {"PATH": str(bin_dir(tmp_path, AWKS[awk])), "NVIDIA_VISIBLE_DEVICES": str(devs)}
    visible = visible_devices(env, os.listdir, unset="", root=str(devs))
    expected = run(["-L"], node, visible, TS)
    assert run_script(SHELLS[shell], scripts["mixed"], ["-L"], env) == (expected.stdout, 0)
    assert expected.stdout.count("\n") == 3
    shutil.rmtree(devs)
    assert run_script(SHELLS[shell], scripts["mixed"], ["-L"], env) == ("No devices were found\n", 6)


@pytest.mark.parametrize("shell", list(SHELLS))
def test_without_an_override_the_date_comes_from_date(shell, nodes, scripts, tmp_path):
    env = {"PATH": str(bin_dir(tmp_path, next(iter(AWKS.values())))), NVIDIA: "all"}
    text, status = run_script(SHELLS[shell], scripts["t4"], [], env)
    first, _, rest = text.partition("\n")
    assert status == 0
    assert re.fullmatch(r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ 1-3]\d \d\d:\d\d:\d\d \d{4}       ", first)
    assert first + "\n" + rest == run([], nodes["t4"], None, first.rstrip(" ")).stdout


@pytest.mark.parametrize(("shell", "awk"), COMBOS)
def test_the_timestamp_field_comes_from_date_with_milliseconds(shell, awk, scripts, tmp_path):
    """``YYYY/MM/DD HH:MM:SS.mmm``; an awk's ``date`` without ``%N`` (busybox may lack it) gives ``.000``."""
    env = {"PATH": str(bin_dir(tmp_path, AWKS[awk])), NVIDIA: "all"}
    text, status = run_script(SHELLS[shell], scripts["t4"], ["--query-gpu=timestamp,index", "--format=csv"], env)
    assert status == 0
    assert re.fullmatch(r"timestamp, index\n\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}, 0\n", text), text


@pytest.mark.parametrize("value", ["a&b\\1", "\\&&", "@N@ & @G@"])
def test_override_values_are_printed_literally(value, nodes, scripts, tmp_path):
    """``&`` and backslashes in the time override are not gsub's matched text or escapes, and token text in
    it stays as it is."""
    env = {"PATH": str(bin_dir(tmp_path, next(iter(AWKS.values())))), NVIDIA: "all", TIME_OVERRIDE_ENV: value}
    text, status = run_script(SHELLS[PRIMARY[0]], scripts["mixed"], [], env)
    assert (text, status) == (run([], nodes["mixed"], None, value).stdout, 0)
    assert text.startswith(value + "       \n")


def test_neither_variable_set_means_no_devices_in_a_container(scripts, tmp_path):
    env = {"PATH": str(bin_dir(tmp_path, next(iter(AWKS.values()))))}
    assert run_script(SHELLS[PRIMARY[0]], scripts["h100x8"], ["-L"], env) == ("No devices were found\n", 6)


def test_fakegpu_visible_devices_wins_over_an_images_all(nodes, scripts, tmp_path):
    node = nodes["h100x8"]
    env = {"PATH": str(bin_dir(tmp_path, next(iter(AWKS.values())))), NVIDIA: "all", FAKEGPU: node.gpus[5].uuid}
    text, status = run_script(SHELLS[PRIMARY[0]], scripts["h100x8"], ["-L"], env)
    assert (text, status) == (f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {node.gpus[5].uuid})\n", 0)


def test_without_awk_the_script_says_so(scripts, tmp_path):
    bindir = tmp_path / "noawk"
    bindir.mkdir()
    done = subprocess.run(
        [SHELLS[PRIMARY[0]][0], str(scripts["t4"]), "-L"],
        env={"PATH": str(bindir), NVIDIA: "all"},
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert (done.stdout, done.returncode) == ("", 255)
    assert done.stderr == "nvidia-smi (fakegpu): this image has no awk; the fake nvidia-smi needs sh and awk\n"


def test_dynamic_mig_templates_keep_the_script_small(nodes):
    """Every MIG device of a shape shares its table and -q lines: an 8-GPU dynamic node stays small."""
    big = from_node(node("8xh100-80gb"), dynamic_mig=True)
    options = sum(len(g.mig_options) for g in big.gpus)
    assert options == 8 * sum(len(p.placements) for p in node("1xh100-80gb").gpus[0].model.mig_profiles)
    script = render_script(big)
    assert len(script) < len(render_script(smi_node("8xh100-80gb"))) + 200 * options


def test_topo_and_mig_keep_the_script_small():
    """``topo -m`` and ``mig`` share templates like the table does: an 8x H100 all-1g.10gb node's script was
    87,506 bytes before them and is about 95,100 with them (the awk code, the fixed boxes and the legend;
    one ``-lgip`` template for eight identical GPUs). The fault readings (``-q``'s clocks event reasons, ECC
    errors, remapped rows, clocks and fabric; their query values) add about 4,300 bytes per GPU: 129,835."""
    assert len(render_script(smi_node("8xh100-80gb", "all-1g.10gb"))) < 131_000
    records = data_records(smi_node("8xh100-80gb", "all-1g.10gb"))
    assert sum(r.startswith(("TP\t", "TG\t", "TC\t")) for r in records) == 7 * 3 + 2 + 2


def test_the_script_runs_by_its_shebang_from_path(nodes, scripts, tmp_path):
    """As in a container: ``nvidia-smi`` found on PATH, so ``$0`` is the full path awk reads the data from."""
    bindir = bin_dir(tmp_path, next(iter(AWKS.values())))
    (bindir / "nvidia-smi").symlink_to(scripts["mixed"])
    done = subprocess.run(
        ["nvidia-smi", "-L"],
        env={"PATH": str(bindir), NVIDIA: "1"},
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
        cwd=tmp_path,
    )
    assert (done.stdout, done.returncode) == (run(["-L"], nodes["mixed"], "1", TS).stdout, 0)


def test_the_script_embeds_fragments_safely(nodes):
    script = render_script(nodes["mixed"])
    assert script.startswith("#!/bin/sh\n")
    head, _, data = script.partition('\nexit "$status"\nFAKEGPU_NVIDIA_SMI_DATA\n')
    assert '"$0"' in head and data.count("\n") == len(data_records(nodes["mixed"]))
    records = data_records(nodes["mixed"])
    assert all(line.count("\t") >= 2 for line in records[1:-1])
    assert records[0].startswith("V\t") and records[-1] == "Z" + records[0][1:]
    assert "python" not in script.lower()


def test_a_name_that_cannot_be_embedded_is_refused(nodes):
    with pytest.raises(ValueError, match="volume-mounts root"):
        render_script(nodes["t4"], volume_mounts_root="/x'y")
