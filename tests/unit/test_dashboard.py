"""The Grafana dashboard queries only what the operator exports."""
from __future__ import annotations

import json
import re
from pathlib import Path

from sj_operator.metrics import Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy/grafana/scavenger-dashboard.json"


def exported() -> set[str]:
    """Every series name the operator's registry can expose (with _total, _bucket, _count, _sum)."""
    names = set()
    for family in Metrics().registry.collect():
        names.add(family.name)
        suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}
        names.update(family.name + s for s in suffixes.get(family.type, ()))
    return names


def test_every_query_names_a_metric_the_operator_exports():
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    assert len(exprs) >= 15
    known = exported()
    for expr in exprs:
        named = set(re.findall(r"\bscavenger_[a-z_]+\b", expr))
        assert named, f"{expr!r} names no scavenger metric"
        assert named <= known, f"{expr!r} names {sorted(named - known)}, which the operator does not export"


def test_the_dashboard_shows_every_metric_of_the_spec():
    text = DASHBOARD.read_text()
    for name in ("scavenger_pending_sjs", "scavenger_launched_runs_total", "scavenger_interruptions_total",
                 "scavenger_finished_sjs_total", "scavenger_admission_wait_seconds",
                 "scavenger_reconcile_duration_seconds", "scavenger_lost_work_seconds_total",
                 "scavenger_used_capacity_ratio"):
        assert name in text, name
