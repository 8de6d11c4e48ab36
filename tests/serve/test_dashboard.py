"""The Grafana dashboard (`clusters/grafana/rayspec.json`) asks only for series the service
exports: each name in its queries is a family of a real `/metrics` scrape, with the suffix
its type gives (`_total` a counter's, `_bucket`, `_sum`, `_count` a histogram's, none a
gauge's), and each label it groups or names a legend by is one that family has."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from rayspec.rpc.generated import worker_pb2

DASHBOARD = Path(__file__).resolve().parents[2] / "clusters" / "grafana" / "rayspec.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported(http) -> dict[str, tuple[str, set[str]]]:
    """Family name -> (type, labels its samples carry) of a scrape; a family declared but with
    no sample yet (a labelled one never observed) has its HELP and TYPE lines only."""
    families = {}
    for family in text_string_to_metric_families(http.get("/metrics").text):
        labels = {label for sample in family.samples for label in sample.labels} - {"le"}
        families[family.name] = (family.type, labels)
    return families


def queried(expr: str) -> list[tuple[str, str]]:
    """(family, suffix) of each series name in a query."""
    names = []
    for name in re.findall(r"\brayspec_[a-z_]+", expr):
        for suffix in ("_bucket", "_sum", "_count", "_total", ""):
            if name.endswith(suffix) and (not suffix or len(name) > len(suffix)):
                names.append((name[: len(name) - len(suffix)] if suffix else name, suffix))
                break
    return names


def test_every_series_and_label_the_dashboard_queries_is_exported(http, server):
    metrics = server["service"].metrics
    # a service over workers tells their state; this in-process one has none: one stands in
    info = worker_pb2.WorkerInfo(open_sessions=0, prefix_cache_bytes=1, prefix_cache_queried_tokens=2,
                                 prefix_cache_hit_tokens=1)
    metrics.watch_workers(lambda: [("target", info)])
    try:
        http.post("/v1/completions", json={"prompt": "def f(x):", "max_tokens": 8, "stream": True}).raise_for_status()
        metrics.observe_grpc_call("Generate", "OK")  # no gRPC API here: its family has no sample else
        families = exported(http)
    finally:
        metrics.watch_workers(None)
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels) >= 10
    checked = 0
    for panel in panels:
        for target in panel["targets"]:
            expr = target["expr"]
            assert expr.count("(") == expr.count(")"), expr
            names = queried(expr)
            assert names, expr
            for family, suffix in names:
                assert family in families, f"{panel['title']!r} queries {family}, which /metrics does not export"
                kind, labels = families[family]
                assert suffix in SUFFIXES[kind], f"{family}{suffix}: a {kind} has no such series"
                grouped = re.findall(r"by \(([^)]*)\)", expr) + re.findall(r"{{(\w+)}}", target["legendFormat"])
                for label in {part.strip() for group in grouped for part in group.split(",")} - {"le"}:
                    assert label in labels, f"{panel['title']!r}: {family} has no label {label!r} ({labels})"
                checked += 1
    assert checked >= 20
