"""The incremental loop (issue 15): what a pass reuses from the last one, and that reusing it never
changes a decision. Each cache is checked against the pure function it stands for, over sequences of
views that change the way watches change them (objects replaced, time moving on)."""
from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sj_operator.api import DEFAULT_LIMITS, InvalidSpec, Phase, ScavengerJobSpec, ScavengerJobStatus
from sj_operator.config import OperatorConfig
from sj_operator.controller import Controller
from sj_operator.decide import ClusterView, Decided, decide
from sj_operator.memo import PassMemo, PodSums
from sj_operator.names import run_job_name
from sj_operator.observed import JobView, NodeInfo, PodView, SJObject
from sj_operator.policy.admission import decide_pass, settled_until
from sj_operator.policy.lifecycle import (
    FOREVER,
    LifecycleConfig,
    Run,
    Step,
    quiet_until,
    record_grace,
    recorded_until,
    step,
)
from sj_operator.policy.priority import steady_until
from sj_operator.policy.queue import PolicyConfig
from sj_operator.policy.snapshot import QueuedSJ, Shape
from sj_operator.resources import accumulate, freeze, total
from tests.unit import test_admission as adm
from tests.unit.helpers import settled_pass
from tests.unit.reference_pass import admission_snapshot, node_views, observe
from tests.unit.test_controller import FakeKube
from tests.unit.test_lifecycle import (
    CFG,
    NOW,
    SJ,
    carried_out,
    invalid_spec,
    job,
    pod,
    run_of,
    running,
    spec,
    starting,
    status,
)

M = timedelta(minutes=1)
H = timedelta(hours=1)


# --- lifecycle.quiet_until: how long a quiet step stays quiet ----------------------------------

@pytest.mark.parametrize(("spec_", "status_", "until"), [
    pytest.param(spec(), status(Phase.PENDING), FOREVER, id="queued"),
    pytest.param(spec(), status(Phase.INTERRUPTED, interrupted_count=1, not_before=NOW + 5 * M), NOW + 5 * M,
                 id="backing-off-until-not-before"),
    pytest.param(spec(), status(Phase.INTERRUPTED, interrupted_count=1, not_before=NOW - M), FOREVER,
                 id="backoff-over"),
    pytest.param(spec(), status(Phase.SUCCEEDED), FOREVER, id="succeeded"),
    pytest.param(spec(), status(Phase.FAILED), FOREVER, id="failed"),
    pytest.param(spec(suspend=True), status(Phase.SUSPENDED), FOREVER, id="suspended"),
    pytest.param(spec(), starting(), None, id="starting-has-a-start-timeout"),
    pytest.param(spec(), running(), None, id="running-has-priority-levels"),
    pytest.param(invalid_spec(duration="0s"), status(Phase.FAILED), FOREVER, id="invalid-and-failed"),
    pytest.param(invalid_spec(duration="0s"), status(Phase.PENDING), None, id="invalid-not-yet-failed"),
])
def test_quiet_until(spec_: ScavengerJobSpec | InvalidSpec, status_: ScavengerJobStatus,
                     until: datetime | None) -> None:
    assert quiet_until(spec_, status_, NOW) == until


def test_a_backoff_that_ends_makes_the_sj_eligible_at_quiet_until() -> None:
    backing_off = status(Phase.INTERRUPTED, interrupted_count=1, not_before=NOW + 5 * M)
    until = quiet_until(spec(), backing_off, NOW)
    assert until is not None
    assert not step(spec(), backing_off, Run(job=None), until - timedelta(microseconds=1), CFG, sj_name=SJ).waiting
    assert step(spec(), backing_off, Run(job=None), until, CFG, sj_name=SJ).waiting


PHASES = st.sampled_from([Phase.PENDING, Phase.INTERRUPTED, Phase.SUSPENDED, Phase.SUCCEEDED, Phase.FAILED,
                          Phase.STARTING, Phase.RUNNING])
RUNS = st.sampled_from([
    Run(job=None),
    run_of(job(deleting=True)),
    run_of(job(deleting=True), pod(0, "Running", deleting=True)),
    run_of(job(complete=True), pod(0, "Succeeded")),
    run_of(job(), pod(0, "Running")),
])


@settings(max_examples=400, deadline=None)
@given(phase=PHASES, suspend=st.booleans(), not_before=st.one_of(st.none(), st.integers(-60, 60)),
       run=RUNS, later=st.lists(st.integers(0, 10_000), min_size=1, max_size=5))
def test_a_quiet_step_gives_the_same_result_until_quiet_until(
        phase: Phase, suspend: bool, not_before: int | None, run: Run, later: list[int]) -> None:
    """Whatever the state: when the step at ``now`` has nothing to do and ``quiet_until`` gives a moment,
    the step at any time before that moment is the very same."""
    spec_ = spec(suspend=suspend)
    moment = None if not_before is None else NOW + not_before * M
    status_ = status(phase, attempt=1, job_name="demo-1", interrupted_count=int(phase == Phase.INTERRUPTED),
                     not_before=moment)
    first = step(spec_, status_, run, NOW, CFG, sj_name=SJ)
    if first.events or first.actions or first.status != status_:
        return
    until = quiet_until(spec_, status_, NOW)
    if until is None:
        return
    for minutes in later:
        at = NOW + minutes * M
        if at < until:
            assert step(spec_, status_, run, at, CFG, sj_name=SJ) == first


# --- a waiting SJ's next run, not written into its status yet: quiet until the record grace ends ---

RECORD_PODS = st.lists(st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "unplaced", "unbound",
                                        "deleting"]), min_size=0, max_size=3)


def _record_pod(index: int, kind: str, run: str, made: datetime) -> PodView:
    """Member ``index`` of ``run``: ``Pending`` on a node, ``unbound`` (the scheduler found no room),
    ``unplaced`` (not looked at yet), ``deleting``, or in that phase."""
    if kind in ("Pending", "unbound", "unplaced"):
        return replace(pod(index, "Pending", run=run), node="node-1" if kind == "Pending" else None,
                       placed=None if kind == "unplaced" else made)
    if kind == "deleting":
        return pod(index, "Running", run=run, deleting=True)
    return pod(index, kind, run=run, exit_code=1 if kind == "Failed" else None)


def _waiting_with_a_run(phase: Phase | None, made: int, kinds: list[str], name: str, deleting: bool,
                        start_timeout: int) -> tuple[LifecycleConfig, datetime, ScavengerJobSpec, ScavengerJobStatus,
                                                     Run]:
    """A waiting SJ (``phase``) and its run ``name`` made ``made`` ms from now, a pod of each of ``kinds``."""
    cfg = replace(CFG, start_timeout=timedelta(seconds=start_timeout))
    created = NOW + timedelta(milliseconds=made)
    run = run_of(job(name, created=created, started=created, deleting=deleting),
                 *(_record_pod(i, kind, name, created) for i, kind in enumerate(kinds)))
    return (cfg, created, spec(parallelism=max(1, len(kinds))),
            ScavengerJobStatus() if phase is None else status(phase), run)


@settings(max_examples=400, deadline=None)
@given(phase=st.sampled_from([None, Phase.PENDING, Phase.INTERRUPTED]), made=st.integers(-20_000, 20_000),
       kinds=RECORD_PODS, name=st.sampled_from([run_job_name(SJ, 1), run_job_name(SJ, 2)]),
       deleting=st.booleans(), start_timeout=st.sampled_from([4, 20, 300]),
       later=st.lists(st.integers(0, 30_000), min_size=1, max_size=6))
def test_an_unrecorded_runs_quiet_step_is_the_same_until_quiet_until_and_moves_there(
        phase: Phase | None, made: int, kinds: list[str], name: str, deleting: bool, start_timeout: int,
        later: list[int]) -> None:
    """A waiting SJ with a run of its (next, or another) attempt, made ``made`` ms from now, its pods in any
    state: when the step has nothing to do and ``quiet_until`` gives a moment, every step before it is the
    very same, and at that moment the run is written in (as Starting)."""
    cfg, created, spec_, status_, run = _waiting_with_a_run(phase, made, kinds, name, deleting, start_timeout)
    first = step(spec_, status_, run, NOW, cfg, sj_name=SJ)
    until = quiet_until(spec_, status_, NOW, run=run, cfg=cfg, sj_name=SJ)
    if first.events or first.actions or first.status != status_ or until is None:
        return
    # A pod not looked at by the scheduler, or every pod bound and one not acknowledged by its node: nothing but a
    # change of the pods moves the step. A pod not acknowledged beside one found no room: that one's start timeout
    # does. Otherwise its grace counts from the Job's take-up (as it was made).
    all_bound = not any(kind in ("unplaced", "unbound") for kind in kinds)
    waits = "unplaced" in kinds or (all_bound and "Pending" in kinds)
    times_out = not waits and "Pending" in kinds
    assert until == (FOREVER if waits else created + cfg.start_timeout if times_out else created + record_grace(cfg))
    for offset in later:
        at = NOW + timedelta(milliseconds=offset)
        if at < until:
            assert step(spec_, status_, run, at, cfg, sj_name=SJ) == first
    if waits or times_out:
        return
    moved = step(spec_, status_, run, until, cfg, sj_name=SJ)
    assert moved.status.phase is Phase.STARTING and [e.reason for e in moved.events] == ["Starting"]


def unstamped(result: Step) -> Step:
    """``result`` without the moments a step stamps (conditions' transitions, the first running time and
    period start), which a record reused from an earlier pass keeps from then."""
    st = result.status
    conditions = tuple(c.model_copy(update={"last_transition_time": None}) for c in st.conditions)
    return replace(result, status=st.model_copy(update={
        "conditions": conditions, "running_timestamps": (), "priority_start_over_timestamp": None}))


@settings(max_examples=400, deadline=None)
@given(phase=st.sampled_from([None, Phase.PENDING, Phase.INTERRUPTED]), made=st.integers(-120_000, 0),
       kinds=RECORD_PODS, name=st.sampled_from([run_job_name(SJ, 1), run_job_name(SJ, 2)]),
       deleting=st.booleans(), start_timeout=st.sampled_from([4, 20, 60, 300]),
       later=st.lists(st.integers(0, 400_000), min_size=1, max_size=6))
# A pod the scheduler found no room for: its start timeout comes start_timeout after the run was made.
@example(phase=Phase.PENDING, made=-15_000, kinds=["unbound"], name=run_job_name(SJ, 1), deleting=False,
         start_timeout=20, later=[4_000, 10_000])
def test_a_new_runs_record_is_the_same_but_for_its_stamps_until_recorded_until(
        phase: Phase | None, made: int, kinds: list[str], name: str, deleting: bool, start_timeout: int,
        later: list[int]) -> None:
    """A waiting SJ with a run of its (next, or another) attempt, made ``made`` ms ago, its pods in any state:
    when the step writes the run in (Starting or Running) and ``recorded_until`` gives a moment, every step
    before it is the same record but for the moments it stamps."""
    cfg, created, spec_, status_, run = _waiting_with_a_run(phase, made, kinds, name, deleting, start_timeout)
    first = step(spec_, status_, run, NOW, cfg, sj_name=SJ)
    until = recorded_until(spec_, status_, first, run=run, cfg=cfg, sj_name=SJ)
    records = (not first.actions and first.status.phase in (Phase.STARTING, Phase.RUNNING)
               and name == run_job_name(SJ, 1) and not deleting)
    assert (until is not None) == records
    if until is None:
        return
    assert until == created + cfg.start_timeout
    for offset in later:
        at = NOW + timedelta(milliseconds=offset)
        if at < until:
            assert unstamped(step(spec_, status_, run, at, cfg, sj_name=SJ)) == unstamped(first)


# --- a running SJ: quiet until its level, its period or its protection's expiry moves -----------

@pytest.mark.parametrize(("since", "max_protection", "until"), [
    pytest.param(NOW, H, NOW + 10 * M, id="level-0-until-level-1"),
    pytest.param(NOW - 15 * M, H, NOW + 5 * M, id="level-1-until-level-2"),
    pytest.param(NOW - 25 * M, H, NOW + 5 * M, id="last-level-until-the-next-period"),
    pytest.param(NOW - 95 * M, H, NOW + 5 * M, id="periods-later"),
    pytest.param(NOW - 12 * M, 5 * M, NOW + 3 * M, id="protection-expires-first"),
    pytest.param(NOW - 17 * M, 5 * M, NOW + 3 * M, id="protection-expired-already"),
    pytest.param(NOW + M, H, None, id="before-its-start"),
])
def test_steady_until(since: datetime, max_protection: timedelta, until: datetime | None) -> None:
    """30-minute periods in 3 levels, protected from level 1 (10 minutes into a period)."""
    assert steady_until(NOW, since, 30 * M, 3, 1, max_protection) == until


RUNNING_RUN = run_of(job(), pod(0, "Running"))


def test_a_running_sj_is_quiet_only_with_its_run_and_the_config() -> None:
    spec_, st_ = spec(duration="30m", priorityLevels=3), running(since=NOW - 5 * M)
    assert quiet_until(spec_, st_, NOW) is None
    assert quiet_until(spec_, st_, NOW, run=Run(job=None), cfg=CFG) is None, "a run not seen yet has a grace"
    assert quiet_until(spec_, st_, NOW, run=RUNNING_RUN, cfg=CFG) == NOW + 5 * M


@settings(max_examples=400, deadline=None)
@given(into=st.integers(0, 100 * 60 * 10**6), levels=st.integers(1, 5), protect=st.integers(0, 5),
       max_protection=st.integers(1, 40), exempt=st.booleans(), draining=st.booleans(),
       later=st.lists(st.integers(0, 40 * 60 * 10**6), min_size=1, max_size=6))
def test_a_quiet_running_step_is_the_same_until_quiet_until_and_moves_there(
        into: int, levels: int, protect: int, max_protection: int, exempt: bool, draining: bool,
        later: list[int]) -> None:
    """A running SJ whose status and pods' label are as the passes at ``now`` left them (a toggle, then the
    level written): every step before ``quiet_until`` is the very same, and at that moment something moves
    (unless only the expiry of a protection that steering or a drain already took away falls there)."""
    spec_ = spec(duration="30m", priorityLevels=levels)
    cfg = replace(CFG, protect_level=protect, max_protection=max_protection * M)
    flags = {"sj_name": SJ, "exempt": exempt, "draining": draining}
    settled, run = running(since=NOW - timedelta(microseconds=into)), RUNNING_RUN
    for _ in range(2):
        result = step(spec_, settled, run, NOW, cfg, **flags)
        settled, run = result.status, carried_out(run, result.actions)
    first = step(spec_, settled, run, NOW, cfg, **flags)
    assert not (first.events or first.actions) and first.status == settled
    until = quiet_until(spec_, settled, NOW, run=run, cfg=cfg)
    assert until is not None and until > NOW
    for offset in later:
        at = NOW + timedelta(microseconds=offset)
        if at < until:
            assert step(spec_, settled, run, at, cfg, **flags) == first
    assert step(spec_, settled, run, until, cfg, **flags) != first or exempt or draining


# --- admission.settled_until: how long an admission pass stays the same ------------------------

def queued_sj(key: str = "ns/a", **fields: Any) -> QueuedSJ:
    return QueuedSJ(key=key, created=fields.pop("created", NOW - 10 * M), request={"cpu": 1000}, **fields)


@pytest.mark.parametrize(("queue", "config", "until"), [
    pytest.param((), PolicyConfig(), FOREVER, id="empty-queue"),
    pytest.param((queued_sj(not_before=NOW + 3 * M),), PolicyConfig(starvation_after=H, aging_step=H),
                 NOW + 3 * M, id="backoff-ends"),
    pytest.param((queued_sj(created=NOW - 90 * M),), PolicyConfig(starvation_after=10 * H, aging_step=H),
                 NOW + 30 * M, id="ages-one-rank-up"),
    pytest.param((queued_sj(created=NOW - 10 * H),), PolicyConfig(starvation_after=20 * H, aging_step=H, aging_cap=10),
                 NOW + 10 * H + timedelta(microseconds=1), id="aged-to-the-cap-then-starves"),
    pytest.param((queued_sj(created=NOW - 20 * M),), PolicyConfig(starvation_after=30 * M, aging_step=H),
                 NOW + 10 * M + timedelta(microseconds=1), id="starves-once-strictly-past"),
    pytest.param((queued_sj(created=NOW - 5 * M, fallback_after=7 * M,
                            fallbacks=(Shape(1, freeze({"cpu": 500})),)),),
                 PolicyConfig(starvation_after=H, aging_step=H), NOW + 2 * M, id="fallback-allowed"),
])
def test_settled_until(queue: tuple[QueuedSJ, ...], config: PolicyConfig, until: datetime) -> None:
    assert settled_until(queue, NOW, config) == until


@st.composite
def queues_with_clocks(draw: st.DrawFn) -> tuple[QueuedSJ, ...]:
    """Queues whose SJs have every kind of clock: backoffs, ages, fallbacks after a wait."""
    out = []
    for sj in draw(adm.queue_strategy()):
        if draw(st.booleans()):
            sj = replace(sj, fallbacks=(Shape(1, freeze({"cpu": 500})),),
                         fallback_after=draw(st.integers(0, 40)) * M,
                         waiting_from=NOW - draw(st.integers(0, 30)) * M if draw(st.booleans()) else None)
        out.append(sj)
    return tuple(out)


AGING = st.sampled_from([5 * M, 20 * M, H])


@settings(max_examples=300, deadline=None)
@given(snap=adm.snapshots(), queue=queues_with_clocks(), config=adm.configs, aging=AGING,
       later=st.lists(st.integers(0, 3 * 24 * 60 * 60), min_size=1, max_size=4))
def test_an_admission_pass_is_the_same_until_settled_until(snap: Any, queue: tuple[QueuedSJ, ...],
                                                          config: PolicyConfig, aging: timedelta,
                                                          later: list[int]) -> None:
    config = replace(config, aging_step=aging, aging_cap=3)
    snap = replace(snap, queue=queue)
    first = decide_pass(snap, NOW, config)
    until = settled_until(queue, NOW, config)
    assert until > NOW
    for seconds in later:
        at = NOW + timedelta(seconds=seconds)
        if at < until:
            assert decide_pass(snap, at, config) == first


# --- PodSums and node views: kept up to date by the pods that changed ------------------------------

NODES = tuple(NodeInfo(name=f"n{i}", allocatable=freeze({"cpu": 8000, "memory": 8000, "pods": 110_000}), labels={},
                       taints=(), unschedulable=False, ready=True) for i in range(3))


def a_pod(uid: int, node: int | None, cpu: int, sj: bool, ns: str = "a") -> PodView:
    """``sj``: an SJ's pod (in the scavenger band) whose SJ label its namespace took off; else another workload's
    pod labelled like an SJ's. A namespace's sum counted from the label, not the band, is off."""
    return PodView(namespace=ns, name=f"p{uid}", uid=f"p{uid}", sj=None if sj else "x", run=None,
                   node=None if node is None else f"n{node}", phase="Running", deleting=False,
                   requests=freeze({"cpu": cpu, "memory": 2 * cpu, "pods": 1000}), band=sj)


POD_CHANGES = st.lists(st.tuples(st.integers(0, 7),
                                 st.sampled_from(["add", "remove", "move", "resize", "no room", "gate", "keep"]),
                                 st.one_of(st.none(), st.integers(0, 2)), st.integers(0, 4000), st.booleans(),
                                 st.sampled_from("ab")), min_size=1, max_size=40)


def from_scratch(pods: tuple[PodView, ...]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    per_node: dict[str, dict[str, int]] = {}
    per_ns: dict[str, dict[str, int]] = {}
    for p in pods:
        if p.node:
            accumulate(per_node.setdefault(p.node, {}), p.requests)
        if p.band:
            accumulate(per_ns.setdefault(p.namespace, {}), p.requests)
    # The threshold's sum leaves out the pods the scheduler found no node for and nominated none, and the pods no
    # counted scheduler will place.
    return (dict(total(p.requests for p in pods if not (p.unschedulable or p.unclaimed))),
            {k: dict(freeze(v)) for k, v in per_node.items() if freeze(v)},
            {k: dict(freeze(v)) for k, v in per_ns.items() if freeze(v)})


def view_of(pods: tuple[PodView, ...], nodes: tuple[NodeInfo, ...] = NODES, **kw: Any) -> ClusterView:
    return ClusterView(sjs=kw.pop("sjs", ()), jobs=kw.pop("jobs", {}), run_pods=kw.pop("run_pods", {}),
                       active_pods=pods, nodes=nodes, **kw)


@settings(max_examples=300, deadline=None)
@given(changes=POD_CHANGES)
def test_pod_sums_match_a_recount_after_every_change(changes: list[tuple[Any, ...]]) -> None:
    sums, memo = PodSums(), PassMemo(DEFAULT_LIMITS)
    pods: dict[int, PodView] = {}
    for uid, what, node, cpu, is_sj, ns in changes:
        if what == "add" or (what in ("move", "resize", "no room", "gate") and uid not in pods):
            pods[uid] = a_pod(uid, node, cpu, is_sj, ns)
        elif what == "remove":
            pods.pop(uid, None)
        elif what == "move":
            pods[uid] = replace(pods[uid], node=None if node is None else f"n{node}", unschedulable=False,
                                unclaimed=False)
        elif what == "no room":  # the scheduler found no node for it, or ``node``: it preempts on one
            pods[uid] = replace(pods[uid], node=None, unschedulable=node is None)
        elif what == "gate":  # gated, or another scheduler's: no counted scheduler will place it (``node``: ungated)
            pods[uid] = replace(pods[uid], node=None, unclaimed=node is None)
        elif what == "resize":
            pods[uid] = replace(pods[uid], requests=freeze({"cpu": cpu, "pods": 1000}))
        now = tuple(pods.values())
        sums.update(now)
        cluster, per_node, per_ns = from_scratch(now)
        assert sums.cluster == cluster
        assert {k: v for k, v in sums.nodes.items() if v} == per_node
        assert {k: v for k, v in sums.namespaces.items() if v} == per_ns
        assert memo.node_views(view_of(now)) == node_views(view_of(now))


def test_node_views_are_rebuilt_only_for_the_nodes_that_changed() -> None:
    memo = PassMemo(DEFAULT_LIMITS)
    pods = (a_pod(1, 0, 1000, True), a_pod(2, 1, 1000, True))
    first = memo.node_views(view_of(pods))
    assert memo.node_views(view_of(pods)) is first, "nothing changed: the very same views"
    grown = (pods[0], a_pod(2, 1, 3000, True))
    second = memo.node_views(view_of(grown))
    assert second[0] is first[0] and second[2] is first[2] and second[1] is not first[1]
    assert second[1].requested["cpu"] == 3000
    cordoned = (replace(NODES[0], unschedulable=True), *NODES[1:])
    third = memo.node_views(view_of(grown, cordoned))
    assert third[0].unschedulable and third[1] is second[1]


# --- the pass as a whole: the memo's observe, decide and admission against the pure ones -------------

def an_sj(i: int, rv: int, st_: dict[str, Any], **spec_: Any) -> SJObject:
    return SJObject(namespace="ns", name=f"sj{i}", uid=f"u{i}", generation=1, resource_version=str(rv),
                    created=NOW - timedelta(minutes=60 - i), deleting=False,
                    spec={"image": "busybox", "duration": "10m", "resources": {"requests": {"cpu": "1"}}, **spec_},
                    status=st_)


RAW_STATUSES: list[dict[str, Any]] = [
    {"phase": "Pending"},
    {"phase": "Interrupted", "interruptedCount": 1, "notBefore": (NOW + 3 * M).isoformat()},
    # Backing off after a wasted run: in the queue, its room held until its backoff ends.
    {"phase": "Interrupted", "interruptedCount": 1, "wastedRuns": 1, "attempt": 1, "jobName": "{name}-1",
     "launchedTimestamp": (NOW - 2 * M).isoformat(), "interruptedTimestamps": [(NOW - M).isoformat()],
     "notBefore": (NOW + 2 * M).isoformat()},
    {"phase": "Succeeded", "attempt": 1, "jobName": "sj-1"},
    {"phase": "Starting", "attempt": 1, "jobName": "{name}-1", "launchedTimestamp": NOW.isoformat()},
    {"phase": "Running", "attempt": 1, "jobName": "{name}-1", "launchedTimestamp": (NOW - 20 * M).isoformat(),
     "runningTimestamps": [(NOW - 19 * M).isoformat()], "priorityStartOverTimestamp": (NOW - 19 * M).isoformat(),
     "runningPriority": 0, "protected": False},
    # Running as a pass at NOW leaves it (10-minute periods in 3 levels, protected from level 1): quiet
    # until its next level, while steering does not exempt it.
    {"phase": "Running", "attempt": 1, "jobName": "{name}-1", "launchedTimestamp": (NOW - 20 * M).isoformat(),
     "runningTimestamps": [(NOW - 19 * M).isoformat()], "priorityStartOverTimestamp": (NOW - 5 * M).isoformat(),
     "runningPriority": 1, "protected": True},
    {},
]


def raw_status(kind: int, name: str) -> dict[str, Any]:
    return {k: v.replace("{name}", name) if isinstance(v, str) else v for k, v in RAW_STATUSES[kind].items()}


def run_pod(name: str, phase: str, node: int) -> PodView:
    return PodView(namespace="ns", name=f"{name}-1-0", uid=f"pod-{name}-{phase}-{node}", sj=name, run=f"{name}-1",
                   node=f"n{node}", phase=phase, deleting=False, requests=freeze({"cpu": 1000, "pods": 1000}),
                   all_running=phase == "Running", index=0)


EVOLUTION = st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["status", "pod", "job", "time", "same", "suspend"]),
                               st.integers(0, len(RAW_STATUSES) - 1), st.integers(0, 2)), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None)
@given(evolution=EVOLUTION)
def test_the_memo_decides_exactly_as_the_pure_functions_pass_after_pass(evolution: list[tuple[Any, ...]]) -> None:
    """SJs, their runs and the clock change one at a time; after each change the memo's observation,
    decisions and admission equal what the pure functions compute from nothing."""
    memo, cfg, policy = PassMemo(DEFAULT_LIMITS), LifecycleConfig(), PolicyConfig(starvation_after=30 * M)
    sjs = {i: an_sj(i, 1, raw_status(i % len(RAW_STATUSES), f"sj{i}")) for i in range(6)}
    jobs: dict[tuple[str, str], JobView] = {}
    pods: dict[tuple[str, str], tuple[PodView, ...]] = {}
    now, rv = NOW, 1
    for i, what, kind, node in evolution:
        rv += 1
        name = f"sj{i}"
        key = ("ns", f"{name}-1")
        if what == "status":
            sjs[i] = an_sj(i, rv, raw_status(kind, name))
        elif what == "suspend":
            sjs[i] = an_sj(i, rv, dict(sjs[i].status), suspend=True)
        elif what == "pod":
            pods[key] = (run_pod(name, ("Running", "Pending", "Succeeded")[node], node),)
        elif what == "job":
            # Now and then a Job of the run's name that no SJ controls: never the SJ's run.
            jobs[key] = JobView(namespace="ns", name=f"{name}-1", uid=f"j{rv}", sj=name, deleting=bool(node),
                                complete=False, failed=False, created=NOW, owner=f"u{i}" if rv % 3 else None)
        elif what == "time":
            now += (M, 4 * M, 31 * M)[node]
        active = tuple(p for ps in pods.values() for p in ps if not p.terminal)
        view = ClusterView(sjs=tuple(sjs.values()), jobs=dict(jobs), run_pods={k: tuple(v) for k, v in pods.items()},
                           active_pods=active, nodes=NODES)

        def fresh(sj: SJObject) -> tuple[str, Any]:
            return sj.resource_version, sj.status

        def failed(o: Any, exc: Exception) -> None:
            raise exc

        mine = memo.observe(view, handles=lambda ns: True, fresh=fresh)
        pure = observe(view, handles=lambda ns: True, fresh=fresh, spec_of=memo.spec_of)
        assert mine == pure
        decided = memo.decide(mine.sjs, now, cfg, on_error=failed, draining=frozenset())
        assert decided == decide(pure.sjs, now, cfg, on_error=failed)
        queue = tuple(memo.queued(d.observed.sj, d.observed.spec, d.step.status, now) for d in decided
                      if d.step.in_queue and not isinstance(d.observed.spec, InvalidSpec))
        if queue:
            assert memo.admission(view, queue, (), now, policy) == decide_pass(
                admission_snapshot(view, queue, ()), now, policy)


@pytest.mark.parametrize("drain_at", [None, 7, 20])
def test_running_sjs_reused_between_levels_are_decided_as_the_pure_functions(drain_at: int | None) -> None:
    """Three runs on one node, their statuses written back after every pass as the operator would, the
    clock moving 47 s a pass across many levels and periods (10 minutes in 3 levels); the node is drained
    for a few passes from ``drain_at``. Every pass the memo decides as the pure functions do, and most
    passes reuse the quiet runs."""
    memo, cfg = PassMemo(DEFAULT_LIMITS), LifecycleConfig()
    names = ["sj0", "sj1", "sj2"]
    sjs = {name: an_sj(i, 1, {"phase": "Running", "attempt": 1, "jobName": f"{name}-1",
                              "launchedTimestamp": (NOW - 20 * M).isoformat(),
                              "runningTimestamps": [(NOW - (19 - 2 * i) * M).isoformat()],
                              "priorityStartOverTimestamp": (NOW - (19 - 2 * i) * M).isoformat()})
           for i, name in enumerate(names)}
    jobs = {("ns", f"{n}-1"): JobView(namespace="ns", name=f"{n}-1", uid=f"j{n}", sj=n, deleting=False,
                                      complete=False, failed=False, created=NOW - 20 * M, owner=f"u{n[2:]}")
            for n in names}
    pods = {("ns", f"{n}-1"): (run_pod(n, "Running", 0),) for n in names}
    active = tuple(p for ps in pods.values() for p in ps)

    def fresh(sj: SJObject) -> tuple[str, Any]:
        return sj.resource_version, sj.status

    def failed(o: Any, exc: Exception) -> None:
        raise exc

    reused = 0
    with mock.patch("sj_operator.memo.decide", wraps=decide) as stepped:
        for k in range(60):
            now = NOW + k * timedelta(seconds=47)
            draining = frozenset({"n0"}) if drain_at is not None and drain_at <= k < drain_at + 4 else frozenset()
            view = ClusterView(sjs=tuple(sjs.values()), jobs=jobs, run_pods=pods, active_pods=active, nodes=NODES)
            stepped.reset_mock()
            mine = memo.observe(view, handles=lambda ns: True, fresh=fresh)
            decided = memo.decide(mine.sjs, now, cfg, on_error=failed, draining=draining)
            assert decided == decide(mine.sjs, now, cfg, on_error=failed, draining=draining), f"pass {k}"
            reused += len(names) - sum(len(c.args[0]) for c in stepped.call_args_list)
            for d in decided:  # the written status and the pods' label come back through the watch
                name = d.observed.sj.name
                if d.step.status != d.observed.status:
                    sjs[name] = replace(sjs[name], resource_version=str(k + 2), status=d.step.status.to_patch())
                if d.step.actions:
                    pods[("ns", f"{name}-1")] = carried_out(d.observed.run, d.step.actions).pods
    # Of 180 decisions; a toggle and the level written after it are two steps (the label first).
    assert reused > 50, "quiet runs between levels are not stepped again"


def test_waiting_sjs_with_unrecorded_runs_are_reused_until_the_record_grace_ends() -> None:
    """Pending SJs whose next runs were made 0 to 4 s ago and whose pods are bound and taken up by their nodes
    but not running yet (a burst on a busy cluster): passes every 0.5 s decide as the pure functions do; each SJ
    is stepped once, then not again until its run is due to be written in as Starting."""
    memo, cfg = PassMemo(DEFAULT_LIMITS), LifecycleConfig()
    names = [f"sj{i}" for i in range(5)]
    sjs = {name: an_sj(i, 1, {"phase": "Pending"}) for i, name in enumerate(names)}
    made = {name: NOW + i * timedelta(seconds=1) for i, name in enumerate(names)}
    runs = {name: run_job_name(name, 1) for name in names}
    jobs = {("ns", runs[n]): JobView(namespace="ns", name=runs[n], uid=f"j{n}", sj=n, deleting=False,
                                     complete=False, failed=False, created=made[n], started=made[n],
                                     owner=f"u{n[2:]}")
            for n in names}
    # Bound, and taken up by its node's agent as the run was made (its images being pulled, say).
    pods = {("ns", runs[n]): (replace(run_pod(n, "Pending", 0), run=runs[n], placed=made[n], started=made[n]),)
            for n in names}
    view = ClusterView(sjs=tuple(sjs.values()), jobs=jobs, run_pods=pods,
                       active_pods=tuple(p for ps in pods.values() for p in ps), nodes=NODES)

    def failed(o: Any, exc: Exception) -> None:
        raise exc

    stepped_at: dict[str, list[int]] = {n: [] for n in names}
    with mock.patch("sj_operator.memo.decide", wraps=decide) as stepped:
        for k in range(4 * 2, 40):  # from 4 s on: every run is made
            now = NOW + k * timedelta(milliseconds=500)
            stepped.reset_mock()
            mine = memo.observe(view, handles=lambda ns: True, fresh=lambda sj: (sj.resource_version, sj.status))
            decided = memo.decide(mine.sjs, now, cfg, on_error=failed, draining=frozenset())
            assert [replace(d, step=unstamped(d.step)) for d in decided] == [
                replace(d, step=unstamped(d.step)) for d in decide(mine.sjs, now, cfg, on_error=failed)], f"pass {k}"
            for o in (o for c in stepped.call_args_list for o in c.args[0]):
                stepped_at[o.sj.name].append(k)
            for d in decided:
                due = now >= made[d.observed.sj.name] + record_grace(cfg)
                assert (d.step.status.phase is Phase.STARTING) == due, f"pass {k}"
    # Stepped at the first pass, then at the pass at which its grace ended: its record (held back by the
    # controller while runs are launched) is the same, as stamped then, until its start timeout could come.
    assert stepped_at == {n: [8, 20 + 2 * i] for i, n in enumerate(names)}


# --- the controller: a steady pass does no per-SJ work ------------------------------------------------

class StoringKube(FakeKube):
    """Keeps each SJ's status as the API server would after the merge patches."""

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[str, dict[str, Any]] = {}

    async def patch_sj_status(self, namespace: str, name: str, status: dict[str, Any], resource_version: str) -> Any:
        body = await super().patch_sj_status(namespace, name, status, resource_version)
        merged = {**self.stored.get(name, {}), **status}
        self.stored[name] = {k: v for k, v in merged.items() if v is not None}
        return {**body, "status": self.stored[name]}


def test_a_pass_runs_the_state_machine_only_for_sjs_that_changed_or_whose_clock_ticked() -> None:
    kube = StoringKube()
    clock = [NOW]
    controller = Controller(kube, OperatorConfig(threshold=0.0), clock=lambda: clock[0])  # type: ignore[arg-type]
    backoff = {"phase": "Interrupted", "interruptedCount": 1, "notBefore": (NOW + 2 * M).isoformat()}
    sjs = [an_sj(i, 1, {} if i else backoff) for i in range(20)]
    view = ClusterView(sjs=tuple(sjs), jobs={}, run_pods={}, active_pods=(), nodes=NODES)
    with mock.patch("sj_operator.memo.decide", wraps=decide) as stepped:
        asyncio.run(settled_pass(controller, view))
        assert sum(len(c.args[0]) for c in stepped.call_args_list) == 20
        # What was written comes back through the watch: new objects, new versions.
        settled = ClusterView(sjs=tuple(replace(sj, status=kube.stored[sj.name], resource_version=str(kube.rv))
                                        if sj.name in kube.stored else sj for sj in sjs),
                              jobs={}, run_pods={}, active_pods=(), nodes=NODES)
        asyncio.run(settled_pass(controller, settled))
        stepped.reset_mock()
        calls = len(kube.calls)
        asyncio.run(settled_pass(controller, settled))
        assert stepped.call_count == 0 and len(kube.calls) == calls, "nothing changed: no step, no write"
        clock[0] = NOW + 2 * M  # sj0's backoff ends: only it is stepped again
        asyncio.run(settled_pass(controller, settled))
        assert [o.sj.name for c in stepped.call_args_list for o in c.args[0]] == ["sj0"]


def test_a_decision_that_failed_is_not_remembered() -> None:
    memo = PassMemo(DEFAULT_LIMITS)
    view = ClusterView(sjs=(an_sj(1, 1, {"phase": "Pending"}),), jobs={}, run_pods={}, active_pods=(), nodes=NODES)
    seen = memo.observe(view, handles=lambda ns: True, fresh=lambda sj: (sj.resource_version, sj.status))
    errors: list[str] = []
    with mock.patch("sj_operator.decide.step", side_effect=RuntimeError("bug")):
        assert memo.decide(seen.sjs, NOW, LifecycleConfig(), on_error=lambda o, e: errors.append(o.sj.name),
                           draining=frozenset()) == []
    assert errors == ["sj1"]
    again: list[Decided] = memo.decide(seen.sjs, NOW, LifecycleConfig(), on_error=lambda o, e: None,
                                       draining=frozenset())
    assert [d.observed.sj.name for d in again] == ["sj1"] and again[0].step.status.phase == Phase.PENDING


def test_only_the_sjs_this_process_wrote_are_read_through_fresh_and_namespaces_filter_when_given() -> None:
    sjs = (an_sj(1, 1, {"phase": "Pending"}), an_sj(2, 1, {"phase": "Pending"}))
    view = ClusterView(sjs=sjs, jobs={}, run_pods={}, active_pods=(), nodes=NODES)
    asked: list[str] = []

    def fresh(sj: SJObject) -> tuple[str, Mapping[str, Any]]:
        asked.append(sj.name)
        return "99", {"phase": "Interrupted", "interruptedCount": 1}

    seen = PassMemo(DEFAULT_LIMITS).observe(view, handles=None, fresh=fresh, fresher={sjs[1].uid})
    assert asked == ["sj2"]
    assert [(o.resource_version, o.status.phase) for o in seen.sjs] == [("1", Phase.PENDING), ("99", Phase.INTERRUPTED)]
    asked.clear()
    PassMemo(DEFAULT_LIMITS).observe(view, handles=None, fresh=fresh)
    assert asked == ["sj1", "sj2"], "without fresher, every SJ is read through fresh"
    only = PassMemo(DEFAULT_LIMITS).observe(view, handles=lambda ns: False, fresh=fresh, fresher=set())
    assert only.sjs == ()
