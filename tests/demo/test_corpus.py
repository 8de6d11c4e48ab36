"""The demo corpus: which stdlib files are used and how they are split (no training needed)."""

from __future__ import annotations

import random

from rayspec.demo.corpus import HELDOUT_PERCENT, list_sources, split_of, split_sources

KEPT = ["abc.py", "asyncio/events.py", "json/__init__.py", "lib2to3/pgen2/parse.py"]
DROPPED = [
    "site-packages/numpy/core.py",           # third-party code
    "test/test_abc.py", "test/support/helper.py", "ctypes/test/common.py",  # test suites
    "lib2to3/tests/data/bom.py", "idlelib/idle_test/mock.py", "tkinter/test_helper.py",
    "encodings/cp1252.py",                   # generated codec tables
    "pydoc_data/topics.py",                  # prose in one string
    "_sysconfigdata__linux_x86_64-linux-gnu.py",  # describes the machine
    "config-3.11-x86_64-linux-gnu/python-config.py",
    "__pycache__/abc.py",
]


def make_tree(root, paths):
    for rel in paths:
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"# {rel}\n")
    (root / "README.txt").write_text("not python\n")


def test_listing_keeps_the_standard_library_proper(tmp_path):
    make_tree(tmp_path, KEPT + DROPPED)
    assert [f.relpath for f in list_sources(tmp_path)] == sorted(KEPT)


def test_split_is_disjoint_complete_and_repeatable(tmp_path):
    names = [f"pkg{i % 7}/mod_{i}.py" for i in range(300)]
    make_tree(tmp_path, names)
    first, second = split_sources(tmp_path), split_sources(tmp_path)
    assert [f.relpath for f in first["train"]] == [f.relpath for f in second["train"]]
    train = {f.relpath for f in first["train"]}
    heldout = {f.relpath for f in first["heldout"]}
    assert not train & heldout
    assert train | heldout == set(names)
    assert heldout and all(split_of(p) == "heldout" for p in heldout)


def test_split_depends_only_on_the_relative_path():
    # Pinned: the hash split must not change across machines, versions or releases, or the
    # shipped pair's held-out files would leak into training on a retrain.
    assert [split_of(p) for p in ["collections/__init__.py", "io.py", "warnings.py"]] == ["heldout"] * 3
    assert [split_of(p) for p in ["abc.py", "ast.py", "typing.py"]] == ["train"] * 3


def test_heldout_fraction():
    rng = random.Random(0)
    paths = [f"{rng.getrandbits(64):x}/{rng.getrandbits(32):x}.py" for _ in range(20_000)]
    share = sum(split_of(p) == "heldout" for p in paths) / len(paths)
    assert abs(share - HELDOUT_PERCENT / 100) < 0.01


def test_this_pythons_stdlib():
    splits = split_sources()
    train, heldout = splits["train"], splits["heldout"]
    assert len(train) > 200 and len(heldout) > 20
    assert not {f.relpath for f in train} & {f.relpath for f in heldout}
    assert all("site-packages" not in f.relpath and "/test/" not in f"/{f.relpath}" for f in train + heldout)
