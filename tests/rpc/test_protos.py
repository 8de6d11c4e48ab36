"""The committed gRPC stubs are exactly what `python -m rayspec.rpc.protos` makes of protos/."""

from __future__ import annotations

import pytest

from rayspec.rpc.protos import GENERATED, generate


def test_committed_stubs_are_current(tmp_path):
    pytest.importorskip("grpc_tools")
    fresh = {path.name: path.read_text() for path in generate(tmp_path)}
    committed = {path.name: path.read_text() for path in GENERATED.glob("*.py")}
    assert set(fresh) == set(committed), "a proto was added or removed: run python -m rayspec.rpc.protos"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale stubs {stale}: run python -m rayspec.rpc.protos"
