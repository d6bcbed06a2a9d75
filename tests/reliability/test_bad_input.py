"""Bad input (issue 8): every malformed file gets exit status 2 and one clear line, or one clear claim error.

The corpus is ``tests/reliability/corpus/``: one file per case, listed with what is wrong and the expected
message fragment in its README table (read here, so the two cannot drift apart). What cannot be committed
(symbolic link loops, FIFOs, unreadable or huge files) is built at run time.

Checked for each case:

* CLI (``config``, ``nodespec``, ``migparted``, ``scenario``): exit status 2 and exactly one stderr line
  ``fakegpu: error: <file>: ...`` containing the fragment (which carries the field path where there is
  one), at most ``MAX_MESSAGE`` characters, no traceback. In-process through ``fakegpu.cli.main.main`` (fast);
  a few cases also through the real console command, to prove nothing reaches stderr around ``main``.
* ``opaque``: a claim carrying the file as its opaque ``GpuConfig`` parameters, prepared over the DRA
  socket, is answered with one error line naming the claim and containing the fragment; nothing logs a
  traceback.
* Running daemons: the device plugin daemon (its watched files rewritten under it) and the DRA daemon
  (SIGHUP) keep serving their last good inventory for every ``config``/``nodespec``/``migparted`` case
  and log one clear line each.

``KNOWN_BUGS`` lists the cases the product still gets wrong; they are strict xfails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakegpu.cli.main import main
from fakegpu.dra.daemon import DraDriver, DraSettings, run_dra_daemon
from fakegpu.dra.feature_gates import parse_feature_gates
from fakegpu.fakeplugin.daemon import run_plugin_daemon
from fakegpu.kubelet.emulator import KubeletEmulator
from fakegpu.runtime.kubelet_paths import KubeletPaths
from fakegpu.sharing.inputs import InventoryInputs, load_inventory
from fakegpu.sharing.live_inventory import LiveInventory
from fakegpu.sharing.yaml_source import MAX_INPUT_BYTES
from tests.apiserver import serving
from tests.apiserver.fake_apiserver import FakeApiServer
from tests.claim_builders import allocated_claim, opaque_config
from tests.daemon_tasks import stop_and_wait
from tests.dra_kubelet_client import prepare
from tests.eventually import eventually

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"
KINDS = ("config", "nodespec", "migparted", "opaque", "scenario")
FILE_KINDS = ("config", "nodespec", "migparted", "scenario")
"""Kinds the CLI reads from a file (opaque configs arrive inside a claim)."""
WHAT = {"config": "config file", "nodespec": "node spec", "migparted": "mig-parted config", "scenario": "scenario file"}
"""How the error names each kind of file."""
MIG_LAYOUT = "custom"
MAX_MESSAGE = 1000
"""Longest error line accepted as "one clear message": longer ones echo a whole huge value back."""
NODE = "node-a"
DRIVER = "gpu.nvidia.com"
HANG_TIMEOUT = 20.0
"""Seconds after which a subprocess of a case known to hang is killed (a fixed product answers in ~1 s)."""

KNOWN_BUGS: dict[str, str] = {}
"""Cases the product still gets wrong (strict xfails); none are left."""
KNOWN_HANGS: dict[str, str] = {}
"""Cases that still never finish (strict xfail)."""
SLOW_CASES = frozenset({"config-replicas-huge.yaml", "opaque-memory-limit-exponent-slow.json"})
"""Cases that could hang a process: never run in-process, only in a subprocess that is killed in time."""


# --- the corpus --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    file: str
    what: str
    fragment: str

    @property
    def kind(self) -> str:
        return self.file.split("-", 1)[0]

    @property
    def path(self) -> Path:
        return CORPUS / self.file

    @property
    def claim_name(self) -> str:
        return self.path.stem


_ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+?) \| `([^`]+)` \|$")


def load_cases() -> list[Case]:
    """The case table of corpus/README.md (the rows after its ``| file |`` header)."""
    lines = (CORPUS / "README.md").read_text(encoding="utf-8").splitlines()
    start = lines.index("| file | what is wrong | expected message fragment |")
    cases = []
    for line in lines[start + 2 :]:
        m = _ROW.match(line)
        assert m, f"corpus/README.md: not a case row: {line!r}"
        cases.append(Case(m.group(1), m.group(2), m.group(3)))
    return cases


CASES = load_cases()


def cases_of(*kinds: str, hangs: bool = False) -> list[Case]:
    return [c for c in CASES if c.kind in kinds and (hangs or c.file not in SLOW_CASES)]


def marked(cases: Sequence[Case]) -> list[Any]:
    """pytest params, the known bugs as strict xfails."""
    return [
        pytest.param(c, id=c.file, marks=pytest.mark.xfail(reason=KNOWN_BUGS[c.file], strict=True))
        if c.file in KNOWN_BUGS
        else pytest.param(c, id=c.file)
        for c in cases
    ]


def test_corpus_table_and_files_agree():
    files = sorted(p.name for p in CORPUS.iterdir() if p.name != "README.md")
    listed = [c.file for c in CASES]
    assert len(listed) == len(set(listed)), "a file is listed twice"
    assert sorted(listed) == files, "corpus/README.md must list exactly the files in corpus/"
    assert len(CASES) >= 50
    for kind in KINDS:
        assert len(cases_of(kind, hangs=True)) >= 10, kind
    for case in CASES:
        assert re.fullmatch(r"(config|nodespec|migparted|opaque|scenario)-[a-z0-9-]+\.(yaml|json|bin)", case.file)
    assert set(KNOWN_BUGS) <= set(listed)
    assert set(KNOWN_HANGS) <= SLOW_CASES <= set(listed)


# --- CLI, in-process ---------------------------------------------------------------------------------------


def cli_argv(kind: str, path: Path | str) -> list[str]:
    if kind == "config":
        return ["devices", "--config-file", str(path)]
    if kind == "nodespec":
        return ["devices", "--node-spec", str(path)]
    if kind == "migparted":
        return ["devices", "--mig-config", str(path), "--mig-layout", MIG_LAYOUT]
    assert kind == "scenario", kind
    return ["scenario", "run", str(path)]


def error_problems(status: int | None, stderr: str, path: Path | str, fragment: str) -> list[str]:
    """What is wrong with a CLI answer to a bad file (nothing, for a clear one)."""
    problems = []
    if status != 2:
        problems.append(f"exit status {status}, expected 2")
    if "Traceback" in stderr:
        problems.append("a traceback on stderr")
    lines = stderr.splitlines()
    if len(lines) != 1:
        problems.append(f"{len(lines)} stderr lines, expected 1: {stderr[:300]!r}")
    first = lines[0] if lines else ""
    if not first.startswith(f"fakegpu: error: {path}"):
        problems.append(f"the line does not start with 'fakegpu: error: {path}': {first[:300]!r}")
    if fragment not in first:
        problems.append(f"the line lacks {fragment!r}: {first[:300]!r}")
    if len(first) > MAX_MESSAGE:
        problems.append(f"the line is {len(first)} characters long")
    return problems


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[list[str]], tuple[int, str]]]:
    """``status, stderr = run_cli(argv)``: ``fakegpu.cli.main.main`` in this process; the root logger's level and
    handlers (which ``main`` configures) are put back afterwards."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)

    def run(argv: list[str]) -> tuple[int, str]:
        capsys.readouterr()
        try:
            status = main(argv)
        finally:
            root.setLevel(level)
            root.handlers[:] = handlers
        return status, capsys.readouterr().err

    yield run


@pytest.mark.parametrize("case", marked(cases_of(*FILE_KINDS)))
def test_cli_rejects_the_file_with_one_clear_line(case: Case, run_cli):
    status, stderr = run_cli(cli_argv(case.kind, case.path))
    assert error_problems(status, stderr, case.path, case.fragment) == []


# --- special files, built at run time ----------------------------------------------------------------------


def make_special(kind: str, special: str, where: Path) -> tuple[Path, str]:
    """A special file in ``where`` and the fragment its error must carry."""
    what = WHAT[kind]
    path = where / f"{kind}-{special}.yaml"
    if special == "symlink-loop":
        os.symlink(path.name, path)
        return path, f"{what} is a symlink loop"
    if special == "dangling-symlink":
        os.symlink(where / "nowhere" / "x.yaml", path)
        return path, f"{what} not found"
    if special == "directory":
        path.mkdir()
        if kind == "scenario":  # scenario run takes directories of scenarios (issue 15): an empty one is refused
            return path, "no scenario files (*.yaml) in this directory"
        return path, f"{what} is a directory, expected a file"
    if special == "through-a-file":
        (where / "plain").write_text("version: v1\n")
        return where / "plain" / "x.yaml", f"cannot read {what}: Not a directory"
    if special == "name-too-long":
        return where / ("n" * 300 + ".yaml"), f"cannot read {what}: File name too long"
    if special == "huge":
        with path.open("wb") as fh:
            fh.write(b"# " + b"x" * MAX_INPUT_BYTES + b"\n")
        return path, f"{what} is larger than 4 MiB"
    if special == "dev-zero":
        os.symlink("/dev/zero", path)
        return path, f"{what} is not a regular file"
    raise AssertionError(special)


SPECIALS = ("symlink-loop", "dangling-symlink", "directory", "through-a-file", "name-too-long", "huge", "dev-zero")


@pytest.mark.parametrize("special", SPECIALS)
@pytest.mark.parametrize("kind", FILE_KINDS)
def test_cli_rejects_special_files(kind: str, special: str, tmp_path: Path, run_cli):
    path, fragment = make_special(kind, special, tmp_path)
    status, stderr = run_cli(cli_argv(kind, path))
    assert error_problems(status, stderr, path, fragment) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads mode-000 files; the subprocess test drops to uid 65534")
@pytest.mark.parametrize("kind", FILE_KINDS)
def test_cli_rejects_unreadable_files(kind: str, tmp_path: Path, run_cli):
    path = tmp_path / f"{kind}.yaml"
    path.write_text("version: v1\n")
    path.chmod(0)
    status, stderr = run_cli(cli_argv(kind, path))
    assert error_problems(status, stderr, path, f"{WHAT[kind]} is not readable (permission denied)") == []


# --- the real command, as subprocesses ---------------------------------------------------------------------

_AS_NOBODY = (
    "import contextlib, importlib, io, json, os, sys\n"
    "from fakegpu.cli.main import COMMANDS, full_parser, main\n"
    "full_parser()\n"
    "for command in COMMANDS.values():\n"
    "    importlib.import_module(command.run.partition(':')[0])\n"
    "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
    "answers = []\n"
    "for argv in json.loads(sys.argv[1]):\n"
    "    err = io.StringIO()\n"
    "    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):\n"
    "        status = main(argv)\n"
    "    answers.append([status, err.getvalue()])\n"
    "print(json.dumps(answers))\n"
)
"""Root reads any file: run ``main`` for each argv after dropping to nobody (after the imports: the
interpreter may live under /root; the CLI imports a command's modules only when it runs, so every
command's parser and run module is imported first); prints ``[[status, stderr], ...]``."""

_OPAQUE = (
    "import json, sys\n"
    "from fakegpu.dra.claim_error import ClaimError\n"
    "from fakegpu.dra.prepare_plan import prepare_plan\n"
    "from fakegpu.dra.device_map import published_devices\n"
    "from fakegpu.dra.feature_gates import parse_feature_gates\n"
    "from fakegpu.sharing.inputs import InventoryInputs, load_inventory\n"
    "node = load_inventory(InventoryInputs(node_name='node-a', gpus=('1xh100-80gb',))).node\n"
    "claim = json.loads(sys.argv[1])\n"
    "gates = parse_feature_gates('TimeSlicingSettings=true,MPSSupport=true')\n"
    "try:\n"
    "    prepare_plan(claim, 'gpu.nvidia.com', 'node-a', published_devices(node, 'static'), gates)\n"
    "except ClaimError as exc:\n"
    "    sys.stderr.write(f'fakegpu: error: {exc}\\n')\n"
    "    sys.exit(2)\n"
)
"""Decodes one opaque config as NodePrepareResources would, in a process that can be killed; with the sharing
gates on, so the corpus reaches the decoder's checks rather than stopping at a disabled gate."""


@dataclass(frozen=True)
class Run:
    """One subprocess: its command, the path its error must name, the fragment, and whether it may hang."""

    argv: list[str]
    path: str
    fragment: str
    may_hang: bool = False


@dataclass(frozen=True)
class Outcome:
    status: int | None
    """None: killed after HANG_TIMEOUT."""
    stderr: str
    stdout: str = ""


_LIMITED = "import os, resource\nresource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
"""Prefix of a child that may hang: lowest CPU priority (the others start first) and at most 2 GiB."""
_CLI = "import runpy, sys\nsys.argv[0] = 'fakegpu'\nrunpy.run_module('fakegpu.cli.main', run_name='__main__')\n"


def fakegpu(*args: str, may_hang: bool = False) -> list[str]:
    """The console command (``python -m fakegpu.cli.main``), limited when it may hang."""
    if may_hang:
        return [sys.executable, "-c", _LIMITED + _CLI, *args]
    return [sys.executable, "-m", "fakegpu", *args]


def run_all(runs: dict[str, Run]) -> dict[str, Outcome]:
    """Start every run at once (they are mostly interpreter start-up), kill the ones that may hang after
    ``HANG_TIMEOUT`` and wait for the others."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NODE_NAME": "node-a"}
    procs = {
        name: subprocess.Popen(
            run.argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name, run in runs.items()
    }
    out: dict[str, Outcome] = {}
    deadline = time.monotonic() + HANG_TIMEOUT
    for name in sorted(procs, key=lambda n: runs[n].may_hang):
        proc = procs[name]
        try:
            timeout = max(0.1, deadline - time.monotonic()) if runs[name].may_hang else 120.0
            stdout, stderr = proc.communicate(timeout=timeout)
            out[name] = Outcome(proc.returncode, stderr.decode(errors="replace"), stdout.decode(errors="replace"))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            out[name] = Outcome(None, "")
    return out


FIFO_KINDS = ("config", "scenario")
"""Every kind reads through sharing/yaml_source.py read_text; two are enough to show a FIFO is handled."""
SUBPROCESS_CASES = (
    "config-binary-garbage.bin",
    "nodespec-alias-bomb.yaml",
    "migparted-index-out-of-range.yaml",
    "scenario-node-config-invalid.yaml",
    "scenario-xid-unknown-gpu.yaml",
)
"""Proof through the console command: rejected at parse, at node start and while running."""


@pytest.fixture(scope="module")
def subprocess_outcomes() -> Iterator[tuple[dict[str, Run], dict[str, Outcome]]]:
    """Every subprocess case at once: the console command on a few corpus files, the cases known to hang
    (killed after HANG_TIMEOUT) and, as root, unreadable files read after dropping to uid 65534."""
    fifo_dir = Path(tempfile.mkdtemp(prefix="fgbad-", dir="/tmp"))
    fifo_dir.chmod(0o755)
    runs: dict[str, Run] = {}
    by_name = {c.file: c for c in CASES}
    for file in SUBPROCESS_CASES:
        case = by_name[file]
        runs[file] = Run(fakegpu(*cli_argv(case.kind, case.path)), str(case.path), case.fragment)
    for case in cases_of("config", "nodespec", "migparted", "scenario", hangs=True):
        if case.file in SLOW_CASES:
            argv = fakegpu(*cli_argv(case.kind, case.path), may_hang=True)
            runs[case.file] = Run(argv, str(case.path), case.fragment, may_hang=True)
    for case in cases_of("opaque", hangs=True):
        if case.file in SLOW_CASES:
            claim = allocated_claim(case.claim_name, NODE, config=[opaque_config(json.loads(case.path.read_text()))])
            claim["metadata"]["uid"] = "0f0e0d0c-0b0a-4988-8776-655443322110"
            argv = [sys.executable, "-c", _LIMITED + _OPAQUE, json.dumps(claim)]
            runs[case.file] = Run(argv, f"claim default/{case.claim_name}", case.fragment, may_hang=True)
    for kind in FIFO_KINDS:
        fifo = fifo_dir / f"{kind}.fifo"
        os.mkfifo(fifo)
        argv = fakegpu(*cli_argv(kind, fifo), may_hang=True)
        runs[f"fifo-{kind}"] = Run(argv, str(fifo), WHAT[kind], may_hang=True)
    if os.geteuid() == 0:
        argvs = []
        for kind in FILE_KINDS:
            unreadable = fifo_dir / f"{kind}-unreadable.yaml"
            unreadable.write_text("version: v1\n")
            unreadable.chmod(0)
            argvs.append(cli_argv(kind, unreadable))
        runs["unreadable"] = Run([sys.executable, "-c", _AS_NOBODY, json.dumps(argvs)], "", "")
    try:
        yield runs, run_all(runs)
    finally:
        shutil.rmtree(fifo_dir, ignore_errors=True)


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_console_command_prints_one_line_and_no_traceback(name: str, subprocess_outcomes):
    runs, outcomes = subprocess_outcomes
    run, outcome = runs[name], outcomes[name]
    assert error_problems(outcome.status, outcome.stderr, run.path, run.fragment) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="as a normal user the in-process test covers unreadable files")
def test_unreadable_files_as_another_user(subprocess_outcomes):
    runs, outcomes = subprocess_outcomes
    outcome = outcomes["unreadable"]
    assert outcome.status == 0, outcome.stderr
    answers = json.loads(outcome.stdout)
    problems: list[str] = []
    for kind, argv, (status, stderr) in zip(FILE_KINDS, json.loads(runs["unreadable"].argv[-1]), answers, strict=True):
        fragment = f"{WHAT[kind]} is not readable (permission denied)"
        problems.extend(f"{kind}: {p}" for p in error_problems(status, stderr, argv[2], fragment))
    assert problems == [], "\n".join(problems)


def _hang_params() -> list[Any]:
    names = [c.file for c in CASES if c.file in SLOW_CASES] + [f"fifo-{kind}" for kind in FIFO_KINDS]
    return [
        pytest.param(name, id=name, marks=pytest.mark.xfail(reason=KNOWN_HANGS[name], strict=True))
        if name in KNOWN_HANGS
        else pytest.param(name, id=name)
        for name in names
    ]


@pytest.mark.parametrize("name", _hang_params())
def test_input_known_to_hang_is_refused_in_time(name: str, subprocess_outcomes):
    runs, outcomes = subprocess_outcomes
    run, outcome = runs[name], outcomes[name]
    assert outcome.status is not None, f"still running after {HANG_TIMEOUT:g} s"
    assert error_problems(outcome.status, outcome.stderr, run.path, run.fragment) == []


# --- opaque DRA configs ------------------------------------------------------------------------------------


class Records(logging.Handler):
    """Every log record, for checking that nothing logged a traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def tracebacks(self) -> list[str]:
        return [
            r.getMessage()
            for r in self.records
            if r.exc_info or r.exc_text or r.stack_info or "Traceback" in r.getMessage()
        ]


@contextlib.contextmanager
def recording(*names: str, level: int = logging.INFO) -> Iterator[Records]:
    """Record what the named loggers (default: every logger) emit at ``level`` and above."""
    handler = Records()
    loggers = [logging.getLogger(n) for n in names] or [logging.getLogger()]
    saved = [(lg, lg.level) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(min(level, lg.getEffectiveLevel()))
    try:
        yield handler
    finally:
        for lg, lvl in saved:
            lg.removeHandler(handler)
            lg.setLevel(lvl)


def short_root() -> Path:
    return Path(tempfile.mkdtemp(prefix="fgbad-", dir="/tmp"))


@dataclass(frozen=True)
class OpaqueAnswers:
    errors: dict[str, str]
    """Claim name -> the error NodePrepareResources answered."""
    tracebacks: list[str]
    """Messages of log records that carried a traceback."""


async def _prepare_opaque_cases(cases: Sequence[Case]) -> OpaqueAnswers:
    root = short_root()
    server = FakeApiServer("1.36").start()
    try:
        server.add_node(NODE)
        live = LiveInventory(load_inventory(InventoryInputs(node_name=NODE, gpus=("1xh100-80gb",))))
        # The sharing gates on, so every case reaches the decoder's checks rather than a disabled gate.
        gates = parse_feature_gates("TimeSlicingSettings=true,MPSSupport=true")
        driver = DraDriver(
            live,
            KubeletPaths(root / "kubelet"),
            DraSettings(cdi_root=root / "cdi", feature_gates=gates),
            server.client,
        )
        refs = []
        for case in cases:
            params = json.loads(case.path.read_text(encoding="utf-8"))
            claim = server.create_direct(
                allocated_claim(case.claim_name, NODE, config=[opaque_config(params)]), validate=False
            )
            refs.append(("default", case.claim_name, claim["metadata"]["uid"]))
        with recording() as records:
            await driver.start()
            try:
                response = await prepare(driver.plugin.dra_socket, refs)
                assert not list((root / "cdi").iterdir()), "no CDI spec may be written for a rejected claim"
                # The driver still serves: a good claim is prepared after all the bad ones.
                good = allocated_claim("good", NODE)
                uid = server.create_direct(good)["metadata"]["uid"]
                answer = await prepare(driver.plugin.dra_socket, [("default", "good", uid)])
                assert answer.claims[uid].error == ""
                assert [d.device_name for d in answer.claims[uid].devices] == ["gpu-0"]
            finally:
                await driver.stop()
        errors = {name: response.claims[uid].error for _, name, uid in refs}
        return OpaqueAnswers(errors, records.tracebacks())
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def opaque_answers() -> OpaqueAnswers:
    """One DRA driver, one NodePrepareResources call with a claim per opaque case."""
    return asyncio.run(_prepare_opaque_cases(cases_of("opaque")))


@pytest.mark.parametrize("case", marked(cases_of("opaque")))
def test_opaque_config_fails_its_claim_with_one_clear_line(case: Case, opaque_answers: OpaqueAnswers):
    error = opaque_answers.errors[case.claim_name]
    assert error, "the claim was prepared"
    assert "\n" not in error
    assert error.startswith(f"claim default/{case.claim_name}: ")
    assert case.fragment in error
    assert len(error) <= MAX_MESSAGE, f"{len(error)} characters"
    assert "Traceback" not in error and "<class" not in error
    assert [t for t in opaque_answers.tracebacks if f"default/{case.claim_name} (" in t] == []


def test_no_opaque_config_logs_a_traceback(opaque_answers: OpaqueAnswers):
    known = [c.claim_name for c in CASES if c.file in KNOWN_BUGS]
    unexpected = [t for t in opaque_answers.tracebacks if not any(f"default/{name} (" in t for name in known)]
    assert unexpected == []


# --- running daemons ---------------------------------------------------------------------------------------

GOOD_NODE = "version: v1\ngpus:\n- model: h100-80gb\n  count: 8\n"
GOOD_MIG = "version: v1\nmig-configs:\n  custom: []\n"
"""Selects no GPU, so a node spec is taken as it is (a layout that disables MIG would hide its MIG errors)."""


def good_config(replicas: int) -> str:
    return yaml.safe_dump(
        {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": replicas}]}}}
    )


class Stamp:
    """Strictly increasing mtimes, so a poller sees every rewrite even on coarse-grained filesystems."""

    def __init__(self) -> None:
        self.next = time.time() + 10

    def touch(self, path: Path) -> None:
        self.next += 1
        os.utime(path, (self.next, self.next), follow_symlinks=False)


def replace_with(path: Path, content: bytes | str) -> None:
    """Put ``content`` at ``path`` whatever is there now (a file, a link or a directory)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())


def replace_with_special(path: Path, special: str) -> str:
    """Turn the watched ``path`` into a special file; the fragment its error must carry."""
    path.unlink(missing_ok=True)
    if special == "symlink-loop":
        os.symlink(path.name, path)
        return "is a symlink loop"
    if special == "dangling-symlink":
        os.symlink(path.parent / "nowhere" / "x.yaml", path)
        return "not found"
    if special == "directory":
        path.mkdir()
        return "is a directory, expected a file"
    if special == "huge":
        path.write_bytes(b"# " + b"x" * MAX_INPUT_BYTES + b"\n")
        return "is larger than 4 MiB"
    raise AssertionError(special)


DAEMON_SPECIALS = ("symlink-loop", "dangling-symlink", "directory", "huge")


@dataclass
class DaemonFiles:
    config: Path
    node: Path
    mig: Path

    def of(self, kind: str) -> Path:
        return {"config": self.config, "nodespec": self.node, "migparted": self.mig}[kind]

    def good(self, kind: str, replicas: int) -> str:
        return {"config": good_config(replicas), "nodespec": GOOD_NODE, "migparted": GOOD_MIG}[kind]


def daemon_files(root: Path, replicas: int) -> DaemonFiles:
    files = DaemonFiles(root / "config.yaml", root / "node.yaml", root / "mig.yaml")
    files.config.write_text(good_config(replicas))
    files.node.write_text(GOOD_NODE)
    files.mig.write_text(GOOD_MIG)
    return files


def rejection_problems(record: logging.LogRecord, path: Path, fragment: str, known_bug: bool) -> list[str]:
    message = record.getMessage()
    problems = []
    if record.exc_info or "Traceback" in message:
        problems.append("a traceback was logged")
    if known_bug:
        return problems
    if "\n" in message:
        problems.append(f"the log line spans lines: {message[:300]!r}")
    if str(path) not in message:
        problems.append(f"the log line does not name {path}: {message[:300]!r}")
    if fragment not in message:
        problems.append(f"the log line lacks {fragment!r}: {message[:300]!r}")
    if len(message) > MAX_MESSAGE + 200:
        problems.append(f"the log line is {len(message)} characters long")
    return problems


@pytest.fixture
async def plugin_daemon(root: Path) -> AsyncIterator[tuple[KubeletEmulator, DaemonFiles, asyncio.Task[int]]]:
    """The kubelet emulator and ``run_plugin_daemon`` (8x H100, time slicing 2, a mig-parted file) in this
    process, watching its config, node spec and mig-parted files."""
    files = daemon_files(root, replicas=2)
    kubelet = KubeletEmulator(root / "kubelet")
    await kubelet.start()
    stop = asyncio.Event()
    inputs = InventoryInputs(
        node_name=NODE,
        node_spec=str(files.node),
        mig_config=str(files.mig),
        mig_layout=MIG_LAYOUT,
        config_file=str(files.config),
    )
    task = asyncio.create_task(run_plugin_daemon(inputs, KubeletPaths(root / "kubelet"), stop=stop))
    try:
        await eventually(lambda: kubelet.allocatable().get("nvidia.com/gpu") == 16 or task.done(), "16 devices")
        if task.done():
            task.result()
        yield kubelet, files, task
    finally:
        try:
            await stop_and_wait(stop, task, timeout=10.0)
        finally:
            await kubelet.stop()


async def test_plugin_daemon_keeps_serving_its_last_good_inventory(plugin_daemon):
    kubelet, files, task = plugin_daemon
    stamp = Stamp()
    problems: list[str] = []
    with recording("fakegpu") as log:

        def rejections() -> list[logging.LogRecord]:
            return [r for r in log.records if r.getMessage().startswith("config reload rejected")]

        def reloads() -> int:
            return sum(r.getMessage().startswith("config reloaded") for r in log.records)

        # A good change first: what must survive is the last good inventory, not the first.
        files.config.write_text(good_config(3))
        stamp.touch(files.config)
        await eventually(lambda: kubelet.allocatable().get("nvidia.com/gpu") == 24, "the good reload (24 devices)")
        served = (kubelet.capacity(), kubelet.allocatable())

        handed: list[str] = []

        async def hand_over(kind: str, label: str, path_in_message: Path, fragment: str, known_bug: bool) -> None:
            handed.append(label)
            before = len(rejections())
            try:
                await eventually(lambda: len(rejections()) > before or task.done(), f"{label} to be rejected", 3.0)
            except AssertionError as exc:
                problems.append(f"{label}: {exc}")
                return
            assert not task.done(), f"the daemon ended on {label}"
            problems.extend(
                f"{label}: {p}" for p in rejection_problems(rejections()[-1], path_in_message, fragment, known_bug)
            )
            if (kubelet.capacity(), kubelet.allocatable()) != served:
                problems.append(f"{label}: the kubelet now sees {kubelet.allocatable()}")

        async def restore(kind: str, after: str) -> None:
            target = files.of(kind)
            replace_with(target, files.good(kind, 3))
            stamp.touch(target)
            good_before = reloads()
            await eventually(lambda: reloads() > good_before, f"{kind}: the good file back after {after}")

        for kind in ("config", "nodespec", "migparted"):
            target = files.of(kind)
            for case in cases_of(kind):
                replace_with(target, case.path.read_bytes())
                stamp.touch(target)
                await hand_over(kind, case.file, target, case.fragment, case.file in KNOWN_BUGS)
            await restore(kind, "the corpus")
            for special in DAEMON_SPECIALS:
                fragment = replace_with_special(target, special)
                if target.exists() and not target.is_symlink():
                    stamp.touch(target)
                await hand_over(kind, f"{kind} {special}", target, fragment, False)
                await restore(kind, special)
        assert log.tracebacks() == []
        assert len(rejections()) == len(handed), "one log line per rejected file"
        others = [r.getMessage() for r in log.records if r.levelno >= logging.ERROR and r not in rejections()]
        assert others == []
    assert problems == [], "\n".join(problems)
    # Still alive and following its files: a new good config is served.
    files.config.write_text(good_config(4))
    stamp.touch(files.config)
    await eventually(lambda: kubelet.allocatable().get("nvidia.com/gpu") == 32, "the last good reload (32 devices)")


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    with serving(NODE, strict=False) as server:
        yield server


def published(server: FakeApiServer) -> list[str]:
    return sorted(
        d["name"]
        for s in server.objects("resourceslices")
        if s["spec"]["driver"] == DRIVER
        for d in s["spec"].get("devices", [])
    )


async def test_dra_daemon_keeps_its_last_good_inventory_on_sighup(root: Path, apiserver: FakeApiServer):
    files = daemon_files(root, replicas=2)
    files.node.write_text("version: v1\ngpus:\n- model: h100-80gb\n  count: 4\n")
    inputs = InventoryInputs(
        node_name=NODE,
        node_spec=str(files.node),
        mig_config=str(files.mig),
        mig_layout=MIG_LAYOUT,
        config_file=str(files.config),
    )
    settings = DraSettings(cdi_root=root / "cdi", kubeconfig=str(apiserver.kubeconfig(root / "kubeconfig")))
    stop = asyncio.Event()
    problems: list[str] = []
    with recording("fakegpu") as log:
        task = asyncio.create_task(run_dra_daemon(inputs, KubeletPaths(root / "kubelet"), settings, stop=stop))
        try:
            await eventually(lambda: len(published(apiserver)) == 4 or task.done(), "4 published GPUs", 10.0)
            assert not task.done()

            def rejections() -> list[logging.LogRecord]:
                return [r for r in log.records if r.getMessage().startswith("reload rejected")]

            sighups = 0

            def send_sighup() -> None:
                nonlocal sighups
                # Only while the daemon's handler is installed: SIGHUP's default action would end pytest.
                assert not task.done() and signal.getsignal(signal.SIGHUP) not in (signal.SIG_DFL, None)
                sighups += 1
                os.kill(os.getpid(), signal.SIGHUP)

            async def sighup(label: str) -> bool:
                before = len(rejections())
                send_sighup()
                try:
                    await eventually(lambda: len(rejections()) > before, f"{label} to be rejected", 3.0)
                except AssertionError as exc:
                    problems.append(f"{label}: {exc}")
                    return False
                return True

            # A good reload first (4 -> 8 GPUs): the last good inventory is what must survive.
            files.node.write_text(GOOD_NODE)
            send_sighup()
            await eventually(lambda: len(published(apiserver)) == 8, "8 published GPUs after the good reload")
            good = published(apiserver)
            for case in cases_of("config", "nodespec", "migparted"):
                target = files.of(case.kind)
                replace_with(target, case.path.read_bytes())
                if await sighup(case.file):
                    record = rejections()[-1]
                    known = case.file in KNOWN_BUGS
                    problems.extend(
                        f"{case.file}: {p}" for p in rejection_problems(record, target, case.fragment, known)
                    )
                replace_with(target, files.good(case.kind, 2))
            for kind in ("config", "nodespec", "migparted"):
                target = files.of(kind)
                for special in DAEMON_SPECIALS:
                    fragment = replace_with_special(target, special)
                    if await sighup(f"{kind} {special}"):
                        problems.extend(
                            f"{kind} {special}: {p}"
                            for p in rejection_problems(rejections()[-1], target, fragment, False)
                        )
                    replace_with(target, files.good(kind, 2))

            # The barrier: a slice deleted now is written again by a publish that starts after every reload
            # above, from the inventory as it is; an inventory a rejected reload changed would show in it.
            def publishes() -> int:
                return sum(r.getMessage().startswith("published ") for r in log.records)

            before = publishes()
            ours = [s for s in apiserver.objects("resourceslices") if s["spec"]["driver"] == DRIVER]
            apiserver.delete_direct("resourceslices", ours[0]["metadata"]["name"])
            await eventually(lambda: publishes() > before, "the deleted slice published again")
            assert published(apiserver) == good
            assert log.tracebacks() == []
            assert len(rejections()) == sighups - 1, "one log line per rejected file"
            others = [r.getMessage() for r in log.records if r.levelno >= logging.ERROR and r not in rejections()]
            assert others == []
            assert problems == [], "\n".join(problems)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10.0)
