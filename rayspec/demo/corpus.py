"""The demo corpus: the Python standard library's own ``.py`` sources.

Every machine with Python has this text, so the demo pair can be trained with no download.
Only the standard library proper is used; left out are

* ``site-packages`` (third-party code, ~160 MB on a typical venv host),
* test suites (``test/``, ``tests/``, ``idle_test/`` packages and ``test_*.py`` files): a lot of
  assertion boilerplate and binary-ish fixtures that would crowd out ordinary library code,
* ``encodings/`` (mostly generated codec tables), ``pydoc_data/`` (prose stored in one string)
  and ``_sysconfigdata_*`` (describes the machine, not Python), and the build directory
  ``config-*``.

Files are split into train and held-out by a hash of their path relative to the standard
library root, so a file lands on the same side on every machine and every Python version
that ships it.  About ``HELDOUT_PERCENT`` per cent of files are held out.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

HELDOUT_PERCENT = 10
SPLIT_SALT = "rayspec-demo-v1"

_EXCLUDED_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test",
                  "encodings", "pydoc_data", "lib-dynload"}


@dataclass(frozen=True)
class SourceFile:
    relpath: str  # posix path relative to the standard library root
    path: Path

    def read(self) -> str:
        # A handful of stdlib files carry a latin-1 coding cookie; decoding leniently keeps the
        # listing and the text stable everywhere.
        return self.path.read_bytes().decode("utf-8", errors="replace")


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def is_excluded(relpath: str) -> bool:
    parts = relpath.split("/")
    name = parts[-1]
    return (
        any(p in _EXCLUDED_DIRS or p.startswith("config-") for p in parts[:-1])
        or name.startswith("test_")
        or name.startswith("_sysconfigdata_")
    )


def split_of(relpath: str) -> str:
    """'heldout' or 'train', from a salted SHA-256 of the relative path."""
    digest = hashlib.sha256(f"{SPLIT_SALT}:{relpath}".encode()).digest()
    return "heldout" if int.from_bytes(digest[:8], "big") % 100 < HELDOUT_PERCENT else "train"


def list_sources(root: Path | None = None) -> list[SourceFile]:
    """Every corpus file under ``root`` (default: this Python's stdlib), sorted by path."""
    root = Path(root) if root is not None else stdlib_root()
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        # Prune excluded trees before descending: site-packages alone is most of the walk.
        dirnames[:] = [d for d in dirnames if d not in _EXCLUDED_DIRS and not d.startswith("config-")]
        for name in filenames:
            if name.endswith(".py"):
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                if not is_excluded(rel):
                    found.append(SourceFile(rel, Path(dirpath) / name))
    return sorted(found, key=lambda f: f.relpath)


def split_sources(root: Path | None = None) -> dict[str, list[SourceFile]]:
    """``{"train": [...], "heldout": [...]}``, each sorted by relative path."""
    out: dict[str, list[SourceFile]] = {"train": [], "heldout": []}
    for f in list_sources(root):
        out[split_of(f.relpath)].append(f)
    return out
