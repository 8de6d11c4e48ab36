"""The committed gRPC stubs are exactly what `python -m rayspec.rpc.protos` makes of protos/,
but for the stamps of the generating tools' versions, and they load with the oldest grpcio
and protobuf that pyproject.toml allows."""

from __future__ import annotations

import re
import tomllib

import pytest

from rayspec.rpc.protos import GENERATED, ROOT, generate

# What grpcio-tools writes of its own version and its protoc's: a patch release of the tools
# changes these and nothing else, and the stubs' code is what the test compares.
GRPC_STAMP = re.compile(r"^GRPC_GENERATED_VERSION = '([\d.]+)'$", re.MULTILINE)
PROTOBUF_STAMPS = (re.compile(r"^# Protobuf Python Version: [\d.]+$", re.MULTILINE),
                   re.compile(r"(ValidateProtobufRuntimeVersion\(\n\s+_runtime_version\.Domain\.PUBLIC,\n)"
                              r"\s+(\d+),\n\s+(\d+),\n\s+(\d+),", re.MULTILINE))


def _unstamped(text: str) -> str:
    for stamp in (GRPC_STAMP, *PROTOBUF_STAMPS):
        text = stamp.sub("<the tools' version>", text)
    return text


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _minimum(package: str) -> tuple[int, ...]:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [pin] = [d for d in dependencies if re.match(rf"{package}\s*>=", d)]
    return _version(pin.split(">=")[1].split(",")[0].strip())


def test_committed_stubs_are_current(tmp_path):
    pytest.importorskip("grpc_tools")
    fresh = {path.name: path.read_text() for path in generate(tmp_path)}
    committed = {path.name: path.read_text() for path in GENERATED.glob("*.py")}
    assert set(fresh) == set(committed), "a proto was added or removed: run python -m rayspec.rpc.protos"
    stale = [name for name in fresh if _unstamped(fresh[name]) != _unstamped(committed[name])]
    assert not stale, f"stale stubs {stale}: run python -m rayspec.rpc.protos"


def test_committed_stubs_load_with_the_oldest_grpcio_and_protobuf_allowed():
    """A stub refuses to import under a grpcio or protobuf older than its stamp: the stamps
    must not ask for more than pyproject.toml's minimums."""
    grpc_stamps = [_version(v) for path in GENERATED.glob("*_grpc.py") for v in GRPC_STAMP.findall(path.read_text())]
    protobuf_stamps = [tuple(int(part) for part in match[1:])
                       for path in GENERATED.glob("*_pb2.py") for match in PROTOBUF_STAMPS[1].findall(path.read_text())]
    assert len(grpc_stamps) == len(list(GENERATED.glob("*_grpc.py"))) > 0
    assert len(protobuf_stamps) == len(list(GENERATED.glob("*_pb2.py"))) > 0
    assert max(grpc_stamps) <= _minimum("grpcio"), "the stubs ask for a newer grpcio than pyproject.toml allows"
    assert max(protobuf_stamps) <= _minimum("protobuf"), "the stubs ask for a newer protobuf than pyproject.toml allows"
