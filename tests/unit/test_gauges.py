"""The gauges after a pass: an SJ whose launch is queued or under way counts as Starting, once, whatever its
decision counted it as; once its launch is over it counts as its decision says."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

import pytest

from sj_operator.config import OperatorConfig
from sj_operator.decide import ClusterView, Decided, decide
from sj_operator.gauges import Gauges
from sj_operator.memo import PassMemo
from sj_operator.metrics import Metrics
from sj_operator.observed import job_view
from sj_operator.policy.lifecycle import LifecycleConfig
from tests.unit.test_controller import NOW, _running_sj, _starting_sj, owned_by, sj, view

A = frozenset({"ns/a"})
"""The launch of "a" queued or under way."""
NONE: frozenset[str] = frozenset()


def scene(state: str) -> ClusterView:
    """"a" in ``state`` beside "b", running, and "c", starting (its run recorded, its pod pending). ``state``:
    ``new`` (no phase yet), ``queued`` (Pending, no run) or ``made`` (Pending, its next run made and not taken
    up by the Job controller yet: not in its status, counted as Starting)."""
    b, b_job, b_pod = _running_sj("b", NOW - timedelta(minutes=1))
    c, c_job, c_pod = _starting_sj("c", running=False)
    jobs, pods = {("ns", "b-r1"): b_job, ("ns", "c-r1"): c_job}, {("ns", "b-r1"): (b_pod,), ("ns", "c-r1"): (c_pod,)}
    a = sj(None if state == "new" else {"phase": "Pending", "attempt": 0}, name="a")
    if state == "made":
        jobs[("ns", "a-r1")] = job_view({"metadata": {"namespace": "ns", "name": "a-r1", "uid": "j-a",
                                                      "labels": {"scavenger.dev/job-name": "a"},
                                                      "ownerReferences": owned_by("a"),
                                                      "creationTimestamp": NOW.isoformat()}})
    return view(a, b, c, jobs=jobs, run_pods=pods, active=(b_pod, c_pod))


@dataclass(frozen=True)
class Pass:
    state: str
    """"a"'s state (`scene`)."""
    launching: frozenset[str]
    full: bool = True
    """Every SJ decided; False: only "a" (an incremental pass, nothing gone)."""


def report(passes: tuple[Pass, ...]) -> tuple[Gauges, Metrics]:
    """The gauges after ``passes``, each deciding its scene's SJs and reporting them with its launches."""
    metrics = Metrics()
    memo = PassMemo(OperatorConfig().spec_limits)
    gauges = Gauges(metrics, memo, 0.05)

    def on_error(o: object, exc: Exception) -> None:
        raise exc

    for p in passes:
        v = scene(p.state)
        memo.work.changes(v)
        observed = memo.observe(v, handles=None, fresh=lambda s: (s.resource_version, s.status)).sjs
        decided: list[Decided] = decide(observed, NOW, LifecycleConfig(), on_error=on_error)
        if p.full:
            asyncio.run(gauges.report(v, decided, p.launching))
        else:
            asyncio.run(gauges.report(v, [d for d in decided if d.observed.sj.name == "a"], p.launching, gone=()))
    return gauges, metrics


def nonzero(metrics: Metrics, name: str, label: str) -> dict[str, float]:
    return {s.labels[label]: s.value for family in metrics.registry.collect() if family.name == name
            for s in family.samples if s.value}


LAUNCHED = (2, {"Starting": 2, "Running": 1}, {})
""""a" and "c" Starting, "b" Running, none waiting."""
QUEUED = (1, {"Starting": 1, "Running": 1, "Pending": 1}, {"Queued": 1})
"""Only "c" Starting; "a" Pending, waiting in the queue."""


@pytest.mark.parametrize(("passes", "expected"), [
    pytest.param((Pass("queued", A),), LAUNCHED, id="queued SJ being launched counts as Starting, not Pending"),
    pytest.param((Pass("new", A),), LAUNCHED, id="new SJ being launched counts as Starting, not Pending"),
    pytest.param((Pass("made", A),), LAUNCHED, id="SJ counted Starting by its unrecorded run and launching once"),
    pytest.param((Pass("queued", A), Pass("queued", A)), LAUNCHED, id="two passes while launching count it once"),
    pytest.param((Pass("made", A), Pass("made", A)), LAUNCHED, id="two passes with its run made count it once"),
    pytest.param((Pass("queued", A), Pass("made", A)), LAUNCHED, id="its run made while launching counts once"),
    pytest.param((Pass("queued", A), Pass("queued", A, full=False), Pass("made", A, full=False)), LAUNCHED,
                 id="incremental passes while launching count it once"),
    pytest.param((Pass("queued", frozenset({"ns/a", "ns/elsewhere"})),), LAUNCHED,
                 id="a launching key of no decided SJ counts nothing beside it"),
    pytest.param((Pass("queued", frozenset({"ns/elsewhere"})),), QUEUED,
                 id="a launching key of no decided SJ is not counted"),
    pytest.param((Pass("queued", A), Pass("queued", NONE)), QUEUED, id="a launch that ended without a run: Pending"),
    pytest.param((Pass("queued", A), Pass("queued", NONE, full=False)), QUEUED,
                 id="a launch that ended without a run, incremental pass: Pending"),
    pytest.param((Pass("queued", A), Pass("made", A), Pass("made", NONE)), LAUNCHED,
                 id="a launch that made its run: Starting by its unrecorded run"),
    pytest.param((Pass("made", A), Pass("made", NONE, full=False)), LAUNCHED,
                 id="a launch that made its run, incremental pass: Starting by its unrecorded run"),
])
def test_an_sj_being_launched_counts_as_starting_once(passes, expected):
    """``starting``, and the gauges of SJs by phase and of the waiting ones by reason, after ``passes``."""
    gauges, metrics = report(passes)
    starting, phases, pending = expected
    assert gauges.starting == starting
    assert nonzero(metrics, "scavenger_sjs", "phase") == phases
    assert nonzero(metrics, "scavenger_pending_sjs", "reason") == pending
