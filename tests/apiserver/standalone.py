"""The fake API server in a process of its own, so that a benchmark's client process measures only itself.

``python -m tests.apiserver.standalone --minor 36 [--no-schema-validation] [--events] [--tls --kubeconfig PATH]``
prints the server's URL on one line of stdout and serves until its stdin closes (or SIGTERM/SIGINT), which
suits a parent holding a pipe to it; with ``--until-signal`` it leaves stdin alone and serves until SIGTERM or
SIGINT, which suits a shell's background job (``... --until-signal &``: a job reading the terminal is stopped,
and one started from a script reads an empty stdin and would stop at once); with
``--tls`` it serves HTTPS with a CA of its own, which the kubeconfig it writes to PATH carries; with
``--events`` it serves core/v1 Events, so the daemons' node Events can be rehearsed against it.
:class:`ServerProcess` starts and stops one from Python and reads its request counts through
``GET /debug/fakegpu/counts``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import yaml

from .fake_apiserver import COUNTS_PATH, FakeApiServer

_REPO = Path(__file__).resolve().parent.parent.parent


class ServerProcess:
    """A child process serving a FakeApiServer; a context manager. ``url`` and ``kubeconfig`` (a file that
    points at it, with the CA when ``tls``) are set once it serves."""

    def __init__(
        self,
        minor: int = 36,
        *,
        validate_schema: bool = True,
        history_limit: int = 1000,
        tls: bool = False,
        events: bool = False,
    ) -> None:
        self.args = [sys.executable, "-m", "tests.apiserver.standalone", "--minor", str(minor)]
        self.args += ["--history-limit", str(history_limit)]
        if not validate_schema:
            self.args.append("--no-schema-validation")
        if tls:
            self.args.append("--tls")
        if events:
            self.args.append("--events")
        self.url = ""
        self.kubeconfig = Path()
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._context: ssl.SSLContext | None = None
        self._process: subprocess.Popen[str] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> ServerProcess:
        self._folder = tempfile.TemporaryDirectory(prefix="fakegpu-apiserver-")
        self.kubeconfig = Path(self._folder.name, "kubeconfig")
        args = [*self.args, "--kubeconfig", str(self.kubeconfig)]
        self._process = subprocess.Popen(args, cwd=_REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        line = self._process.stdout.readline().strip()
        if not line.startswith(("http://", "https://")):
            self.stop()
            raise RuntimeError(f"the fake API server process did not start (it said {line!r})")
        self.url = line
        ca = yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"].get("certificate-authority-data")
        if ca is not None:
            self._context = ssl.create_default_context(cadata=base64.b64decode(ca).decode())
        return self

    def counts(self) -> dict[str, Any]:
        """Requests and bytes received per verb so far (the debug endpoint; reading it is not counted)."""
        with urllib.request.urlopen(self.url + COUNTS_PATH, timeout=30, context=self._context) as response:
            doc: dict[str, Any] = json.load(response)
        return doc

    def cpu_seconds(self) -> float | None:
        """The server process's CPU so far (user + system, from /proc; Linux), None where /proc does not tell."""
        if self._process is None:
            return None
        try:
            fields = Path(f"/proc/{self._process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss_mib(self) -> float | None:
        """The server process's peak resident set (VmHWM), where /proc tells it (Linux)."""
        if self._process is None:
            return None
        try:
            status = Path(f"/proc/{self._process.pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return None

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _wait_for_eof(done: threading.Event) -> None:
    sys.stdin.read()
    done.set()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minor", type=int, default=36, help="Kubernetes 1.<minor>, 32-36 (default %(default)s)")
    parser.add_argument(
        "--no-schema-validation", action="store_true", help="skip the kubernetes-validate schema check of writes"
    )
    parser.add_argument("--history-limit", type=int, default=1000, help="watch events kept (default %(default)s)")
    parser.add_argument("--tls", action="store_true", help="serve HTTPS with a CA made at start")
    parser.add_argument("--events", action="store_true", help="serve core/v1 Events (node fault Events)")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for the server (with the CA under --tls) here")
    parser.add_argument(
        "--until-signal",
        action="store_true",
        help="serve until SIGTERM or SIGINT, not reading stdin (run it in the background of a shell: ... &)",
    )
    args = parser.parse_args(argv)
    done = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server = FakeApiServer(
        f"1.{args.minor}",
        validate_schema=not args.no_schema_validation,
        history_limit=args.history_limit,
        tls=args.tls,
        events=args.events,
    )
    with server:
        if args.kubeconfig:
            server.kubeconfig(args.kubeconfig)
        print(server.url, flush=True)
        if not args.until_signal:
            # stdin closing (the parent ends or exits) is the other way to stop.
            threading.Thread(target=_wait_for_eof, args=(done,), daemon=True).start()
        done.wait()
    if server.errors:
        print("\n".join(server.errors), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
