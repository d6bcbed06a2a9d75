"""The ```sh block of deploy/README.md "7. Teardown", read as the commands a shell would run.

Both the static checks (tests/deploy/test_teardown.py) and the run against the fake API server
(tests/integration/test_teardown_run.py) read the block through this parser, so what they check is what the
README shows. It knows the little shell the block uses (comments, ``\\`` continuations, ``if CONDITION; then``
... ``fi`` guards) and fails on anything else, so a new construct gets a look instead of being skipped."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from tests.deploy.manifests import DEPLOY

README = DEPLOY / "README.md"
HEADING = "## 7. Teardown"
# Options of the block's commands that take their value as the next argument.
_VALUED = frozenset(
    {
        "-n",
        "--namespace",
        "-l",
        "--selector",
        "-f",
        "--filename",
        "-k",
        "--kustomize",
        "--timeout",
        "--node",
        "--name-prefix",
        "--host-root",
        "--image",
        "--profile",
        "--name",
        "--api-group",
        "-o",
    }
)


@dataclass(frozen=True)
class Step:
    """One command of the block, and the ``if`` condition it runs under (None: it always runs)."""

    argv: tuple[str, ...]
    guard: str | None

    @property
    def line(self) -> str:
        return shlex.join(self.argv)

    def kubectl(self, verb: str) -> bool:
        """Whether this is ``kubectl <verb> ...``."""
        return self.argv[:1] == ("kubectl",) and self.positionals[:1] == (verb,)

    def fakegpu(self, command: str) -> bool:
        """Whether this is ``fakegpu <command> ...``."""
        return self.argv[:1] == ("fakegpu",) and self.positionals[:1] == (command,)

    @property
    def positionals(self) -> tuple[str, ...]:
        """The arguments after the program that are neither options nor an option's value: verb, types, names."""
        found: list[str] = []
        args = list(self.argv[1:])
        while args:
            arg = args.pop(0)
            if arg in _VALUED:
                args.pop(0)
            elif arg == "--":
                break
            elif not arg.startswith("-"):
                found.append(arg)
        return tuple(found)

    def has(self, *flags: str) -> bool:
        return any(a == f or a.startswith(f"{f}=") for a in self.argv for f in flags)

    def value(self, flag: str) -> str | None:
        """The value of ``flag`` (``--flag v`` or ``--flag=v``), None if absent."""
        for i, arg in enumerate(self.argv):
            if arg == flag and i + 1 < len(self.argv):
                return self.argv[i + 1]
            if arg.startswith(f"{flag}="):
                return arg.split("=", 1)[1]
        return None


def block_text() -> str:
    text = README.read_text()
    start = text.index(HEADING)
    match = re.search(r"```sh\n(.*?)```", text[start:], flags=re.S)
    if match is None:
        raise AssertionError(f"deploy/README.md: no ```sh block under {HEADING!r}")
    return match.group(1)


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending:
        raise AssertionError(f"teardown block ends in a continuation: {pending!r}")
    return lines


def steps() -> list[Step]:
    """The block's commands in order; commands inside ``if ...; then`` ... ``fi`` carry that condition."""
    result: list[Step] = []
    guard: str | None = None
    for line in _logical_lines(block_text()):
        opening = re.fullmatch(r"if (.+); then", line)
        if opening is not None:
            if guard is not None:
                raise AssertionError(f"teardown block: nested if: {line!r}")
            guard = opening.group(1)
            continue
        if line == "fi":
            if guard is None:
                raise AssertionError("teardown block: fi without if")
            guard = None
            continue
        argv = tuple(shlex.split(line, comments=True))
        for token in argv:
            if token in ("|", "||", "&&", ";", "&") or token.startswith(("$(", "`")):
                raise AssertionError(f"teardown block: the parser does not know {token!r} in {line!r}")
        result.append(Step(argv, guard))
    if guard is not None:
        raise AssertionError("teardown block: if without fi")
    return result
