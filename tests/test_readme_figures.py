"""Every figure and table in README.md and CONTRIBUTING.md that the code decides is generated from the code or
checked against it here, so a change to the code that makes the text untrue fails a test.

What cannot be checked cheaply stays out of both: the number of tests and their wall time (pytest's last
line in CI says them), and measured figures, which `docs/measurements.md` keeps with the commit they were
recorded at.
"""

from __future__ import annotations

import argparse
import inspect
import re
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from fakegpu.cli.catalog_command import NOTE_COLUMNS, OFF_TABLE_NOTE, render_boards_table, unverified_columns
from fakegpu.cli.ctl_command import EXIT_REFUSED
from fakegpu.cli.main import COMMANDS, EXIT_USAGE, USAGE_ERRORS, full_parser, main
from fakegpu.cli.progress import progress
from fakegpu.cli.virtual_nodes_command import pools_from_args, settings_from_args
from fakegpu.control.client import EXIT_NO_DAEMON
from fakegpu.dra.compute_domain.controller import STATUS_SYNC_INTERVAL
from fakegpu.dra.daemon import DraSettings
from fakegpu.dra.health_service import HEARTBEAT_SECONDS
from fakegpu.dra.prepared_claims import CHECKPOINT_MODE
from fakegpu.dra.resource_slices import (
    FIRST_MINOR_WITH_SPLIT_SLICES,
    FIRST_MINOR_WITH_TAINTS,
    MAX_DEVICES_PER_SLICE,
    MAX_DEVICES_WITH_COUNTERS_OR_TAINTS,
)
from fakegpu.kube.discovery import NEWEST_LAYOUT, OLDEST_MINOR
from fakegpu.kube.page_sizes import NODE_PAGE
from fakegpu.kubelet.device_manager import ENDPOINT_STOP_GRACE_PERIOD
from fakegpu.runtime.cdi_spec_model import SPEC_FILE_MODE
from fakegpu.sharing.bug_modes import BUG_MODES
from fakegpu.sharing.catalog import CATALOG
from fakegpu.sharing.driver_defaults import DEFAULT_CUDA_DRIVER_VERSION, DEFAULT_DRIVER_VERSION
from fakegpu.sharing.health import DEFAULT_IGNORED_XIDS
from fakegpu.sharing.label_syntax import MAX_NAME
from fakegpu.sharing.mps_daemon import MPS_MAX_CLIENTS, MPS_MAX_CLIENTS_LEGACY
from fakegpu.sharing.node import build_node
from fakegpu.sharing.node_spec import DEFAULT_GPUS, parse_node_spec
from fakegpu.sharing.nvidia_config import MAX_TIME_SLICING_REPLICAS
from fakegpu.sharing.nvlink_fabric import IMEX_CHANNEL_COUNT
from fakegpu.sharing.rack_layout import NVL72_GPUS_PER_NODE, NVL72_NODES_PER_RACK
from fakegpu.telemetry.dcgm.gpu_activity import DEFAULT_TARGET, UTILIZATION_ANNOTATION, utilization
from fakegpu.telemetry.http_endpoint import parse_listen_address
from fakegpu.telemetry.nvidia_smi.command import NOT_FOUND
from fakegpu.telemetry.nvidia_smi.mig_tables import NO_MIG_DEVICES
from fakegpu.virtual_nodes.cost_estimate import (
    DEFAULT_MAX_SERVER_MEMORY,
    ESTIMATE_MINOR,
    GIB,
    MEASURED_NODES,
    MEASURED_SERVER_RSS_AFTER,
    MEASURED_SERVER_RSS_BEFORE,
    SERVER_BYTES_PER_BYTE,
    estimate_options,
    fleet_cost,
    parse_limit,
    size,
)
from fakegpu.virtual_nodes.pools import DEFAULT_MODE, GPU_MODES, build_virtual_nodes
from tests.deploy.manifests import KUBERNETES_VERSION
from tests.reliability import kubelet_soak
from tests.reliability.process_probe import RSS_LIMIT
from tests.reliability.profile import BIG_COUNTS, LONG, LONG_SIZES, SHORT

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CORPUS = ROOT / "tests" / "reliability" / "corpus"
SPOKEN_SECONDS = {1.0: "second"}
"""An interval as the README says it in words."""
DAEMONSETS = (ROOT / "deploy" / "overlays" / "device-plugin", ROOT / "deploy" / "overlays" / "dra")
"""The overlays whose DaemonSets the README's ports are about."""


def flat(text: str) -> str:
    """Text with every run of white space as one space, so a figure may sit across a line break."""
    return re.sub(r"\s+", " ", text)


def section(title: str, text: str = README) -> str:
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def default_of(command: str, dest: str) -> object:
    """An option's default as the command's parser has it."""
    parser = full_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    (action,) = [a for a in sub.choices[command]._actions if a.dest == dest]
    return action.default


def spaced(number: int) -> str:
    """``10 000``: thousands set apart by a space, as the README writes counts."""
    return f"{number:,}".replace(",", " ")


def megabytes(size: int) -> str:
    """``1 MB`` for 1 000 000 bytes, ``0.5 MB`` for half that: never rounded to a figure the code does not have."""
    return f"{size / 1_000_000:g} MB"


def daemonset_port(overlay: Path, flag: str) -> int:
    """The port the overlay's DaemonSet gives ``flag`` (``--dcgm-address 0.0.0.0:9400``), checked to be one of
    the container's declared ports."""
    (daemonset,) = [d for d in yaml.safe_load_all((overlay / "daemonset.yaml").read_text()) if d["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    port = int(args[args.index(flag) + 1].rsplit(":", 1)[1])
    assert port in [p["containerPort"] for p in container["ports"]], f"{overlay.name}: {flag} {port} not declared"
    return port


def deployed_port(flag: str) -> int:
    """The one port both DaemonSets give ``flag``."""
    (port,) = {daemonset_port(overlay, flag) for overlay in DAEMONSETS}
    return port


def gang_job() -> str:
    """How the README sums up ``deploy/examples/rack-scale/gang-job.yaml``, from the manifest itself."""
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "examples" / "rack-scale" / "gang-job.yaml").read_text()))
    (domain,) = [d for d in docs if d["kind"] == "ComputeDomain"]
    (job,) = [d for d in docs if d["kind"] == "Job"]
    (gpus,) = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
    (request,) = gpus["spec"]["spec"]["devices"]["requests"]
    workers, per_worker = job["spec"]["parallelism"], request["exactly"]["count"]
    return (
        f"a {workers * per_worker}-GPU job: a ComputeDomain of {domain['spec']['numNodes']} nodes, {workers} "
        f"workers of {per_worker} GB200 each"
    )


def bug_modes() -> str:
    """The README's list of ``--bug-compat`` modes: every mode in ``--help``'s order, with the upstream issue
    its description ends with."""
    shown: list[str] = []
    for mode, text in BUG_MODES.items():
        issue = re.search(r"\(NVIDIA/k8s-device-plugin#(\d+)\)$", text)
        prefix = "" if any("#" in s for s in shown) else "NVIDIA "
        shown.append(f"`{mode}` ({prefix}#{issue[1]})" if issue else f"`{mode}`")
    return f"turns on a known upstream behaviour on purpose: {', '.join(shown)}."


def numbers(values: list[int], last: str = ", ") -> str:
    """``13, 31, 43`` (or ``13, 31 and 43`` with ``last=" and "``)."""
    shown = [str(v) for v in values]
    return ", ".join(shown[:-1]) + last + shown[-1]


def figures() -> list[str]:
    """Sentences of the README with the figure the code decides in them, built from the code."""
    xids = sorted(DEFAULT_IGNORED_XIDS)
    (resync,) = [f.default for f in fields(DraSettings) if f.name == "resync_interval"]
    corpus = sorted(p.name for p in CORPUS.iterdir() if p.name != "README.md")
    fuzz_ids, fuzz_bytes = BIG_COUNTS[-1], LONG_SIZES[-1]
    assert SHORT.kubelet_restarts == LONG.kubelet_restarts, "the README gives one count for both profiles"
    ticks = inspect.signature(progress).parameters
    default_gpus = CATALOG[DEFAULT_GPUS.split("x", 1)[1]]
    return [
        f"on a default node ({DEFAULT_GPUS.split('x', 1)[0]}x {default_gpus.product_name.removeprefix('NVIDIA ')})",
        f"Default: `{DEFAULT_GPUS}`.",
        f'driverVersion: "{DEFAULT_DRIVER_VERSION}" # default',
        f'cudaDriverVersion: "{DEFAULT_CUDA_DRIVER_VERSION}" # default',
        f"imexChannels: {IMEX_CHANNEL_COUNT} # /dev/nvidia-caps-imex-channels/channel0..{IMEX_CHANNEL_COUNT - 1} "
        "(the driver's count, default)",
        f"rate every {SPOKEN_SECONDS.get(ticks['interval'].default, 'N/A')} (elsewhere a plain line every "
        f"{ticks['plain_every'].default:g} s)",
        f"({numbers(xids, ' and ')} are ignored by default)",
        f"ignored XIDs {numbers(xids)})",
        f"unhealthy unless ignored ({numbers(xids)}, DP_*)",
        f"Bad input exits with status {EXIT_USAGE} ",
        f"at most {MAX_DEVICES_PER_SLICE} devices per slice ({MAX_DEVICES_WITH_COUNTERS_OR_TAINTS} with counters "
        "or taints)",
        f"(watch plus a {resync:g} s resync)",
        f"at most {MAX_TIME_SLICING_REPLICAS} per GPU",
        f"above {MPS_MAX_CLIENTS} ({MPS_MAX_CLIENTS_LEGACY} below compute capability 7.5)",
        f"drops it after the grace period ({ENDPOINT_STOP_GRACE_PERIOD / 60:g} min,",
        f"`fakegpu slices [inventory options] [--mig-mode M] [--server-version 1.{OLDEST_MINOR}..1.{NEWEST_LAYOUT}]",
        f"[--nodes-per-rack {NVL72_NODES_PER_RACK}]",
        f"in pages ({NODE_PAGE} per request)",
        f"(`--concurrency`, {default_of('virtual-nodes', 'concurrency')})",
        f"status every {STATUS_SYNC_INTERVAL:g} s",
        f"Kubelet restarts: {SHORT.kubelet_restarts} in a row",
        f"re-registers within {kubelet_soak.REREGISTER_LIMIT:g} s",
        f"(RSS within {RSS_LIMIT // 2**20} MiB)",
        f"Load: {SHORT.concurrent_allocates} concurrent Allocates, {SHORT.concurrent_streams} ListAndWatch streams",
        f"{SHORT.concurrent_prepares} concurrent NodePrepareResources",
        f"{spaced(fuzz_ids)} IDs, {megabytes(fuzz_bytes)} strings",
        f"a corpus of {len(corpus)} malformed configs",
        f"join {NVL72_NODES_PER_RACK * NVL72_GPUS_PER_NODE} GPUs ({NVL72_NODES_PER_RACK} compute trays of "
        f"{NVL72_GPUS_PER_NODE})",
        f"Kubernetes 1.{FIRST_MINOR_WITH_SPLIT_SLICES - 1} gets combined slices, 1.{FIRST_MINOR_WITH_SPLIT_SLICES}+ "
        "separate counter and device slices",
        f"taints need 1.{FIRST_MINOR_WITH_TAINTS}+",
        f"every {HEARTBEAT_SECONDS:g} s with fresh timestamps",
        f"(dcgm-exporter's port is {deployed_port('--dcgm-address')})",
        f"turn all of these on (ports {deployed_port('--metrics-address')} and {deployed_port('--dcgm-address')})",
        f"(the DaemonSets use `0.0.0.0:{deployed_port('--health-address')}`)",
        f"an idle device reads {utilization([], seed=0, device='0', step=0)} %, a held one about {DEFAULT_TARGET:g} %, "
        f'or the pod\'s `{UTILIZATION_ANNOTATION}: "40"`',
        f"prints `{NO_MIG_DEVICES.strip()}` with status {NOT_FOUND}.",
        f"(exit status 0 done, {EXIT_REFUSED} refused, {EXIT_USAGE} bad usage, {EXIT_NO_DAEMON} no daemon listening",
        f"validates every object against the {KUBERNETES_VERSION.rsplit('.', 1)[0]} schema",
        gang_job(),
        bug_modes(),
        f"cut to {MAX_NAME}, ends trimmed",
        f"CDI specs and the checkpoint written atomically ({SPEC_FILE_MODE:04o} / {CHECKPOINT_MODE:04o})",
        f"huge files: exit status {EXIT_USAGE} or a claim error",
        f"or `:PORT` listens on {parse_listen_address('9400').host} only",
    ]


@pytest.mark.parametrize("figure", figures())
def test_the_readme_states_the_figure_the_code_has(figure):
    assert figure in flat(README), f"README.md no longer says {figure!r}: change the text or the code"


def test_the_boards_table_is_what_catalog_markdown_prints():
    assert render_boards_table() in README, "paste the output of `fakegpu catalog --markdown` into README's Boards"


def test_catalog_markdown_prints_one_row_per_board(capsys):
    assert main(["catalog", "--markdown"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(CATALOG)


def test_the_commands_table_has_a_row_per_command():
    rows = re.findall(r"^\| `fakegpu ([a-z-]+)", section("Commands"), flags=re.M)
    assert sorted(rows) == sorted([*COMMANDS, "--version"])


FLAGS_THE_TABLE_SHOWS = {
    "plugin": ("--label-node", "--use-node-feature-api", "--sleep-interval", "--config-dir"),
    "dra": ("--feature-gates", "--boot-id-file", "--additional-xids-to-ignore", "--compute-domains"),
    "virtual-nodes": ("--feature-gates", "--watch", "--delete"),
    "labels": ("--use-node-feature-api", "--namespace", "--timestamp"),
    "slices": ("--feature-gates", "--server-version"),
}
"""Flags a user looks for in the Commands table (the rest are in each command's --help)."""


def test_the_commands_table_names_real_flags_and_the_ones_users_look_for():
    rows = dict(re.findall(r"^\| `fakegpu ([a-z-]+)([^|]*(?:\\\|[^|]*)*)` \|", section("Commands"), flags=re.M))
    parser = full_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for command, usage in rows.items():
        if command not in sub.choices:
            continue
        known = {o for a in sub.choices[command]._actions for o in a.option_strings}
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", usage))
        assert named <= known, f"fakegpu {command}'s row names flags it does not have: {sorted(named - known)}"
    missing = {c: [f for f in flags if f not in rows.get(c, "")] for c, flags in FLAGS_THE_TABLE_SHOWS.items()}
    assert {c: m for c, m in missing.items() if m} == {}, "README's Commands table lacks these flags"


def test_the_gpu_mode_table_has_a_row_per_mode():
    rows = re.findall(r"^\| `([a-z-]+)`( \(default\))? \|", section("Virtual nodes (KWOK)"), flags=re.M)
    assert [mode for mode, _ in rows if mode != "--gpu-mode"] == list(GPU_MODES)
    assert [mode for mode, default in rows if default] == [DEFAULT_MODE]


def test_the_design_names_every_command():
    design = (ROOT / "docs" / "design.md").read_text()
    unnamed = [name for name in COMMANDS if f"`fakegpu {name}`" not in design]
    assert unnamed == [], f"docs/design.md's process shapes do not name: {unnamed}"


def test_no_hand_kept_test_count_or_wall_time():
    """The suite's size and time change with every commit; CI's output says them."""
    text = flat(README + (ROOT / "CONTRIBUTING.md").read_text())
    found = re.findall(r"\b\d[\d,]*-odd tests\b|\b\d[\d ,]* tests\b|about \d+ minutes", text)
    assert found == []


@pytest.mark.parametrize("command", ["plugin", "dra"])
def test_the_daemons_serve_telemetry_only_when_asked_and_name_dcgm_exporters_port(command):
    """README: "each is off unless given"; the DaemonSets give the ports (checked in ``figures()``), and
    ``--dcgm-address``'s help names the one they use for dcgm-exporter's."""
    for dest in ("metrics_address", "dcgm_address", "health_address"):
        assert default_of(command, dest) is None, f"fakegpu {command}: {dest} is on by default"
    parser = full_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    (dcgm,) = [a for a in sub.choices[command]._actions if a.dest == "dcgm_address"]
    assert f"dcgm-exporter's port is {deployed_port('--dcgm-address')}" in (dcgm.help or "")


def test_the_design_names_every_error_that_exits_with_status_2():
    errors = section("Errors", (ROOT / "docs" / "design.md").read_text())
    unnamed = [error.__name__ for error in USAGE_ERRORS if f"`{error.__name__}`" not in errors]
    assert unnamed == [], f"docs/design.md's Errors does not say these exit {EXIT_USAGE}: {unnamed}"
    assert "`USAGE_ERRORS`" in errors and f"status {EXIT_USAGE}" in flat(errors)


def nvidia_smi_transcript() -> list[tuple[dict[str, str], list[str], str]]:
    """The README's fake nvidia-smi block: (environment, arguments after ``fakegpu``, output) per command."""
    start = README.index("\n$ NVIDIA_VISIBLE_DEVICES=1 fakegpu nvidia-smi ")
    block = README[start + 1 : README.index("\n```", start)]
    steps: list[tuple[dict[str, str], list[str], str]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            words = line[2:].split()
            env = dict(w.split("=", 1) for w in words[: words.index("fakegpu")])
            steps.append((env, words[words.index("fakegpu") + 1 :], ""))
        else:
            env, argv, output = steps[-1]
            steps[-1] = (env, argv, output + line + "\n")
    return steps


def test_the_nvidia_smi_transcript_is_what_fakegpu_nvidia_smi_prints(monkeypatch, capsys):
    steps = nvidia_smi_transcript()
    assert len(steps) == 2 and all(output for _env, _argv, output in steps), steps
    for env, argv, output in steps:
        for name in ("NVIDIA_VISIBLE_DEVICES", "FAKEGPU_VISIBLE_DEVICES", "NODE_NAME"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        if "--node-name" not in argv:
            monkeypatch.setattr("socket.gethostname", lambda: "readme-host")
        assert main(argv) == 0, argv
        assert capsys.readouterr().out == output, f"README's `fakegpu {' '.join(argv)}` output drifted"


def test_every_unverified_note_of_a_board_is_placed_in_the_boards_table_or_off_it():
    """The table marks a cell by the wording of the catalog's notes: a note that matches no column and is
    not about a number the table leaves out would be a doubt the table silently drops."""
    unplaced = [
        f"{m.key}: {note}"
        for m in CATALOG.values()
        for note in m.unverified
        if not OFF_TABLE_NOTE.search(note) and not any(p.search(note) for p in NOTE_COLUMNS.values())
    ]
    assert unplaced == [], "say in fakegpu/cli/catalog_command.py which column these notes are about"


def test_a_number_the_catalog_doubts_is_marked_in_the_boards_table():
    rows = {line.split("`")[1]: line for line in render_boards_table().splitlines() if line.startswith("| `")}
    doubted = {m.key: unverified_columns(m) for m in CATALOG.values()}
    sms = [k for k, columns in doubted.items() if "sms" in columns]
    assert sms, "no board doubts its SM count: the check proves nothing"
    assert all(f"| {CATALOG[k].multiprocessors} (unverified) |" in rows[k] for k in sms)
    assert all("(unverified)" not in rows[k] and "(partly" not in rows[k] for k, c in doubted.items() if not c)


def test_the_node_spec_example_builds_the_node_its_comments_describe():
    """The README's node spec is applied, so each of its numbers is one the spec parser and the placement
    rules accept, and the node it builds is the one its comments describe."""
    (block,) = re.findall(r"```yaml\n(.*?)\n```", section("Node spec"), flags=re.S)
    node = build_node(parse_node_spec(yaml.safe_load(block), "README.md"), "node-a", source="README.md")
    assert len(node.gpus) == 4 + 1 + 3
    assert [len(g.mig_devices) for g in node.gpus[:5]] == [5, 5, 5, 5, 2]
    assert all((g.xid, g.health) == (79, "Unhealthy") for g in node.gpus[5:]) and 79 not in DEFAULT_IGNORED_XIDS


def test_the_bad_input_example_is_what_fakegpu_prints(capsys):
    start = README.index("Bad input exits with status")
    (block,) = re.findall(r"```\n\$ fakegpu (.*?)\n(.*?)\n```", README[start:], flags=re.S)[:1]
    argv, expected = block[0].split(), block[1]
    assert main(argv) == EXIT_USAGE
    assert capsys.readouterr().err.strip() == expected, "README's bad-input example drifted"


FLEET_COST_PLANS = (
    "--gpus 8xh100-80gb",
    "--gpus 8xh100-80gb --gpu-mode dra",
    "--gpus 8xh100-80gb --gpu-mode dra --mig-mode dynamic",
    "--gpus 8xb200 --gpu-mode dra --mig-mode dynamic",
    "--gpus 4xgb200 --racks 1 --gpu-mode dra",
)
"""The node kinds of the README's table of what a virtual node costs the API server."""


def fleet_cost_table() -> str:
    """The README's table of virtual-node costs, built with the estimate ``--dry-run`` prints."""
    parser = full_parser()
    limit = parse_limit(DEFAULT_MAX_SERVER_MEMORY)
    rows = [
        f"| `fakegpu virtual-nodes` with | objects per node | ResourceSlices | API-server memory per node | nodes "
        f"within the default {size(limit)} |",
        "|---|---|---|---|---|",
    ]
    for plan in FLEET_COST_PLANS:
        args = parser.parse_args(["virtual-nodes", *plan.split()])
        settings = settings_from_args(args)
        nodes, _ = build_virtual_nodes(pools_from_args(args), settings.name_prefix, None)
        options = estimate_options(settings.driver, settings.mig_mode, settings.server_minor, settings.api_version)
        (pool,) = fleet_cost(nodes, settings.shape, options).pools
        memory = pool.per_node * SERVER_BYTES_PER_BYTE
        rows.append(
            f"| `{plan}` | {size(pool.per_node)} | {pool.slices_per_node} | {size(memory)} | "
            f"{spaced(int(limit // memory))} |"
        )
    return "\n".join(rows) + "\n"


def test_the_virtual_node_cost_table_is_what_the_estimate_says():
    assert fleet_cost_table() in section("Virtual nodes (KWOK)"), fleet_cost_table()


def test_the_virtual_node_cost_figures_are_the_codes():
    text = flat(section("Virtual nodes (KWOK)"))
    for figure in (
        f"{MEASURED_NODES} dynamic-MIG 8x H100 nodes took the API server from "
        f"{MEASURED_SERVER_RSS_BEFORE / GIB:g} to {MEASURED_SERVER_RSS_AFTER / GIB:g} GiB",
        f"about {SERVER_BYTES_PER_BYTE:.0f} bytes of API-server memory per byte sent",
        f"`--max-server-memory` ({DEFAULT_MAX_SERVER_MEMORY} by default",
        f"Kubernetes 1.{ESTIMATE_MINOR} layout unless `--server-version` says",
    ):
        assert figure in text, figure
