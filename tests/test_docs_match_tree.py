"""Text that names the tree names what is there: README's layout names every room, and no doc, docstring or
comment names a module or a repository path that does not exist, nor cites a note outside the repository.

Everything is read at test time, so a module added, renamed or removed by a later change is judged against
the tree as it is then.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fakegpu"
TOP = ("fakegpu/", "tests/", "scenarios/", "bench/", "deploy/", "protos/", "docs/", ".ci/")
DOCS = sorted(
    [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "deploy" / "README.md",
        ROOT / "scenarios" / "README.md",
        ROOT / "tests" / "reliability" / "corpus" / "README.md",
        *(ROOT / "docs").glob("*.md"),
    ]
)
"""The prose documents whose module names and repository paths are checked."""
PYTHON_ROOTS = ("fakegpu", "tests", "bench", "deploy")
DOTTED = re.compile(r"(?<![\w./-])fakegpu(?:\.[A-Za-z_]\w*)+(?![\w/:-])")
"""``fakegpu.x.y``: a module, then perhaps an attribute; not a label domain (``fakegpu.io/...``)."""
FILE_NAMES = {"tar", "git"}
"""``fakegpu.tar``, ``fakegpu.git``: file names that look like module names."""
REPO_PATH = re.compile(r"(?<![\w./-])((?:fakegpu|tests|scenarios|bench|deploy|protos|docs|\.ci)/[\w./-]*)")
CHECKED_SUFFIXES = ("/", ".py", ".md", ".yaml", ".yml", ".json", ".toml", ".proto", ".sh", ".lock", ".txt")
"""Paths with these endings are ours; others (``tests/e2e/..._test.go``, ``.xml``) are upstream files that
docstrings cite inside another repository."""
ROOM_MEMBER = re.compile(r"``([a-z_][a-z0-9_]*(?:\.py|/)?)``")
"""In a package's docstring, a bare ``name`` is one of its modules (``name``, ``name.py``) or subpackages."""
OUTSIDE = [
    re.compile(r"/wor[k]/"),
    re.compile(r"\.\./share[d]"),
    re.compile(r"\b(?:notes|reference) [§]"),
    re.compile(r"\bresearch note[s]\b"),
    re.compile(r"\bK[S] @"),
    re.compile(r"golde[n]/"),
    re.compile(r"\bcode corpu[s]\b"),
    re.compile(r"\b(?![Rr]elease\b)(?:[A-Z0-9][\w.]*|\w+-[\w-]+)(?: setup)? note[s]\b"),
]
"""Citations a reader of the repository cannot follow: the authors' workspace, notes kept beside it (``A30
notes``, ``<host> notes``, ``... setup notes``) and the search corpus they were read from; release notes and
a module's own notes (``unverified`` notes) are fine."""
TEXT_ROOTS = ("fakegpu", "tests", "bench", "deploy", "scenarios", "protos", "docs", ".ci")
SKIPPED_DIRS = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis"}


def layout_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Layout")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def named_paths(text: str) -> list[str]:
    """Backticked repository paths (``fakegpu/sharing/catalog.py``, ``tests/unit/``), without globs or
    placeholders."""
    found = [m for m in re.findall(r"`([^`\s]+)`", text) if m.startswith(TOP)]
    return sorted({p for p in found if not any(c in p for c in "*<>{}[]")})


def python_files() -> list[Path]:
    files = [p for top in PYTHON_ROOTS for p in (ROOT / top).rglob("*.py")]
    return sorted(p for p in files if not SKIPPED_DIRS.intersection(p.parts))


def docstrings(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of the module's, each class's and each function's docstring."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=False)
            if text is not None:
                yield node.body[0].lineno, text


def comments(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every ``#`` comment."""
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def top_level_names(module: Path) -> set[str]:
    """Names a module binds at its top level (definitions, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def dotted_problem(name: str) -> str | None:
    """Why a dotted name (``fakegpu.sharing.catalog.CATALOG``) names nothing, or None when it names a package, a
    module or a name one of them binds."""
    parts = name.split(".")
    here = ROOT / parts[0]
    for i, part in enumerate(parts[1:], start=1):
        if (here / part / "__init__.py").exists():
            here = here / part
        elif (here / f"{part}.py").exists():
            rest = parts[i + 1 :]
            if rest and rest[0] not in top_level_names(here / f"{part}.py"):
                return f"{'.'.join(parts[: i + 1])} has no {rest[0]}"
            return None
        elif i > 1 and part in top_level_names(here / "__init__.py"):
            return None
        else:
            return f"no module {'.'.join(parts[: i + 1])}"
    return None


def dotted_names(text: str) -> list[str]:
    return [m for m in DOTTED.findall(text) if m.split(".")[-1] not in FILE_NAMES]


def repository_paths(text: str) -> list[str]:
    """Repository paths a text names (ours by their ending), without placeholders; trailing punctuation off."""
    found = (m.rstrip(".,;:)") for m in REPO_PATH.findall(text))
    ours = (p for p in found if p.endswith(CHECKED_SUFFIXES) or "." not in p.rsplit("/", 1)[-1])
    return sorted({p for p in ours if not any(c in p for c in "*<>{}[]")})


def problems_in(text: str) -> list[str]:
    found = [f"{name}: {why}" for name in dotted_names(text) if (why := dotted_problem(name))]
    found += [f"{path}: no such path" for path in repository_paths(text) if not (ROOT / path).exists()]
    return found


@pytest.mark.parametrize("doc", ["CONTRIBUTING.md", "README.md"])
def test_every_path_a_doc_names_exists(doc):
    text = (ROOT / doc).read_text()
    paths = named_paths(text)
    assert paths, f"{doc} names no repository path: the check would prove nothing"
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert missing == [], f"{doc} names paths that do not exist: {missing}"


def test_the_layout_names_every_room_of_the_package():
    rooms = sorted(p.name for p in (ROOT / "fakegpu").iterdir() if (p / "__init__.py").exists())
    layout = layout_section()
    unnamed = [room for room in rooms if f"`fakegpu/{room}/`" not in layout]
    assert unnamed == [], f"README's layout does not name these rooms: {unnamed}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_name_only_modules_and_paths_that_exist(doc):
    assert problems_in(doc.read_text()) == [], f"{doc.relative_to(ROOT)} names what is not in the tree"


def test_docstrings_and_comments_name_only_modules_and_paths_that_exist():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {problem}"
        for path in python_files()
        for line, text in (*docstrings(path), *comments(path))
        for problem in problems_in(text)
    ]
    assert found == [], "docstrings or comments name modules or paths that do not exist:\n" + "\n".join(found)


def package_names(package: Path) -> set[str]:
    """What a bare ``name`` in a package's docstring may be: one of its modules or subpackages (``names``,
    ``exporter.py``, ``dcgm/``), a name one of its modules binds (``admin_request``), or a package above."""
    modules = [p for p in package.rglob("*.py") if not SKIPPED_DIRS.intersection(p.parts)]
    names = {p.stem for p in modules} | {p.parent.name for p in modules}
    names |= {name for module in modules for name in top_level_names(module)}
    names |= {  # functions defined inside others too: pytest fixtures made when the plugin loads
        node.name
        for module in modules
        for node in ast.walk(ast.parse(module.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    return names | {part for part in package.relative_to(ROOT).parts}


def test_package_docstrings_name_only_what_they_hold():
    """A room's docstring that lists its modules by bare name (``names``, ``pools``) lists ones it has."""
    found = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        package = init.parent
        allowed = package_names(package)
        for line, text in docstrings(init):
            for member in ROOM_MEMBER.findall(text):
                stem = member.removesuffix(".py").removesuffix("/")
                if stem not in allowed and not (member.endswith("/") and (ROOT / member).is_dir()):
                    found.append(f"{init.relative_to(ROOT)}:{line}: ``{member}`` is not in {package.name}")
    assert found == [], "package docstrings name modules they do not have:\n" + "\n".join(found)


def test_a_package_docstring_that_lists_its_modules_lists_them_all():
    """A room's docstring that says "Modules" and names them is its table of contents: a module added to
    the room and left out of it fails here."""
    found = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        text = "\n".join(t for _line, t in docstrings(init))
        if "Modules" not in text:
            continue
        named = {m.removesuffix(".py").removesuffix("/") for m in ROOM_MEMBER.findall(text)}
        held = {p.stem for p in init.parent.glob("*.py") if p.stem != "__init__"}
        held |= {p.name for p in init.parent.iterdir() if (p / "__init__.py").exists()}
        found += [f"{init.relative_to(ROOT)}: ``{m}`` is not listed" for m in sorted(held - named)]
    assert found == [], "package docstrings that list their modules leave some out:\n" + "\n".join(found)


CODE_NAME = re.compile(r"_?[A-Za-z][A-Za-z0-9_]*")
"""A backticked span that may be a Python name; ``code_named`` says whether it is written as one."""


def code_named(span: str) -> bool:
    """``NEWEST_LAYOUT``, ``BoardFacts``, ``_nvidia_response``, ``wait_for``: a constant, a class or a function
    as this project names them; not ``fault`` (a step) nor ``deviceListStrategy`` (NVIDIA's config key)."""
    return bool(CODE_NAME.fullmatch(span)) and ("_" in span or span[0].isupper())


def defined_names(module: Path) -> set[str]:
    """Names a module defines at its top level (functions, classes, assignments), not those it imports."""
    imported: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
    return top_level_names(module) - imported


def row_code_names(row: str) -> Iterator[tuple[str, str | None]]:
    """(name, the repository file its cell says defines it) for every bare code name of a table row: the file
    after it (``DRA_OPS`` in ``fakegpu/dra/admin_ops.py``), else the nearest ``.py`` path before it in its
    cell; a bare file name (``health_ops.py``) with the directory the row names it in, or None."""
    for cell in row.split(" | "):
        spans = list(re.finditer(r"`([^`\s]+)`", cell))
        for i, span in enumerate(spans):
            name = span[1]
            following = spans[i + 1] if i + 1 < len(spans) else None
            if code_named(name):
                if following is not None and cell[span.end() : following.start()] == " in ":
                    yield name, following[1]
                    continue
                before = [s[1] for s in spans[:i] if s[1].endswith(".py") and "/" in s[1]]
                yield name, before[-1] if before else None
            elif CODE_NAME.fullmatch(name.removesuffix(".py")) and name.endswith(".py"):
                named = re.findall(r"`((?:fakegpu|tests|bench)/[^`\s]*)`", row)
                homes = [
                    p for p in named if p.endswith("/" + name) or (p.endswith("/") and (ROOT / p / name).is_file())
                ]
                yield name, homes[0] if homes else None


def contributing_code_names() -> list[tuple[str, str | None]]:
    rows = [line for line in (ROOT / "CONTRIBUTING.md").read_text().splitlines() if line.startswith("| ")]
    return [found for row in rows for found in row_code_names(row)]


def code_name_problem(name: str, home: str | None) -> str | None:
    if home is None:
        return f"`{name}`: its row names no file that holds it"
    path = ROOT / home
    if name.endswith(".py"):
        return None if (path if path.is_file() else path / name).is_file() else f"`{name}`: not in {home}"
    return None if path.is_file() and name in defined_names(path) else f"`{name}`: not defined in {home}"


def test_contributing_names_code_that_the_file_its_row_names_defines():
    """The deviceListStrategy row's ``_nvidia_response`` must be a function of the file that row points to: a
    rename or a move fails here."""
    found = contributing_code_names()
    assert len([name for name, _home in found if not name.endswith(".py")]) >= 10, found
    problems = [why for name, home in found if (why := code_name_problem(name, home))]
    assert problems == [], "CONTRIBUTING.md names code where it is not:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        (
            "| x | `fakegpu/kube/discovery.py` (`OLDEST_LAYOUT`) |",
            "`OLDEST_LAYOUT`: not defined in fakegpu/kube/discovery.py",
        ),
        ("| x | `DRA_OPS` in `fakegpu/kube/discovery.py` |", "`DRA_OPS`: not defined in fakegpu/kube/discovery.py"),
        ("| x | the `SLICE_KINDS` table |", "`SLICE_KINDS`: its row names no file that holds it"),
        ("| x | `fakegpu/control/` (`heath_ops.py`) |", "`heath_ops.py`: its row names no file that holds it"),
        (
            "| x | `fakegpu/sharing/catalog.py` imports `MappingProxyType` |",
            "`MappingProxyType`: not defined in fakegpu/sharing/catalog.py",
        ),
    ],
)
def test_the_code_name_check_sees_a_name_its_file_does_not_define(row, problem):
    assert [why for name, home in row_code_names(row) if (why := code_name_problem(name, home))] == [problem]


def text_files() -> list[Path]:
    files = [p for top in TEXT_ROOTS for p in (ROOT / top).rglob("*") if p.is_file()]
    files += [p for p in ROOT.iterdir() if p.is_file() and p.suffix in (".md", ".toml")]
    return sorted(p for p in files if not SKIPPED_DIRS.intersection(p.parts))


def test_nothing_cites_notes_outside_the_repository():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in text_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        if any(pattern.search(line) for pattern in OUTSIDE)
    ]
    assert found == [], (
        "cite the upstream repository, file and commit or release instead of notes outside the repository:\n"
        + "\n".join(found)
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("see ``fakegpu.sharing.no_such_module``", "fakegpu.sharing.no_such_module: no module"),
        ("``fakegpu.nowhere``", "fakegpu.nowhere: no module"),
        ("``fakegpu.sharing.catalog.NO_SUCH_NAME``", "fakegpu.sharing.catalog has no NO_SUCH_NAME"),
        ("in fakegpu/sharing/no_such_module.py,", "fakegpu/sharing/no_such_module.py: no such path"),
        ("``tests/unit/no_such_dir/``", "tests/unit/no_such_dir/: no such path"),
    ],
)
def test_the_checks_see_a_missing_module_or_path(text, problem):
    """The checks above would fail on a stale name: each kind of one is caught."""
    assert any(problem in p for p in problems_in(text)), problems_in(text)


@pytest.mark.parametrize(
    "text",
    [
        "``fakegpu.sharing.catalog.CATALOG`` in ``fakegpu/sharing/catalog.py``",
        "the label ``fakegpu.io/managed-labels``; ``podman save -o fakegpu.tar``; /var/run/fakegpu/plugin.sock",
        "NVIDIA's ``tests/e2e/gpu-feature-discovery_test.go``; ``tests/<dir>/``",
    ],
)
def test_the_checks_pass_what_exists_or_is_no_module(text):
    assert problems_in(text) == []


@pytest.mark.parametrize(
    "cited",
    [
        "/wo" + "rk/notes/x.md",
        "notes " + "§3.3",
        "K" + "S @0807eed",
        "shared/golde" + "n/real-kubelet.md",
        "A30 " + "notes in the code " + "corpus",
        "(code " + "corpus, RHEL AI setup " + "notes)",
        "(8x H100 under Slurm, della-k17g3 " + "notes)",
    ],
)
def test_the_outside_patterns_match_a_workspace_citation(cited):
    assert any(p.search(cited) for p in OUTSIDE)


@pytest.mark.parametrize(
    "text",
    ["the board's ``unverified`` notes", "NVIDIA's release notes for 570", "Release notes", "the bad-input corpus"],
)
def test_the_outside_patterns_pass_what_a_reader_can_follow(text):
    assert not any(p.search(text) for p in OUTSIDE)
