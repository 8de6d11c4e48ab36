"""Pictures of trees and acceptance vectors (PNG, matplotlib's Agg canvas: no display, no
pyplot state).  matplotlib is a development dependency, imported on first use."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rayspec.tree.structure import TreeShape


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(figure)
    return figure


def tree_layout(shape: TreeShape) -> np.ndarray:
    """[N, 2] positions: leaves at consecutive x in rank order, a parent centred over its
    children, depth downward."""
    x = np.zeros(shape.size)
    next_leaf = 0
    # Leaves take x in depth-first (rank) order; a parent is placed once its subtree is.
    stack = [(0, False)]
    while stack:
        node, placed_children = stack.pop()
        kids = shape.children[node]
        if not kids:
            x[node] = next_leaf
            next_leaf += 1
        elif placed_children:
            x[node] = (x[kids[0]] + x[kids[-1]]) / 2
        else:
            stack.append((node, True))
            stack.extend((kid, False) for kid in reversed(kids))
    return np.stack([x, -np.asarray(shape.depth, dtype=np.float64)], axis=1)


def draw_tree(shape: TreeShape, path_png, title: str | None = None, labels=None, acceptance=None) -> Path:
    """A layered drawing of the tree: root on top, children left to right by rank.

    labels: one string per node (default: node indices for trees of up to 40 nodes);
    acceptance: a vector [W] or depth-aware [R, W] — edges are then labelled with the
    acceptance of their rank and nodes shaded by their reach probability."""
    from rayspec.tree.sequoia import acceptance_rows, reach_probabilities

    position = tree_layout(shape)
    leaves = int(position[:, 0].max()) + 1
    small = shape.size <= 40
    width = min(max(3.0, (0.45 if small else 0.2) * leaves + 1), 24.0)
    figure = _figure(width, min(max(2.5, 0.9 * shape.max_depth + 1.5, width / 3), 16.0))
    axes = figure.add_subplot()
    reach = reach_probabilities(shape, acceptance) if acceptance is not None else np.ones(shape.size)
    rows = acceptance_rows(acceptance) if acceptance is not None else None
    for node in range(1, shape.size):
        parent = shape.parents[node]
        (x0, y0), (x1, y1) = position[parent], position[node]
        axes.plot([x0, x1], [y0, y1], color="0.55", linewidth=0.8, zorder=1)
        if rows is not None and small:
            row, rank = rows[min(shape.depth[parent], len(rows) - 1)], shape.child_rank[node]
            share = row[rank - 1] if rank <= row.size else 0.0
            axes.text((x0 + x1) / 2, (y0 + y1) / 2, f"{share:.2f}", fontsize=6, color="0.3",
                      ha="center", va="center", zorder=2,
                      bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
    colours = axes.scatter(position[:, 0], position[:, 1], c=reach, cmap="Blues", vmin=0.0, vmax=1.0,
                           s=180 if small else 40, edgecolors="0.2", linewidths=0.6, zorder=3)
    if labels is None and small:
        labels = [str(i) for i in range(shape.size)]
    if labels is not None:
        if len(labels) != shape.size:
            raise ValueError(f"{len(labels)} labels for {shape.size} nodes")
        for (x, y), label, p in zip(position, labels, reach):
            axes.text(x, y, str(label), fontsize=6, ha="center", va="center",
                      color="white" if p > 0.6 else "black", zorder=4)
    if acceptance is not None:
        figure.colorbar(colours, ax=axes, fraction=0.03, pad=0.01, label="P(reached)")
    axes.set_axis_off()
    axes.set_title(title or f"{shape.size} nodes, depth {shape.max_depth}", fontsize=9)
    figure.tight_layout()
    path = Path(path_png)
    figure.savefig(path, format="png")
    return path


def draw_acceptance(acceptance, path_png, title: str | None = None, ci95=None) -> Path:
    """A bar plot of an acceptance vector (one group of bars per depth row), with 95%
    intervals as error bars when given ([..., W, 2])."""
    rows = np.atleast_2d(np.asarray(acceptance, dtype=np.float64))
    width = rows.shape[1]
    figure = _figure(min(max(4.0, 0.35 * width * rows.shape[0] + 2), 30.0), 3.2)
    axes = figure.add_subplot()
    ranks = np.arange(1, width + 1)
    bar = 0.8 / rows.shape[0]
    intervals = None if ci95 is None else np.asarray(ci95, dtype=np.float64).reshape(rows.shape + (2,))
    for k, row in enumerate(rows):
        errors = None
        if intervals is not None:
            errors = np.abs(np.stack([row - intervals[k, :, 0], intervals[k, :, 1] - row]))
        label = f"depth {k}" if rows.shape[0] > 1 else None
        axes.bar(ranks + (k - (rows.shape[0] - 1) / 2) * bar, row, bar, yerr=errors, capsize=2, label=label)
    axes.set_xlabel("rank of the accepted child")
    axes.set_ylabel("P(accepted)")
    axes.set_xticks(ranks)
    axes.set_ylim(0, max(1e-3, float(rows.max()) * 1.15))
    if rows.shape[0] > 1:
        axes.legend(fontsize=7)
    none = 1 - rows.sum(axis=1)
    axes.set_title(title or "none accepted: " + ", ".join(f"{x:.3f}" for x in none), fontsize=9)
    figure.tight_layout()
    path = Path(path_png)
    figure.savefig(path, format="png")
    return path
