"""Regenerate (or, with ``--check``, verify) the Python modules generated from ``protos/``.

protoc writes imports relative to ``protos/`` (``from deviceplugin.v1beta1 import api_pb2``); they
are rewritten to live under the ``fakegpu.kubeletapi`` package. Messages get ``.pyi`` stubs from mypy-protobuf
so the servers type-check. Tool versions are pinned in pyproject so output is byte-for-byte stable.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = ROOT / "protos"
PACKAGE = "fakegpu.kubeletapi"
OUT_DIR = ROOT / "fakegpu" / "kubeletapi"


def proto_files() -> list[str]:
    return sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))


def _top_dirs(protos: list[str]) -> list[str]:
    return sorted({p.split("/", 1)[0] for p in protos})


def generate_into(out: Path) -> list[Path]:
    """Run protoc into ``out``; return the generated files relative to ``out``."""
    from grpc_tools import protoc  # noqa: PLC0415 - only the generator needs grpcio-tools

    bindir = Path(sys.executable).parent
    protos = proto_files()
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--plugin=protoc-gen-mypy={bindir / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={bindir / 'protoc-gen-mypy_grpc'}",
        f"--mypy_out=quiet:{out}",
        f"--mypy_grpc_out=quiet:{out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    pattern = re.compile(rf"^(from|import) ({'|'.join(map(re.escape, _top_dirs(protos)))})([. ])", re.M)
    generated: list[Path] = []
    for path in sorted(out.rglob("*")):
        if path.is_dir():
            init = path / "__init__.py"
            if not init.exists():
                init.write_text("")
            continue
        text = path.read_text()
        path.write_text(pattern.sub(rf"\1 {PACKAGE}.\2\3", text))
    for path in sorted(out.rglob("*")):
        if path.is_file():
            generated.append(path.relative_to(out))
    return generated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the checked-in output is stale")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        files = generate_into(out)
        tops = _top_dirs(proto_files())
        if args.check:
            stale = [
                str(f) for f in files if not (OUT_DIR / f).exists() or not filecmp.cmp(out / f, OUT_DIR / f, False)
            ]
            extra = [
                str(p.relative_to(OUT_DIR))
                for top in tops
                for p in (OUT_DIR / top).rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.relative_to(OUT_DIR) not in files
            ]
            if stale or extra:
                print("generated code is stale; run: python -m fakegpu.kubeletapi.generate", file=sys.stderr)
                for name in stale:
                    print(f"  differs: {OUT_DIR.relative_to(ROOT)}/{name}", file=sys.stderr)
                for name in extra:
                    print(f"  not generated from protos/: {OUT_DIR.relative_to(ROOT)}/{name}", file=sys.stderr)
                return 1
            print(f"{len(files)} generated files are current")
            return 0
        for top in tops:
            shutil.rmtree(OUT_DIR / top, ignore_errors=True)
        for rel in files:
            (OUT_DIR / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out / rel, OUT_DIR / rel)
        print(f"wrote {len(files)} files under {OUT_DIR.relative_to(ROOT)}/")
        return 0


if __name__ == "__main__":
    sys.exit(main())
