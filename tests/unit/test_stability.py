"""A fair and stable policy, the parts that keep the cluster's own operations unblocked: drains and
scale-downs never wait on a scavenger budget, and no budget is held longer than a bound."""
from __future__ import annotations

from datetime import timedelta

import pytest

from sj_operator.policy.lifecycle import Event, LifecycleConfig, SetProtection, step
from sj_operator.policy.priority import draining_nodes, protection_expired
from tests.unit import test_controller as ctl
from tests.unit.test_lifecycle import CFG, NOW, RUN1, SJ, M, job, pod, run_of, running, spec

H = timedelta(hours=1)


@pytest.mark.parametrize(("nodes", "expected"), [
    ([("a", False, [])], set()),
    ([("a", True, [])], {"a"}),  # cordoned: kubectl drain does that first
    ([("a", False, ["ToBeDeletedByClusterAutoscaler"])], {"a"}),
    ([("a", False, ["node.kubernetes.io/unschedulable"])], {"a"}),
    ([("a", False, ["scavenger.dev/other", "node.kubernetes.io/not-ready"]), ("b", True, [])], {"b"}),
], ids=["ordinary", "cordoned", "autoscaler-scale-down", "unschedulable-taint", "others-untouched"])
def test_nodes_on_their_way_out(nodes, expected):
    assert draining_nodes(nodes) == expected


@pytest.mark.parametrize(("since", "duration", "levels", "level_from", "bound", "expired"), [
    (NOW - 40 * M, H, 3, 1, 30 * M, False),  # protected from 20m on: 20 minutes so far
    (NOW - 50 * M, H, 3, 1, 30 * M, True),  # 30 minutes: the bound
    (NOW - 50 * M - H, H, 3, 1, 30 * M, True),  # the same point of a later period
    (NOW - 10 * M, H, 3, 1, 30 * M, False),  # not yet protected at all
    (NOW - 5 * H, 24 * H, 4, 1, 2 * H, False),  # a long period, protected from 6h on: not yet
    (NOW - 9 * H, 24 * H, 4, 1, 2 * H, True),  # 3h protected of a 24h period: the bound holds
], ids=["within", "at-the-bound", "later-period", "before-protection", "long-period-early", "long-period"])
def test_protection_is_bounded_within_a_period(since, duration, levels, level_from, bound, expired):
    assert protection_expired(NOW, since, duration, levels, level_from, bound) is expired


def test_a_run_on_a_draining_node_drops_its_protection_and_says_why():
    before = running(NOW - 21 * M, level=2, protected=True)
    result = step(spec(duration="30m"), before, run_of(job(), pod(0)), NOW, CFG, sj_name=SJ, draining=True)
    assert result.status.protected is False
    assert result.actions == (SetProtection(RUN1, False),)
    assert result.events == (Event("Normal", "Unprotected", f"run {RUN1} runs on a node being drained or removed: "
                                   "no protection, so the drain does not wait on it"),)
    # A run on a draining node never gets protection in the first place.
    unprotected = running(NOW - 21 * M, level=2, protected=False)
    again = step(spec(duration="30m"), unprotected, run_of(job(), pod(0)), NOW, CFG, sj_name=SJ, draining=True)
    assert again.status.protected is False and again.actions == ()


def test_no_run_holds_its_budget_longer_than_the_bound():
    cfg = LifecycleConfig(max_protection=10 * M)
    before = running(NOW - 40 * M, level=1, protected=True)  # 1h period, 3 levels: protected from 20m
    result = step(spec(duration="1h"), before, run_of(job(), pod(0)), NOW, cfg, sj_name=SJ)
    assert result.status.protected is False
    assert result.events == (Event("Normal", "Unprotected", f"run {RUN1} was protected for 10m, the most a run "
                                   "may hold its budget in one period"),)
    assert step(spec(duration="1h"), before, run_of(job(), pod(0)), NOW, CFG, sj_name=SJ).status.protected


def test_the_loop_tells_the_state_machine_which_runs_sit_on_a_draining_node():
    kube = ctl.FakeKube()
    controller = ctl.Controller(kube, ctl.OperatorConfig(), clock=lambda: ctl.NOW)  # type: ignore[arg-type]
    since = "2026-11-22T11:30:00Z"  # 30 of 60 minutes: level 1 of 3, protected unless draining
    st = {"phase": "Running", "attempt": 1, "jobName": "work-r1", "runningTimestamps": [since],
          "priorityStartOverTimestamp": since, "runningPriority": 1, "protected": True,
          "launchedTimestamp": since}
    sj = ctl.sj(st, duration="1h")
    job_view = ctl.job_view({"metadata": {"namespace": "ns", "name": "work-r1", "uid": "j",
                                          "labels": {"scavenger.dev/job-name": "work"}}})
    member = ctl.PodView(namespace="ns", name="work-r1-0", uid="p", sj="work", run="work-r1", node="n1",
                         phase="Running", deleting=False, all_running=True, requests={"cpu": 1000},
                         protected=True)
    cordoned = ctl.NodeInfo(name="n1", allocatable={"cpu": 8000}, labels={}, taints=(), unschedulable=True,
                            ready=True)
    ctl.run(controller, ctl.view(sj, jobs={("ns", "work-r1"): job_view}, run_pods={("ns", "work-r1"): (member,)},
                                 active=(member,), nodes=(cordoned,)))
    written = [c for kind, c in kube.calls if kind == "status"]
    assert written and written[-1]["protected"] is False
    assert ("label", ("work-r1-0", {"scavenger.dev/protected": "false"})) in kube.calls
