"""The ``fakegpu`` argument parser: a flag or value typo is one line naming the flag, then where to read more.

argparse's own ``error()`` prints the whole usage (20 lines for the daemons) before the message, which
pushes the one useful line off a small terminal. Subparsers are made with the parser's own class, so
every ``fakegpu`` subcommand (and ``scenario run``, ``ctl OP``) answers the same way.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import NoReturn

EXIT_USAGE = 2


class TerseParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: ``PROG: error: MESSAGE; see 'PROG --help'``, exit 2."""

    def error(self, message: str) -> NoReturn:
        one_line = " ".join(message.split())
        sys.stderr.write(f"{self.prog}: error: {one_line}; see '{self.prog} --help'\n")
        sys.exit(EXIT_USAGE)

    def unrecognized(self, extras: list[str]) -> NoReturn:
        """The error for arguments no option took, with the closest option of this command when one is near."""
        message = f"unrecognized arguments: {' '.join(extras)}"
        first = next((e.split("=", 1)[0] for e in extras if e.startswith("-")), None)
        if first is not None:
            near = difflib.get_close_matches(first, sorted(option_strings(self)), n=1, cutoff=0.7)
            if near:
                message += f" (did you mean {near[0]}?)"
        self.error(message)


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of ``parser`` and of its nested subcommands."""
    out: set[str] = set()
    for action in parser._actions:
        out.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                out.update(option_strings(child))
    return out
