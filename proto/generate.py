"""Regenerate the Python gRPC stubs from KEDA's externalscaler.proto files.

    python -m warmscale.proto.generate [--reference DIR]

- ``proto/externalscaler.proto`` (KEDA main, with ``StreamMetricSpec``) -> ``proto/externalscaler_pb2.py``,
  ``proto/externalscaler_pb2.pyi`` and ``proto/externalscaler_pb2_grpc.py`` (package ``proto``; the server's).
- KEDA v2.20.2's proto -> ``tests/scaler/keda_v2_20_2/`` (test-only client stubs).

Both protos declare the same protobuf package (``externalscaler``), so the two generated message
modules cannot share protobuf's default descriptor pool in one process. The v2.20.2 module is
rewritten to register into a private pool; its messages are wire-identical, which is what the tests
need (a v2.20.2 client talking to the server built from the main proto).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REFERENCE = ROOT.parent / "shared" / "reference" / "keda"
MAIN_OUT = ROOT / "proto"
V2_OUT = ROOT / "tests" / "scaler" / "keda_v2_20_2"


def _protoc(proto_dir: Path, out: Path, pyi: bool) -> None:
    from grpc_tools import protoc  # dev dependency

    args = [
        "grpc_tools.protoc",
        f"-I{proto_dir}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
    ]
    if pyi:
        args.append(f"--pyi_out={out}")
    args.append(str(proto_dir / "externalscaler.proto"))
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"protoc failed ({rc}) for {proto_dir}")


def _package_import(out: Path, package: str) -> None:
    """protoc emits ``import externalscaler_pb2``; make it a package-relative import."""
    grpc_file = out / "externalscaler_pb2_grpc.py"
    text = grpc_file.read_text()
    text = re.sub(
        r"^import externalscaler_pb2 as (\w+)$",
        rf"from {package} import externalscaler_pb2 as \1",
        text,
        flags=re.M,
    )
    grpc_file.write_text(text)


def _private_pool(out: Path) -> None:
    pb2 = out / "externalscaler_pb2.py"
    text = pb2.read_text()
    marker = "_descriptor_pool.Default().AddSerializedFile("
    if marker not in text:
        raise SystemExit("unexpected protoc output: no default-pool registration found")
    text = text.replace(marker, "_POOL.AddSerializedFile(", 1)
    text = text.replace(
        "_sym_db = _symbol_database.Default()",
        "_sym_db = _symbol_database.Default()\n_POOL = _descriptor_pool.DescriptorPool()  # private: proto/generate.py",
        1,
    )
    pb2.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE, help="directory with KEDA's proto files")
    args = ap.parse_args(argv)
    ref: Path = args.reference

    main_proto = ref / "externalscaler-main.proto"
    if main_proto.exists():
        shutil.copyfile(main_proto, MAIN_OUT / "externalscaler.proto")
    _protoc(MAIN_OUT, MAIN_OUT, pyi=True)
    _package_import(MAIN_OUT, "warmscale.proto")
    pyi = MAIN_OUT / "externalscaler_pb2.pyi"
    pyi.write_text("# ruff: noqa\n" + pyi.read_text())

    v2 = ref / "externalscaler-v2.20.2.proto"
    V2_OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(v2, Path(tmp) / "externalscaler.proto")
        shutil.copyfile(v2, V2_OUT / "externalscaler.proto")
        _protoc(Path(tmp), V2_OUT, pyi=False)
    _package_import(V2_OUT, "tests.scaler.keda_v2_20_2")
    _private_pool(V2_OUT)
    for f in V2_OUT.glob("externalscaler_pb2*.py"):  # generated: keep linters out
        f.write_text("# ruff: noqa\n# mypy: ignore-errors\n" + f.read_text())
    init = V2_OUT / "__init__.py"
    if not init.exists():
        init.write_text('"""Client stubs from KEDA v2.20.2\'s externalscaler.proto'
                        ' (python -m warmscale.proto.generate)."""\n')
    print(f"generated stubs in {MAIN_OUT} and {V2_OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
