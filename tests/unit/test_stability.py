"""A fair and stable policy, the parts that keep the cluster's own operations unblocked: drains and
scale-downs never wait on a scavenger budget, and no budget is held longer than a bound."""
from __future__ import annotations

from datetime import timedelta

import pytest

from sj_operator.api import Phase
from sj_operator.policy.lifecycle import Event, LifecycleConfig, SetProtection, after_wasted_run, step
from sj_operator.policy.priority import draining_nodes, protection_expired
from tests.unit import test_controller as ctl
from tests.unit.test_lifecycle import CFG, NOW, RUN1, SJ, M, S, job, pod, run_of, running, spec

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
    labelled = run_of(job(), pod(0, protected=True))
    result = step(spec(duration="30m"), before, labelled, NOW, CFG, sj_name=SJ, draining=True)
    assert result.status == before  # the toggle is the label alone: no status write
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
    labelled = run_of(job(), pod(0, protected=True))
    result = step(spec(duration="1h"), before, labelled, NOW, cfg, sj_name=SJ)
    assert result.actions == (SetProtection(RUN1, False),)
    assert result.events == (Event("Normal", "Unprotected", f"run {RUN1} was protected for 10m, the most a run "
                                   "may hold its budget in one period"),)
    assert step(spec(duration="1h"), before, labelled, NOW, CFG, sj_name=SJ).status.protected
    # Once the pod carries it, the level (2 of 3) is written with the protection dropped.
    after = step(spec(duration="1h"), before, run_of(job(), pod(0)), NOW, cfg, sj_name=SJ)
    assert after.actions == () and (after.status.running_priority, after.status.protected) == (2, False)


def test_the_loop_tells_the_state_machine_which_runs_sit_on_a_draining_node():
    kube = ctl.FakeKube()
    controller = ctl.Controller(kube, ctl.OperatorConfig(), clock=lambda: ctl.NOW)  # type: ignore[arg-type]
    since = "2026-11-22T11:30:00Z"  # 30 of 60 minutes: level 1 of 3, protected unless draining
    st = {"phase": "Running", "attempt": 1, "jobName": "work-r1", "runningTimestamps": [since],
          "priorityStartOverTimestamp": since, "runningPriority": 1, "protected": True,
          "launchedTimestamp": since}
    sj = ctl.sj(st, duration="1h")
    job_view = ctl.job_view({"metadata": {"namespace": "ns", "name": "work-r1", "uid": "j",
                                          "labels": {"scavenger.dev/job-name": "work"},
                                          "ownerReferences": ctl.owned_by("work")}})
    member = ctl.PodView(namespace="ns", name="work-r1-0", uid="p", sj="work", run="work-r1", node="n1",
                         phase="Running", deleting=False, all_running=True, requests={"cpu": 1000},
                         protected=True)
    cordoned = ctl.NodeInfo(name="n1", allocatable={"cpu": 8000}, labels={}, taints=(), unschedulable=True,
                            ready=True)
    ctl.run(controller, ctl.view(sj, jobs={("ns", "work-r1"): job_view}, run_pods={("ns", "work-r1"): (member,)},
                                 active=(member,), nodes=(cordoned,)))
    assert [kind for kind, _ in kube.calls if kind != "event"] == ["label"]  # the label alone: no status write
    assert ("label", ("work-r1-0", {"scavenger.dev/protected": "false"})) in kube.calls
    assert kube.events == [("work", "Unprotected")]


# --- no thrashing -------------------------------------------------------------------------------------

THRASH = LifecycleConfig(thrash_backoff=30 * S, max_thrash_backoff=4 * M)


@pytest.mark.parametrize(("ran", "wasted_before", "wasted", "delay"), [
    (5 * M, 0, 1, 30 * S),  # interrupted 5 minutes into a 30-minute period: wasted, back off
    (5 * M, 1, 2, 60 * S),  # the second wasted run in a row: twice as long
    (5 * M, 4, 5, 4 * M),  # capped
    (31 * M, 3, 0, None),  # it completed a checkpoint period: not wasted, no wait, the count starts over
], ids=["first-wasted", "second-wasted", "capped", "saved-some-work"])
def test_a_wasted_run_makes_the_next_one_wait(ran, wasted_before, wasted, delay):
    before = running(NOW - ran, level=0, wasted_runs=wasted_before, message=f"interrupting: pod {RUN1}-0 was deleted")
    result = step(spec(duration="30m"), before, run_of(job(deleting=True)), NOW, THRASH, sj_name=SJ)
    st = result.status
    assert st.interrupted_count == 1 and st.wasted_runs == wasted
    if delay is None:
        assert st.not_before is None and result.waiting is True
        return
    assert st.not_before == NOW + delay and result.waiting is False, "it keeps its place but waits"
    assert result.backing_off and result.in_queue, "in the queue, its room held"
    reason = next(c for c in st.conditions if c.type == "Admitted")
    assert (reason.status, reason.reason) == ("False", "BackingOff")
    assert f"interrupted after {int(ran.total_seconds() // 60)}m, before it completed a checkpoint period of 30m" in (
        reason.message)
    # Until the wait is over it stays in the queue, its room held; then it is eligible again, in its place.
    meanwhile = step(spec(duration="30m"), st, run_of(None), NOW + delay - S, THRASH, sj_name=SJ)
    assert (meanwhile.waiting, meanwhile.backing_off) == (False, True)
    later = step(spec(duration="30m"), st, run_of(None), NOW + delay, THRASH, sj_name=SJ)
    assert (later.waiting, later.backing_off) == (True, False)


def test_a_start_timeout_after_a_wasted_run_and_a_suspension_leave_the_room_alone_or_hold_it():
    """Only the anti-thrash backoff holds room: a start timeout after a wasted run backs off without (the retry's
    run was launched after the interruption); an SJ resumed during its anti-thrash backoff holds it again."""
    wasted = step(spec(duration="30m"), running(NOW - M, level=0, message=f"interrupting: pod {RUN1}-0 was deleted"),
                  run_of(job(deleting=True)), NOW, THRASH, sj_name=SJ).status
    assert after_wasted_run(wasted)
    retried = wasted.model_copy(update={"attempt": 2, "job_name": f"{SJ}-r2", "launched_timestamp": NOW + M,
                                        "start_timeouts": 1, "not_before": NOW + 2 * M})
    assert not after_wasted_run(retried)
    later = step(spec(duration="30m"), retried, run_of(None), NOW + 90 * S, THRASH, sj_name=SJ)
    assert (later.waiting, later.backing_off) == (False, False)
    suspended = wasted.model_copy(update={"phase": Phase.SUSPENDED})
    resumed = step(spec(duration="30m"), suspended, run_of(None), NOW + S, THRASH, sj_name=SJ)
    assert resumed.status.phase is Phase.INTERRUPTED and (resumed.waiting, resumed.backing_off) == (False, True)


def test_anti_thrash_can_be_turned_off():
    off = LifecycleConfig(thrash_backoff=0 * S)
    before = running(NOW - M, level=0, message=f"interrupting: pod {RUN1}-0 was deleted")
    result = step(spec(duration="30m"), before, run_of(job(deleting=True)), NOW, off, sj_name=SJ)
    assert result.status.not_before is None and result.waiting is True and result.status.wasted_runs == 0


@pytest.mark.parametrize(("step_", "expected"), [
    (H, ["ns/long", "ns/twice", "ns/once", "ns/new"]),  # 2½ hours waited: ranks with twice-interrupted, older
    (10 * H, ["ns/twice", "ns/once", "ns/long", "ns/new"]),  # barely any aging
], ids=["aging", "slow-aging"])
def test_a_long_wait_ages_an_sj_upward(step_, expected):
    from sj_operator.policy.queue import PolicyConfig, queue_order
    from tests.unit import test_admission as adm
    queue = [adm.sj("ns/new", age_min=1), adm.sj("ns/long", age_min=150),
             adm.sj("ns/once", age_min=20, interrupted=1, waiting_from=adm.NOW - 10 * M),
             adm.sj("ns/twice", age_min=30, interrupted=2, waiting_from=adm.NOW - 10 * M)]
    assert [s.key for s in queue_order(queue, adm.NOW, PolicyConfig(aging_step=step_))] == expected


def test_aging_is_bounded():
    from sj_operator.policy.queue import PolicyConfig, queue_order
    from tests.unit import test_admission as adm
    ancient = adm.sj("ns/ancient", age_min=60 * 24 * 30)  # a month
    much = adm.sj("ns/much", interrupted=12, waiting_from=adm.NOW)
    assert [s.key for s in queue_order([ancient, much], adm.NOW, PolicyConfig(aging_step=H, aging_cap=10))] == [
        "ns/much", "ns/ancient"]
