"""The pure parts of what an operator team sees: interruption reasons, lost work, the counters the loop
keeps, and what `kubectl sj` prints and draws."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sj_operator.config import OperatorConfig
from sj_operator.controller import Controller
from sj_operator.kubectl_sj import Entry, _in_order, describe_lines, list_rows, render_svg, table, timeline
from sj_operator.metrics import Metrics
from sj_operator.policy.lifecycle import interruption_reason, lost_work
from tests.unit import test_controller as ctl

T = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)
H = timedelta(hours=1)


@pytest.mark.parametrize(("cause", "reason"), [
    ("pod a-r1-0-x: PreemptionByScheduler (Preempted by ns/owner on node n1)", "PreemptionByScheduler"),
    ("pod a: PreemptionByKubeScheduler", "PreemptionByScheduler"),
    ("pod a: EvictionByEvictionAPI (Eviction API: evicting)", "EvictionByEvictionAPI"),
    ("pod a: DeletionByTaintManager (Taint manager: deleting due to NoExecute taint)", "DeletionByTaintManager"),
    ("pod a: TerminationByKubelet (node shutdown)", "TerminationByKubelet"),
    ("pod a: DeletionByPodGC (PodGC: node no longer exists)", "NodeLost"),
    ("run a-r1 ended without a visible cause (BackoffLimitExceeded)", "NodeLost"),
    ("run a-r1 was ended by a disrupted pod that is gone (PodFailurePolicy: Pod ns/a-r1-x has condition "
     "DisruptionTarget matching FailJob rule at index 0)", "Deleted"),
    ("pod a-r1-0-x was deleted", "Deleted"),
    ("run a-r1 disappeared", "Deleted"),
])
def test_interruption_reason_comes_from_the_disruption_target(cause, reason):
    assert interruption_reason(cause) == reason


@pytest.mark.parametrize(("running", "interrupted", "duration", "lost"), [
    ([T], [T + 90 * S], H, [90 * S]),
    ([T], [T + H + 90 * S], H, [90 * S]),  # it checkpointed after an hour
    ([], [T], H, [timedelta(0)]),  # interrupted while starting
    ([T, T + 200 * S], [T + 100 * S, T + 200 * S], H, [100 * S, timedelta(0)]),  # second started and lost in a second
    ([T, T + 200 * S], [T + 100 * S, T + 260 * S], 30 * S, [10 * S, 0 * S]),
    ([T, T + 100 * S], [T + 100 * S], H, [100 * S]),  # the next run ran within the same second as the record
    ([T, T + 100 * S], [T + 100 * S, T + 127 * S], 20 * S, [0 * S, 7 * S]),  # ... and was interrupted in turn
], ids=["first-period", "later-period", "never-ran", "same-second", "short-periods", "next-run-same-second",
        "next-run-interrupted"])
def test_lost_work_is_the_time_since_the_checkpoint_period_began(running, interrupted, duration, lost):
    assert lost_work(running, interrupted, duration) == lost


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_loop_counts_launches_and_interruptions_once_written():
    kube = ctl.FakeKube()
    metrics = Metrics()
    controller = Controller(kube, OperatorConfig(), clock=lambda: ctl.NOW, metrics=metrics)  # type: ignore[arg-type]
    ctl.run(controller, ctl.view(ctl.sj(), ctl.sj(name="big", cpu="7")))
    m = samples(metrics)
    assert m[("scavenger_launched_runs_total", ())] == 1
    assert m[("scavenger_admission_wait_seconds_count", ())] == 1
    assert m[("scavenger_pending_sjs", (("reason", "ThresholdReached"),))] == 1
    assert m[("scavenger_pending_sjs", (("reason", "Suspended"),))] == 0
    assert m[("scavenger_reconcile_duration_seconds_count", ())] == 1
    assert m[("scavenger_used_capacity_ratio", (("resource", "cpu"),))] == 0

    from sj_operator.kube import Conflict
    kube.fail["patch_sj_status"] = [Conflict(409, "Conflict")]
    running = {"phase": "Running", "attempt": 1, "jobName": "other-r1", "runningTimestamps": ["2026-11-22T11:58:00Z"],
               "launchedTimestamp": "2026-11-22T11:57:50Z", "priorityStartOverTimestamp": "2026-11-22T11:58:00Z"}
    gone = ctl.sj(running, rv="20", name="other")
    ctl.run(controller, ctl.view(gone))  # the run vanished (past its grace): an interruption, but the write conflicts
    assert samples(metrics).get(("scavenger_interruptions_total", (("reason", "Deleted"),))) is None
    ctl.run(controller, ctl.view(gone))
    m = samples(metrics)
    assert m[("scavenger_interruptions_total", (("reason", "Deleted"),))] == 1
    assert m[("scavenger_lost_work_seconds_total", ())] == 120, "running from 11:58 to 12:00"


def test_a_start_timeout_is_counted_once_its_status_is_written():
    """A run whose pod the scheduler found no room for two minutes ago times out (one start timeout from that
    decision); the count is taken once the SJ's status records it, not when the write conflicts."""
    from sj_operator.kube import Conflict
    from sj_operator.observed import PodView, job_view

    kube = ctl.FakeKube()
    metrics = Metrics()
    controller = Controller(kube, OperatorConfig(), clock=lambda: ctl.NOW, metrics=metrics)  # type: ignore[arg-type]
    launched = ctl.NOW - 3 * 60 * S
    starting = {"phase": "Starting", "attempt": 1, "jobName": "work-r1", "launchedTimestamp": launched.isoformat()}
    job = job_view({"metadata": {"namespace": "ns", "name": "work-r1", "uid": "j-work",
                                 "creationTimestamp": launched.isoformat(),
                                 "labels": {"scavenger.dev/job-name": "work"}, "ownerReferences": ctl.owned_by("work")},
                    "status": {"startTime": launched.isoformat()}})
    pod = PodView(namespace="ns", name="work-r1-0", uid="p-work", sj="work", run="work-r1", node=None,
                  phase="Pending", deleting=False, requests={"cpu": 1000}, index=0,
                  placed=ctl.NOW - 2 * 60 * S)
    cluster = ctl.view(ctl.sj(starting), jobs={("ns", "work-r1"): job}, run_pods={("ns", "work-r1"): (pod,)},
                       active=(pod,))
    kube.fail["patch_sj_status"] = [Conflict(409, "Conflict")]
    ctl.run(controller, cluster)
    assert samples(metrics)[("scavenger_start_timeouts_total", ())] == 0
    ctl.run(controller, cluster)
    assert samples(metrics)[("scavenger_start_timeouts_total", ())] == 1
    assert ("work", "StartTimeout") in kube.events


def test_a_follower_reports_no_state():
    metrics = Metrics()
    metrics.set_leading(True)
    metrics.set_state({"ThresholdReached": 2}, {"Pending": 2}, {"cpu": 0.5}, reasons=("ThresholdReached",),
                      phase_names=("Pending",))
    metrics.set_leading(False)
    m = samples(metrics)
    assert m[("scavenger_leader", ())] == 0
    assert not [k for k in m if k[0] in ("scavenger_pending_sjs", "scavenger_sjs", "scavenger_used_capacity_ratio")]


def test_a_collection_is_timed_and_what_it_freed_counted_by_generation():
    metrics = Metrics()
    metrics.gc_collection(0, 0.002, 30)
    metrics.gc_collection(0, 0.004, 0)
    metrics.gc_collection(2, 0.5, 1200)
    m = samples(metrics)
    assert m[("scavenger_gc_pause_seconds_count", (("generation", "0"),))] == 2
    assert m[("scavenger_gc_pause_seconds_sum", (("generation", "2"),))] == pytest.approx(0.5)
    assert m[("scavenger_gc_collected_objects_total", (("generation", "0"),))] == 30
    assert m[("scavenger_gc_collected_objects_total", (("generation", "2"),))] == 1200


def _sj(name: str, **status) -> dict:
    return {"metadata": {"namespace": "ns", "name": name, "creationTimestamp": "2026-11-01T12:00:00Z"},
            "spec": {"image": "x", "duration": "1h"}, "status": status}


INTERRUPTED_ONCE = _sj(
    "w", phase="Succeeded", attempt=2, interruptedCount=1, lastInterruptionReason="PreemptionByScheduler",
    runningTimestamps=["2026-11-01T12:00:10Z", "2026-11-01T12:05:00Z"], interruptedTimestamps=["2026-11-01T12:02:10Z"],
    finishedTimestamp="2026-11-01T12:30:00Z",
    conditions=[{"type": "Admitted", "status": "True", "reason": "Launched", "message": "run w-r2 launched"}])


def test_the_timeline_of_an_sj_from_its_status_and_events():
    events = [{"reason": "Launched", "message": "run w-r1 launched", "lastTimestamp": "2026-11-01T12:00:05Z"},
              {"reason": "Interrupted", "message": "pod x: PreemptionByScheduler",
               "lastTimestamp": "2026-11-01T12:02:10Z"},
              {"reason": "Launched", "message": "run w-r2 launched", "lastTimestamp": "2026-11-01T12:04:55Z"}]
    entries = timeline(INTERRUPTED_ONCE, events)
    assert [e.what for e in entries] == ["created", "launched", "running", "interrupted", "launched", "running",
                                         "finished"]
    interrupted = entries[3]
    assert (interrupted.detail, interrupted.lost_work_seconds) == ("PreemptionByScheduler", 120.0)
    lines = describe_lines(INTERRUPTED_ONCE, entries, T + H)
    assert "  2026-11-01 12:02:10    +2m10s  interrupted (PreemptionByScheduler), lost about 2m" in lines
    assert "Admitted:       Admitted: run w-r2 launched" in lines


def test_ties_within_a_second_follow_the_order_a_run_goes_through():
    tie = [Entry(T, "launched", "r2"), Entry(T, "running"), Entry(T, "interrupted")]
    assert [e.what for e in _in_order([Entry(T - S, "launched", "r1"), Entry(T - S, "running"), *tie])] == [
        "launched", "running", "interrupted", "launched", "running"]


def test_list_rows_and_table():
    waiting = _sj("q", phase="Pending", conditions=[{"type": "Admitted", "status": "False",
                                                    "reason": "NoNodeFitsGang", "message": "needs"}])
    rows = list_rows([INTERRUPTED_ONCE, waiting], T + H, namespaces=False)
    assert rows[0] == {"name": "w", "phase": "Succeeded", "admitted": "Admitted", "runs": 2, "interruptions": 1,
                       "lostWorkSeconds": 120.0, "age": "1h"}
    assert rows[1]["admitted"] == "NoNodeFitsGang"
    lines = table(rows).splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "ADMITTED", "RUNS", "INTERRUPTIONS", "LOST", "WORK", "AGE"]
    assert lines[1].split() == ["w", "Succeeded", "Admitted", "2", "1", "2m", "1h"]
    assert table([]) == "No ScavengerJobs found."


def test_the_svg_has_a_bar_per_run_a_mark_per_interruption_and_escapes_names():
    odd = _sj("a<b", phase="Running", runningTimestamps=["2026-11-01T12:10:00Z"])
    svg = render_svg([INTERRUPTED_ONCE, odd], T + H)
    assert svg.count("<title>ran ") == 3 and svg.count("<title>interrupted") == 1
    assert "ns/a&lt;b" in svg and "a<b" not in svg
    assert "<title>Succeeded 12:30:00</title>" in svg
