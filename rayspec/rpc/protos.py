"""Generate the Python gRPC stubs from `protos/` (grpcio-tools, a dev dependency).

    python -m rayspec.rpc.protos          # rewrites rayspec/rpc/generated/

The stubs are committed, so installing rayspec needs no code generation; a test checks that
they are what this script produces from the current protos (but for the stamps of the
grpcio-tools and protoc versions, which a patch release of the tools changes alone), and that
those stamps ask for no newer grpcio and protobuf than pyproject.toml's minimums.  protoc
names Python modules after the proto paths (`from rayspec.v1 import tensor_pb2`, `from
grpc.health.v1 import health_pb2`), which would resolve into this package and into grpcio;
the stubs are placed flat in `rayspec.rpc.generated` and those imports rewritten to point
there.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos"
GENERATED = Path(__file__).resolve().parent / "generated"
_IMPORT = re.compile(r"^from (rayspec\.v1|grpc\.health\.v1) import (\w+)", re.MULTILINE)


def proto_files() -> list[Path]:
    return sorted(PROTOS.rglob("*.proto"))


def generate(out: Path) -> list[Path]:
    """Write the stubs for every proto into `out` (flat); returns the files written."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        args = ["protoc", f"-I{PROTOS}", f"--python_out={tmp}", f"--grpc_python_out={tmp}"]
        if protoc.main(args + [str(p) for p in proto_files()]) != 0:
            raise RuntimeError("protoc failed")
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for path in sorted(Path(tmp).rglob("*.py")):
            text = _IMPORT.sub(r"from rayspec.rpc.generated import \2", path.read_text())
            target = out / path.name
            target.write_text(text)
            written.append(target)
        (out / "__init__.py").write_text('"""gRPC stubs generated from protos/ by `python -m rayspec.rpc.protos`; do not edit."""\n')
        return written + [out / "__init__.py"]


def main() -> int:
    for path in generate(GENERATED):
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
