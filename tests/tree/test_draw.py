"""Drawings are written as PNG files (matplotlib's Agg canvas)."""

from __future__ import annotations

import pytest

from rayspec.tree.acceptance import estimate_from_counts
from rayspec.tree.sequoia import optimal_tree
from rayspec.tree.structure import TreeShape

pytest.importorskip("matplotlib")

from rayspec.tree.draw import draw_acceptance, draw_tree, tree_layout  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def test_tree_and_vector_drawings(tmp_path):
    a = [0.484, 0.138]
    shape, value = optimal_tree(a, 16, 6)
    drawn = draw_tree(shape, tmp_path / "tree.png", title=f"E = {value:.3f}", acceptance=a)
    assert drawn.read_bytes()[:8] == PNG and drawn.stat().st_size > 2000
    plain = draw_tree(TreeShape.kary(2, 2), tmp_path / "kary.png", labels=list("abcdefg"))
    assert plain.read_bytes()[:8] == PNG
    estimate = estimate_from_counts([[48, 7], [40, 9]], [45, 51])
    bars = draw_acceptance(estimate.acceptance, tmp_path / "vector.png", ci95=estimate.ci95)
    assert bars.read_bytes()[:8] == PNG and bars.stat().st_size > 2000
    with pytest.raises(ValueError):
        draw_tree(shape, tmp_path / "bad.png", labels=["x"])


def test_layout_is_layered_and_ordered():
    shape = TreeShape((-1, 0, 0, 1, 1, 2))
    xy = tree_layout(shape)
    assert xy[:, 1].tolist() == [0, -1, -1, -2, -2, -2]
    assert xy[3, 0] < xy[4, 0] < xy[5, 0]  # leaves left to right in rank order
    assert xy[1, 0] == (xy[3, 0] + xy[4, 0]) / 2 and xy[0, 0] == (xy[1, 0] + xy[2, 0]) / 2
