"""The ScavengerJob state machine (sj_operator.lifecycle): tables over observed runs at an injected clock.

Every test builds an immutable snapshot (parsed spec, status, the Job and pods of the current run), calls
``step`` at a fixed ``NOW`` and checks the decision: the new status, the actions and the Events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sj_operator.api import (
    Condition,
    InvalidSpec,
    Phase,
    ScavengerJobSpec,
    ScavengerJobStatus,
    parse_spec,
)
from sj_operator.names import run_job_name
from sj_operator.observed import JobView, PodView, Termination
from sj_operator.policy.conditions import admitted_condition, set_conditions
from sj_operator.policy.lifecycle import (
    FOREVER,
    MISSING_RUN_GRACE,
    RECORD_GRACE,
    DeleteRun,
    Event,
    LifecycleConfig,
    Run,
    SetProtection,
    Step,
    interruption_reason,
    launch_refused,
    launched,
    quiet_until,
    ran_for,
    record_from,
    record_grace,
    retry_delay,
    step,
)
from sj_operator.policy.priority import launch_class

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SJ = "demo"
NAMESPACE = "work"
RUN1 = run_job_name(SJ, 1)
CFG = LifecycleConfig(thrash_backoff=timedelta(0))  # anti-thrash off: these tests are about classification

S = timedelta(seconds=1)
M = timedelta(minutes=1)

PREEMPTION = ("PreemptionByScheduler", "Preempted in order to admit critical pod")
PREEMPTION_CAUSE = f"pod {RUN1}-0: PreemptionByScheduler (Preempted in order to admit critical pod)"


# ----------------------------------------------------------------------------- builders


def spec(**fields: Any) -> ScavengerJobSpec:
    """A parsed spec: the minimal valid one with ``fields`` set (camelCase keys, as in the API)."""
    return parse_spec({"image": "busybox:1.36", **fields})


def invalid_spec(**fields: Any) -> InvalidSpec:
    """The :class:`InvalidSpec` that parsing the minimal spec with ``fields`` raises."""
    with pytest.raises(InvalidSpec) as info:
        parse_spec({"image": "busybox:1.36", **fields})
    return info.value


def status(phase: Phase | None, at: datetime = NOW - 10 * M, **fields: Any) -> ScavengerJobStatus:
    """A status in ``phase`` whose conditions were set at ``at``; other fields as given (snake_case)."""
    conditions = set_conditions((), phase, "Test", "test", at) if phase is not None else ()
    return ScavengerJobStatus(phase=phase, conditions=conditions, **fields)


def starting(launched: datetime = NOW - 10 * S, **fields: Any) -> ScavengerJobStatus:
    """An SJ whose first run was launched at ``launched`` and is not yet running."""
    base: dict[str, Any] = dict(attempt=1, job_name=RUN1, launched_timestamp=launched,
                                priority_class_name="scavenger-band-0")
    return status(Phase.STARTING, at=launched, **{**base, **fields})


def running(since: datetime = NOW, level: int = 0, protected: bool = False, **fields: Any) -> ScavengerJobStatus:
    """An SJ whose first run has had all its pods running since ``since`` (its checkpoint period start)."""
    base: dict[str, Any] = dict(attempt=1, job_name=RUN1, launched_timestamp=since - 5 * S,
                                running_timestamps=(since,), priority_start_over_timestamp=since,
                                running_priority=level, protected=protected, priority_class_name="scavenger-band-0")
    return status(Phase.RUNNING, at=since, **{**base, **fields})


def pod(
    index: int = 0,
    phase: str = "Running",
    *,
    run: str = RUN1,
    all_running: bool | None = None,
    deleting: bool = False,
    disruption: tuple[str, str] | None = None,
    exit_code: int | None = None,
    container: str = "main",
    reason: str = "",
    terminations: Sequence[Termination] | None = None,
    disrupted_at: datetime | None = None,
    finished: datetime | None = None,
    placed: datetime | None = NOW - timedelta(days=1),
    protected: bool = False,
) -> PodView:
    """Member ``index`` of run ``run``. A Running pod has all containers running unless told otherwise;
    ``exit_code`` gives its one container a terminated state (that stopped at ``finished``). The scheduler
    decided about it (``placed``) long ago unless told otherwise; ``protected``: it carries the protection
    label."""
    if terminations is None:
        if exit_code is None and phase == "Succeeded":
            exit_code, reason = 0, reason or "Completed"
        terminations = () if exit_code is None else (Termination(container, exit_code, reason, finished),)
    return PodView(
        namespace=NAMESPACE, name=f"{run}-{index}", uid=f"uid-{run}-{index}", sj=SJ, run=run,
        node="node-1" if phase != "Pending" else None, phase=phase, deleting=deleting,
        requests={"cpu": 1000, "pods": 1000}, disruption=disruption, disrupted_at=disrupted_at,
        terminations=tuple(terminations),
        all_running=phase == "Running" if all_running is None else all_running, index=index, placed=placed,
        protected=protected,
    )


def job(
    name: str = RUN1,
    *,
    complete: bool = False,
    failed: bool = False,
    failure: str = "",
    deleting: bool = False,
    created: datetime | None = None,
    started: datetime | None = None,
) -> JobView:
    return JobView(namespace=NAMESPACE, name=name, uid=f"uid-{name}", sj=SJ, deleting=deleting,
                   complete=complete, failed=failed, failure=failure, created=created, started=started)


def run_of(job_view: JobView | None, *pods: PodView) -> Run:
    return Run(job=job_view, pods=tuple(pods))


NO_RUN = Run(job=None)


def decide(
    spec_: ScavengerJobSpec | InvalidSpec,
    status_: ScavengerJobStatus,
    run: Run = NO_RUN,
    now: datetime = NOW,
    cfg: LifecycleConfig = CFG,
) -> Step:
    return step(spec_, status_, run, now, cfg, sj_name=SJ)


def true_conditions(st: ScavengerJobStatus) -> list[str]:
    return [c.type for c in st.conditions if c.status == "True"]


def condition(st: ScavengerJobStatus, ctype: str) -> Condition:
    return next(c for c in st.conditions if c.type == ctype)


def reasons(result: Step) -> list[str]:
    return [e.reason for e in result.events]


# ----------------------------------------------------------------------------- first sight


@pytest.mark.parametrize(
    "spec_",
    [spec(), spec(parallelism=4), spec(maxInterruptions=0, duration="2h")],
    ids=["single", "gang", "with-limits"],
)
def test_first_sight_queues_the_sj(spec_: ScavengerJobSpec) -> None:
    result = decide(spec_, ScavengerJobStatus())

    assert result.status.phase == Phase.PENDING
    assert result.waiting is True
    assert result.actions == ()
    assert result.events == (Event("Normal", "Queued", "waiting for idle capacity"),)
    assert result.status.message == "waiting for idle capacity"
    assert result.status.conditions == (
        Condition(type="Queued", status="True", reason="Queued", message="waiting for idle capacity",
                  last_transition_time=NOW),
    )
    assert result.status.interrupted_count == 0 and result.status.attempt == 0


def test_first_sight_of_a_suspended_sj_holds_it() -> None:
    result = decide(spec(suspend=True), ScavengerJobStatus())
    assert result.status.phase == Phase.SUSPENDED
    assert result.waiting is False
    assert result.actions == ()
    assert reasons(result) == ["Suspended"]


# ----------------------------------------------------------------------------- invalid spec


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"parallelism": 0}, "spec.parallelism"),
        ({"image": ""}, "spec.image"),
        ({"duration": "soon"}, "spec.duration"),
        ({"priorityLevels": 0}, "spec.priorityLevels"),
        ({"checkpointVolume": "nope"}, "spec.checkpointVolume"),
        ({"volumes": [{"name": "v", "mountPath": "/v"}]}, "spec.volumes[0]"),
    ],
    ids=["parallelism", "image", "duration", "priorityLevels", "checkpointVolume", "volume-source"],
)
def test_invalid_spec_fails_naming_the_field(fields: dict[str, Any], field: str) -> None:
    bad = invalid_spec(**fields)
    result = decide(bad, ScavengerJobStatus())

    st = result.status
    assert st.phase == Phase.FAILED
    assert st.message == f"invalid spec: {bad}"
    assert field in st.message
    assert st.finished_timestamp == NOW
    assert st.running_priority is None
    assert true_conditions(st) == ["Failed"]
    assert condition(st, "Failed").reason == "InvalidSpec" and field in (condition(st, "Failed").message or "")
    assert result.events == (Event("Warning", "InvalidSpec", st.message),)
    assert result.actions == ()
    assert result.waiting is False


@pytest.mark.parametrize(
    ("status_", "run", "actions"),
    [
        (ScavengerJobStatus(), NO_RUN, ()),
        (status(Phase.PENDING), NO_RUN, ()),
        (running(), run_of(job(), pod()),
         (DeleteRun(RUN1, "invalid spec: spec.parallelism: must be at least 1"),)),
        (starting(), run_of(job(), pod(0, "Pending")),
         (DeleteRun(RUN1, "invalid spec: spec.parallelism: must be at least 1"),)),
        (running(), run_of(job(deleting=True), pod(deleting=True)), ()),
        (status(Phase.SUSPENDED, job_name=RUN1), run_of(None, pod(deleting=True)), ()),
    ],
    ids=["first-sight", "pending", "running-run-deleted", "starting-run-deleted", "run-already-deleting",
         "suspended-no-job"],
)
def test_invalid_spec_cancels_an_existing_run(
    status_: ScavengerJobStatus, run: Run, actions: tuple[DeleteRun, ...]
) -> None:
    result = decide(invalid_spec(parallelism=0), status_, run)
    assert result.status.phase == Phase.FAILED
    assert result.actions == actions


def test_invalid_spec_of_a_failed_sj_changes_nothing() -> None:
    failed = status(Phase.FAILED, job_name=RUN1, message="invalid spec: spec.image: is required",
                    finished_timestamp=NOW - M)
    result = decide(invalid_spec(parallelism=0), failed, run_of(job(), pod()))
    assert result == Step(failed)


# ----------------------------------------------------------------------------- waiting and adoption


@pytest.mark.parametrize(
    ("phase", "not_before", "waiting"),
    [
        (Phase.PENDING, None, True),
        (Phase.PENDING, NOW - S, True),
        (Phase.PENDING, NOW, True),
        (Phase.PENDING, NOW + S, False),
        (Phase.PENDING, NOW + 10 * M, False),
        (Phase.INTERRUPTED, None, True),
        (Phase.INTERRUPTED, NOW, True),
        (Phase.INTERRUPTED, NOW + 20 * S, False),
    ],
    ids=["pending-no-backoff", "pending-backoff-passed", "pending-backoff-ends-now", "pending-backoff-1s-left",
         "pending-backoff-10m-left", "interrupted-no-backoff", "interrupted-backoff-ends-now",
         "interrupted-backoff-left"],
)
def test_waiting_sj_is_eligible_once_its_backoff_passed(
    phase: Phase, not_before: datetime | None, waiting: bool
) -> None:
    before = status(phase, interrupted_count=1 if phase == Phase.INTERRUPTED else 0, not_before=not_before)
    result = decide(spec(), before)
    assert result == Step(before, waiting=waiting)


@pytest.mark.parametrize(
    ("phase", "attempt", "interrupted", "created", "started", "launched"),
    [
        (Phase.PENDING, 0, 0, NOW - 10 * S, NOW - 10 * S, NOW - 10 * S),
        (Phase.PENDING, 0, 0, None, NOW - 10 * S, NOW),
        (Phase.PENDING, 4, 0, NOW - 20 * S, NOW - 20 * S, NOW - 20 * S),
        (Phase.INTERRUPTED, 2, 1, NOW - 20 * S, NOW - 20 * S, NOW - 20 * S),
        (Phase.INTERRUPTED, 7, 3, NOW - 20 * S, NOW - 20 * S, NOW - 20 * S),
        (Phase.INTERRUPTED, 12, 10, NOW - 30 * S, NOW - 30 * S, NOW - 30 * S),
        (Phase.PENDING, 0, 0, NOW - 5 * M, NOW - 10 * S, NOW - 5 * M),
    ],
    ids=["first-run-at-its-grace", "job-without-creation-time", "after-start-timeouts", "after-an-interruption",
         "band-1", "band-3", "taken-up-late"],
)
def test_existing_next_run_is_recorded_as_starting_once_its_grace_passed(
    phase: Phase, attempt: int, interrupted: int, created: datetime | None, started: datetime, launched: datetime
) -> None:
    """The grace counts from when the Job controller took the run up (its startTime), never before the Job was
    made: "taken-up-late" was made five minutes ago and taken up ten seconds ago."""
    next_name = run_job_name(SJ, attempt + 1)
    before = status(phase, attempt=attempt, interrupted_count=interrupted, job_name=run_job_name(SJ, attempt),
                    not_before=NOW + M)
    result = decide(spec(), before, run_of(job(next_name, created=created, started=started),
                                           pod(0, "Pending", run=next_name, placed=started)))

    st = result.status
    assert st.phase == Phase.STARTING
    assert st.attempt == attempt + 1
    assert st.job_name == next_name
    assert st.launched_timestamp == launched
    assert st.priority_class_name == launch_class(interrupted)
    assert st.interrupted_count == interrupted
    assert st.message == f"run {next_name} launched; 0 of 1 pod(s) running"
    assert result.events == (Event("Normal", "Starting", st.message),)
    assert result.actions == ()
    assert result.waiting is False
    assert true_conditions(st) == ["Admitted"], "recording the run admits the SJ"
    assert condition(st, "Running").status == "False" and condition(st, "Queued").status == "False"


@pytest.mark.parametrize(
    "job_view",
    [job(run_job_name(SJ, 2)), job(run_job_name(SJ, 3), deleting=True), job(run_job_name(SJ, 4))],
    ids=["the-previous-run", "next-run-being-deleted", "a-later-run"],
)
def test_other_runs_are_not_adopted(job_view: JobView) -> None:
    before = status(Phase.INTERRUPTED, attempt=2, interrupted_count=1, job_name=run_job_name(SJ, 2))
    result = decide(spec(), before, run_of(job_view))
    assert result == Step(before, waiting=True)


# ----------------------------------------------------------------------------- starting


@pytest.mark.parametrize(
    ("parallelism", "pods"),
    [
        (1, [pod(0)]),
        (2, [pod(0), pod(1)]),
        (3, [pod(0), pod(1), pod(2)]),
        (2, [pod(1), pod(0)]),
    ],
    ids=["single", "gang-of-2", "gang-of-3", "gang-seen-out-of-order"],
)
def test_starting_becomes_running_when_all_pods_run(parallelism: int, pods: list[PodView]) -> None:
    earlier = NOW - 2 * timedelta(hours=1)
    before = starting(running_timestamps=(earlier,), start_timeouts=2, not_before=NOW - M, interrupted_count=1)
    result = decide(spec(parallelism=parallelism), before, run_of(job(), *pods))

    st = result.status
    assert st.phase == Phase.RUNNING
    assert st.running_timestamps == (earlier, NOW)
    assert st.priority_start_over_timestamp == NOW
    assert st.running_priority == 0
    assert st.protected is False
    assert st.start_timeouts == 0 and st.not_before is None
    assert st.interrupted_count == 1
    assert result.events == (Event("Normal", "Running", f"run {RUN1}: all {parallelism} pod(s) running"),)
    assert result.actions == ()
    assert true_conditions(st) == ["Running"]
    assert condition(st, "Running").last_transition_time == NOW


@pytest.mark.parametrize(
    ("parallelism", "pods"),
    [
        (1, []),
        (1, [pod(0, "Pending")]),
        (1, [pod(0, "Running", all_running=False)]),
        (2, [pod(0), pod(1, "Pending")]),
        (2, [pod(0)]),
        (3, [pod(0), pod(1), pod(2, "Pending")]),
    ],
    ids=["no-pods-yet", "pod-pending", "container-not-running-yet", "gang-one-pending", "gang-one-not-created",
         "gang-of-3-one-pending"],
)
def test_starting_waits_while_a_pod_is_not_running(parallelism: int, pods: list[PodView]) -> None:
    before = starting()
    result = decide(spec(parallelism=parallelism), before, run_of(job(), *pods))
    assert result == Step(before)


def test_starting_waits_for_the_job_to_show_up() -> None:
    before = starting(launched=NOW - S)
    assert decide(spec(), before, NO_RUN) == Step(before)


# ----------------------------------------------------------------------------- start timeout


@pytest.mark.parametrize(
    ("elapsed", "interrupted", "timeouts", "phase", "delay"),
    [
        (60 * S, 0, 0, Phase.PENDING, 10 * S),
        (61 * S, 0, 0, Phase.PENDING, 10 * S),
        (60 * S, 2, 0, Phase.INTERRUPTED, 10 * S),
        (60 * S, 0, 1, Phase.PENDING, 20 * S),
        (60 * S, 1, 3, Phase.INTERRUPTED, 80 * S),
        (60 * S, 0, 6, Phase.PENDING, 10 * M),
        (60 * S, 0, 40, Phase.PENDING, 10 * M),
    ],
    ids=["exactly-at-timeout", "past-timeout", "interrupted-before", "second-timeout", "fourth-timeout",
         "seventh-timeout-capped", "many-timeouts-capped"],
)
def test_start_timeout_deletes_the_run_and_waits_with_backoff(
    elapsed: timedelta, interrupted: int, timeouts: int, phase: Phase, delay: timedelta
) -> None:
    before = starting(launched=NOW - elapsed, interrupted_count=interrupted, start_timeouts=timeouts)
    result = decide(spec(parallelism=2), before, run_of(job(), pod(0), pod(1, "Pending")))

    st = result.status
    assert st.phase == phase
    assert st.start_timeouts == timeouts + 1
    assert st.not_before == NOW + delay
    assert st.interrupted_count == interrupted
    assert st.interrupted_timestamps == ()
    assert st.running_priority is None
    assert st.attempt == 1 and st.job_name == RUN1
    assert result.actions == (DeleteRun(RUN1, "start timeout"),)
    message = (f"run {RUN1} did not have all pods running within 1m (1 of 2 not running); "
               "it was deleted and will be retried")
    assert st.message == message
    assert result.events == (Event("Warning", "StartTimeout", message),)
    assert true_conditions(st) == ["Queued"]
    assert result.waiting is False


@pytest.mark.parametrize(
    ("launched", "created", "timed_out"),
    [
        (NOW - 59 * S, None, False),
        (NOW - 59 * S, NOW - 2 * M, False),
        (None, NOW - 59 * S, False),
        (None, NOW - 60 * S, True),
        (None, None, False),
    ],
    ids=["launched-59s-ago", "launch-time-beats-creation", "created-59s-ago", "created-60s-ago",
         "no-time-known"],
)
def test_start_timeout_counts_from_launch_else_from_job_creation(
    launched: datetime | None, created: datetime | None, timed_out: bool
) -> None:
    before = starting(launched=NOW).model_copy(update={"launched_timestamp": launched})
    result = decide(spec(), before, run_of(job(created=created), pod(0, "Pending")))
    assert (result.actions == (DeleteRun(RUN1, "start timeout"),)) is timed_out
    assert result.status.phase == (Phase.PENDING if timed_out else Phase.STARTING)


def test_start_timeout_honours_the_configured_bound() -> None:
    cfg = LifecycleConfig(start_timeout=5 * M, retry_backoff=30 * S)
    before = starting(launched=NOW - 4 * M)
    run = run_of(job(), pod(0, "Pending"))
    assert decide(spec(), before, run, cfg=cfg) == Step(before)
    result = decide(spec(), before, run, now=NOW + M, cfg=cfg)
    assert result.status.not_before == NOW + M + 30 * S
    assert "within 5m (1 of 1 not running)" in (result.status.message or "")


def test_after_a_start_timeout_the_sj_waits_until_its_backoff_passed() -> None:
    timed_out = decide(spec(), starting(launched=NOW - M), run_of(job(), pod(0, "Pending")))
    backing_off = timed_out.status
    old_run_going = run_of(job(deleting=True), pod(0, "Pending", deleting=True))
    assert decide(spec(), backing_off, old_run_going, now=NOW + 9 * S) == Step(backing_off, waiting=False)
    assert decide(spec(), backing_off, NO_RUN, now=NOW + 10 * S) == Step(backing_off, waiting=True)


@pytest.mark.parametrize(
    ("timeouts", "cfg", "delay"),
    [
        (0, CFG, timedelta(0)),
        (-1, CFG, timedelta(0)),
        (1, CFG, 10 * S),
        (2, CFG, 20 * S),
        (3, CFG, 40 * S),
        (6, CFG, 320 * S),
        (7, CFG, 10 * M),
        (1000, CFG, 10 * M),
        (1, LifecycleConfig(retry_backoff=S, max_retry_backoff=5 * S), S),
        (3, LifecycleConfig(retry_backoff=S, max_retry_backoff=5 * S), 4 * S),
        (4, LifecycleConfig(retry_backoff=S, max_retry_backoff=5 * S), 5 * S),
        (2, LifecycleConfig(retry_backoff=M, max_retry_backoff=M), M),
    ],
    ids=["none", "negative", "first", "doubles", "doubles-again", "sixth", "capped", "huge-capped",
         "custom-first", "custom-third", "custom-capped", "cap-equals-base"],
)
def test_retry_delay_doubles_and_caps(timeouts: int, cfg: LifecycleConfig, delay: timedelta) -> None:
    assert retry_delay(timeouts, cfg) == delay


# ----------------------------------------------------------------------------- success


@pytest.mark.parametrize(
    ("before", "parallelism", "run", "actions"),
    [
        (running(NOW - M), 1, run_of(job(complete=True), pod(0, "Succeeded")), ()),
        (running(NOW - M), 1, run_of(job(), pod(0, "Succeeded")), ()),
        (running(NOW - M), 1, run_of(job(complete=True)), ()),
        (running(NOW - M), 3, run_of(job(), pod(0, "Succeeded"), pod(1, "Succeeded"), pod(2, "Succeeded")), ()),
        # A Complete Job stops its remaining pods itself (successPolicy): nothing to delete.
        (running(NOW - M), 3, run_of(job(complete=True), pod(0, "Succeeded"), pod(1), pod(2)), ()),
        (running(NOW - M), 2, run_of(job(complete=True, deleting=True), pod(0, "Succeeded"), pod(1, deleting=True)),
         ()),
        (running(NOW - M), 2, run_of(job(complete=True), pod(0, "Succeeded"), pod(1, "Failed", exit_code=143)), ()),
        (starting(), 1, run_of(job(complete=True), pod(0, "Succeeded")), ()),
        (running(NOW - 2 * M, level=2, protected=True), 1, run_of(job(complete=True), pod(0, "Succeeded")), ()),
    ],
    ids=["job-complete", "all-pods-succeeded", "job-complete-pods-gone", "gang-all-succeeded",
         "gang-complete-others-still-running", "gang-complete-run-already-deleting",
         "gang-complete-others-terminated", "from-starting", "protected-run"],
)
def test_success(before: ScavengerJobStatus, parallelism: int, run: Run, actions: tuple[DeleteRun, ...]) -> None:
    result = decide(spec(parallelism=parallelism), before, run)

    st = result.status
    assert st.phase == Phase.SUCCEEDED
    assert st.finished_timestamp == NOW
    assert st.running_priority is None
    assert st.protected is False
    assert st.message == f"run {RUN1} succeeded"
    assert result.events == (Event("Normal", "Succeeded", f"run {RUN1} succeeded"),)
    assert result.actions == actions
    assert true_conditions(st) == ["Complete"]
    assert result.waiting is False


@pytest.mark.parametrize(
    "run",
    [
        run_of(job(), pod(0, "Succeeded"), pod(1)),
        run_of(job(), pod(0, "Succeeded")),
    ],
    ids=["one-of-two-succeeded-other-running", "one-of-two-succeeded-other-not-seen"],
)
def test_partial_gang_success_is_not_success(run: Run) -> None:
    before = running(NOW - M)
    assert decide(spec(parallelism=2), before, run) == Step(before)


# ----------------------------------------------------------------------------- failure


def _failed_message(pod_name: str, container: str, code: int, reason: str) -> str:
    suffix = f" ({reason})" if reason else ""
    return f"run {RUN1} failed: pod {pod_name} container {container} exited with code {code}{suffix}"


@pytest.mark.parametrize(
    ("parallelism", "run", "message", "actions"),
    [
        (1, run_of(job(), pod(0, "Failed", exit_code=1, reason="Error")),
         _failed_message(f"{RUN1}-0", "main", 1, "Error"), ()),
        (1, run_of(job(failed=True, failure="BackoffLimitExceeded"), pod(0, "Failed", exit_code=2)),
         _failed_message(f"{RUN1}-0", "main", 2, ""), ()),
        (1, run_of(job(), pod(0, "Failed", exit_code=137, reason="OOMKilled")),
         _failed_message(f"{RUN1}-0", "main", 137, "OOMKilled"), ()),
        (1, run_of(job(), pod(0, "Failed", terminations=(Termination("sidecar", 0, "Completed"),
                                                         Termination("worker", 3, "Error")))),
         _failed_message(f"{RUN1}-0", "worker", 3, "Error"), ()),
        (3, run_of(job(), pod(0), pod(1, "Failed", exit_code=1, reason="Error"), pod(2)),
         _failed_message(f"{RUN1}-1", "main", 1, "Error"), (DeleteRun(RUN1, "a gang member failed"),)),
        (2, run_of(job(), pod(0, deleting=True), pod(1, "Failed", exit_code=1, reason="Error")),
         _failed_message(f"{RUN1}-1", "main", 1, "Error"), (DeleteRun(RUN1, "a gang member failed"),)),
        (2, run_of(job(deleting=True), pod(0, deleting=True), pod(1, "Failed", exit_code=1)),
         _failed_message(f"{RUN1}-1", "main", 1, ""), ()),
        (2, run_of(job(), pod(0, "Failed", exit_code=143, deleting=True), pod(1, "Failed", exit_code=1)),
         _failed_message(f"{RUN1}-1", "main", 1, ""), ()),
    ],
    ids=["single", "job-already-failed", "oom-killed", "names-the-failed-container", "gang-others-running",
         "gang-others-being-stopped", "gang-run-already-deleting", "gang-others-stopped"],
)
def test_failure(parallelism: int, run: Run, message: str, actions: tuple[DeleteRun, ...]) -> None:
    before = running(NOW - M, level=0)
    result = decide(spec(parallelism=parallelism), before, run)

    st = result.status
    assert st.phase == Phase.FAILED
    assert st.message == message
    assert st.finished_timestamp == NOW
    assert st.running_priority is None and st.protected is False
    assert st.interrupted_count == 0
    assert result.events == (Event("Warning", "Failed", message),)
    assert result.actions == actions
    assert true_conditions(st) == ["Failed"]
    assert result.waiting is False


def test_failure_while_starting() -> None:
    result = decide(spec(), starting(), run_of(job(), pod(0, "Failed", exit_code=127, reason="ContainerCannotRun")))
    assert result.status.phase == Phase.FAILED
    assert result.status.message == _failed_message(f"{RUN1}-0", "main", 127, "ContainerCannotRun")


@pytest.mark.parametrize(
    ("failed_pod", "cause"),
    [
        (pod(0, "Failed", exit_code=137, reason="Error", disruption=PREEMPTION), PREEMPTION_CAUSE),
        (pod(0, "Failed", exit_code=137, reason="Error", disruption=("EvictionByEvictionAPI", "")),
         f"pod {RUN1}-0: EvictionByEvictionAPI"),
        (pod(0, "Failed", exit_code=143, reason="Error", disruption=("DeletionByPodGC", "node gone")),
         f"pod {RUN1}-0: DeletionByPodGC (node gone)"),
        (pod(0, "Failed", exit_code=137, reason="Error", deleting=True), f"pod {RUN1}-0 was deleted"),
    ],
    ids=["preempted", "evicted", "node-lost", "deleted-from-outside"],
)
def test_a_disrupted_pod_that_exited_non_zero_is_an_interruption_not_a_failure(
    failed_pod: PodView, cause: str
) -> None:
    result = decide(spec(), running(NOW - M), run_of(job(), failed_pod))

    st = result.status
    assert st.phase == Phase.INTERRUPTED
    assert st.interrupted_count == 1
    assert st.finished_timestamp is None
    assert result.actions == (DeleteRun(RUN1, cause),)
    assert st.message == f"interrupted (1, {interruption_reason(cause)}): {cause}; waiting to run again"
    assert reasons(result) == ["Interrupting", "Interrupted"]
    assert result.waiting is True


# ----------------------------------------------------------------------------- interruption


@pytest.mark.parametrize(
    ("before", "parallelism", "run", "cause"),
    [
        (running(NOW - M), 1, run_of(job(), pod(0, disruption=PREEMPTION)), PREEMPTION_CAUSE),
        (running(NOW - M), 3, run_of(job(), pod(0), pod(1, disruption=("EvictionByEvictionAPI", "")), pod(2)),
         f"pod {RUN1}-1: EvictionByEvictionAPI"),
        (running(NOW - M), 2, run_of(job(), pod(0), pod(1, deleting=True)), f"pod {RUN1}-1 was deleted"),
        (running(NOW - M), 1, run_of(job(), pod(0, "Pending", deleting=True)), f"pod {RUN1}-0 was deleted"),
        (starting(), 2, run_of(job(), pod(0, disruption=PREEMPTION), pod(1, "Pending")), PREEMPTION_CAUSE),
        (running(NOW - M), 2, run_of(job(failed=True, failure="BackoffLimitExceeded"), pod(0), pod(1)),
         f"run {RUN1} ended without a visible cause (BackoffLimitExceeded)"),
    ],
    ids=["preempted", "gang-member-evicted", "gang-member-deleted", "pending-pod-deleted", "while-starting",
         "job-failed-pods-running"],
)
def test_interruption_first_cancels_the_whole_run(
    before: ScavengerJobStatus, parallelism: int, run: Run, cause: str
) -> None:
    result = decide(spec(parallelism=parallelism), before, run)

    st = result.status
    assert st.phase == before.phase
    assert st.interrupted_count == 0 and st.interrupted_timestamps == ()
    assert st.message == f"interrupting: {cause}"
    assert st.conditions == before.conditions
    assert result.actions == (DeleteRun(RUN1, cause),)
    assert result.events == (Event("Warning", "Interrupting", f"run {RUN1} is cancelled: {cause}"),)
    assert result.waiting is False


@pytest.mark.parametrize(
    "run",
    [
        run_of(job(deleting=True), pod(0, deleting=True)),
        run_of(job(deleting=True), pod(0, disruption=PREEMPTION, deleting=True), pod(1)),
        run_of(None, pod(0, deleting=True)),
    ],
    ids=["job-deleting-pod-stopping", "job-deleting-gang-stopping", "job-gone-pod-stopping"],
)
def test_interruption_waits_while_pods_still_hold_resources(run: Run) -> None:
    before = running(NOW - M, message=f"interrupting: {PREEMPTION_CAUSE}")
    assert decide(spec(parallelism=2), before, run) == Step(before)


def test_job_deleted_from_outside_is_recorded_once_its_pods_stopped() -> None:
    before = running(NOW - 5 * M)
    stopping = decide(spec(), before, run_of(job(deleting=True), pod(0, deleting=True)))
    assert stopping == Step(before)

    result = decide(spec(), before, run_of(job(deleting=True), pod(0, "Failed", exit_code=143, deleting=True)))
    assert result.status.phase == Phase.INTERRUPTED
    assert result.status.message == f"interrupted (1, Deleted): run {RUN1} was deleted; waiting to run again"
    assert result.actions == ()


@pytest.mark.parametrize(
    ("interrupted", "stamps", "message", "run", "cause"),
    [
        (0, (), f"interrupting: {PREEMPTION_CAUSE}", run_of(job(deleting=True)), PREEMPTION_CAUSE),
        (0, (), f"interrupting: {PREEMPTION_CAUSE}",
         run_of(job(deleting=True), pod(0, "Failed", exit_code=137, disruption=PREEMPTION, deleting=True)),
         PREEMPTION_CAUSE),
        (0, (), f"interrupting: pod {RUN1}-1 was deleted", run_of(None), f"pod {RUN1}-1 was deleted"),
        (2, (NOW - 3 * timedelta(hours=1), NOW - timedelta(hours=1)), f"interrupting: {PREEMPTION_CAUSE}",
         run_of(job(deleting=True), pod(0, "Failed", exit_code=143, deleting=True)), PREEMPTION_CAUSE),
        (0, (), f"run {RUN1}: all 1 pod(s) running", run_of(job(deleting=True)), f"run {RUN1} was deleted"),
    ],
    ids=["job-deleting-pods-gone", "pods-terminated", "job-gone", "third-interruption", "no-stored-cause"],
)
def test_interruption_is_recorded_once_no_pod_holds_resources(
    interrupted: int, stamps: tuple[datetime, ...], message: str, run: Run, cause: str
) -> None:
    before = running(NOW - 10 * M, level=1, protected=True, interrupted_count=interrupted,
                     interrupted_timestamps=stamps, message=message)
    result = decide(spec(), before, run)

    st = result.status
    count = interrupted + 1
    assert st.phase == Phase.INTERRUPTED
    assert st.interrupted_count == count
    assert st.interrupted_timestamps == (*stamps, NOW)
    assert st.message == f"interrupted ({count}, {interruption_reason(cause)}): {cause}; waiting to run again"
    assert st.running_priority is None and st.protected is False
    assert st.finished_timestamp is None
    assert st.job_name == RUN1 and st.attempt == 1
    assert result.actions == ()
    assert result.events == (Event("Warning", "Interrupted", st.message),)
    assert true_conditions(st) == ["Queued"]
    assert condition(st, "Running").status == "False"
    assert result.waiting is True


def test_interruption_end_to_end_keeps_the_original_cause() -> None:
    first = decide(spec(parallelism=2), running(NOW - M), run_of(job(), pod(0, disruption=PREEMPTION), pod(1)))
    assert first.status.phase == Phase.RUNNING and reasons(first) == ["Interrupting"]

    later = NOW + 30 * S
    second = decide(spec(parallelism=2), first.status,
                    run_of(job(deleting=True), pod(0, "Failed", exit_code=137, deleting=True), pod(1, deleting=True)),
                    now=later)
    assert second == Step(first.status)

    third = decide(spec(parallelism=2), first.status, run_of(job(deleting=True)), now=later + S)
    assert third.status.phase == Phase.INTERRUPTED
    assert third.status.interrupted_timestamps == (later + S,)
    assert third.status.message == f"interrupted (1, PreemptionByScheduler): {PREEMPTION_CAUSE}; waiting to run again"


@pytest.mark.parametrize(
    ("before", "missing_for", "interrupted"),
    [
        (running(NOW - 10 * M), timedelta(0), False),
        (running(NOW - 10 * M), 5 * S, False),
        (running(NOW - 10 * M), MISSING_RUN_GRACE - S, False),
        (running(NOW - 10 * M), MISSING_RUN_GRACE, True),
        (running(NOW - 10 * M), 10 * M, True),
        (starting(), 5 * S, False),
        (starting(), MISSING_RUN_GRACE + S, True),
    ],
    ids=["running-just-launched", "running-5s", "running-just-under-grace", "running-at-grace",
         "running-long-gone", "starting-5s", "starting-past-grace"],
)
def test_missing_run_counts_as_lost_only_after_the_grace(
    before: ScavengerJobStatus, missing_for: timedelta, interrupted: bool
) -> None:
    before = before.model_copy(update={"launched_timestamp": NOW - missing_for})
    result = decide(spec(), before, NO_RUN)
    if not interrupted:
        assert result == Step(before)
        return
    assert result.status.phase == Phase.INTERRUPTED
    assert result.status.interrupted_count == 1
    assert result.status.message == f"interrupted (1, Deleted): run {RUN1} disappeared; waiting to run again"
    assert result.actions == ()


def test_missing_run_without_a_launch_time_is_lost_at_once() -> None:
    before = running(NOW - M).model_copy(update={"launched_timestamp": None})
    assert decide(spec(), before, NO_RUN).status.phase == Phase.INTERRUPTED


DISRUPTED_FAILURE = f"PodFailurePolicy: Pod ns/{RUN1}-x has condition DisruptionTarget matching FailJob rule at index 0"


@pytest.mark.parametrize(
    ("run", "actions"),
    [
        (run_of(job(failed=True, failure="BackoffLimitExceeded: Job has reached the specified backoff limit")),
         (DeleteRun(RUN1, f"run {RUN1} ended without a visible cause "
                          "(BackoffLimitExceeded: Job has reached the specified backoff limit)"),)),
        (run_of(job(failed=True, failure="BackoffLimitExceeded: Job has reached the specified backoff limit",
                    deleting=True)), ()),
        # Its podFailurePolicy failed it for a disrupted pod, which is gone: no replacement hid it.
        (run_of(job(failed=True, failure=DISRUPTED_FAILURE)),
         (DeleteRun(RUN1, f"run {RUN1} was ended by a disrupted pod that is gone ({DISRUPTED_FAILURE})"),)),
    ],
    ids=["job-failed-pods-gone", "job-failed-and-deleting", "job-failed-by-its-pod-failure-policy"],
)
def test_failed_job_without_visible_pods_is_an_interruption_never_a_failure(
    run: Run, actions: tuple[DeleteRun, ...]
) -> None:
    result = decide(spec(), running(NOW - M), run)
    assert result.status.phase == Phase.INTERRUPTED
    assert result.status.interrupted_count == 1
    assert result.status.finished_timestamp is None
    assert result.actions == actions
    assert "Failed" not in true_conditions(result.status)


@pytest.mark.parametrize(
    ("max_interruptions", "interrupted", "phase"),
    [
        (None, 0, Phase.INTERRUPTED),
        (None, 50, Phase.INTERRUPTED),
        (0, 0, Phase.FAILED),
        (1, 0, Phase.INTERRUPTED),
        (2, 1, Phase.INTERRUPTED),
        (2, 2, Phase.FAILED),
        (2, 5, Phase.FAILED),
    ],
    ids=["unlimited", "unlimited-many", "none-allowed", "first-of-one", "reaches-the-limit", "exceeds-the-limit",
         "already-past"],
)
def test_max_interruptions(max_interruptions: int | None, interrupted: int, phase: Phase) -> None:
    fields = {} if max_interruptions is None else {"maxInterruptions": max_interruptions}
    before = running(NOW - M, interrupted_count=interrupted, message=f"interrupting: {PREEMPTION_CAUSE}")
    result = decide(spec(**fields), before, run_of(job(deleting=True)))

    st = result.status
    count = interrupted + 1
    assert st.phase == phase
    assert st.interrupted_count == count
    assert st.interrupted_timestamps == (NOW,)
    if phase == Phase.FAILED:
        message = (f"too many interruptions ({count} > maxInterruptions {max_interruptions}); "
                   f"last: {PREEMPTION_CAUSE}")
        assert st.message == message
        assert st.finished_timestamp == NOW
        assert result.events == (Event("Warning", "TooManyInterruptions", message),)
        assert true_conditions(st) == ["Failed"]
        assert condition(st, "Failed").reason == "TooManyInterruptions"
        assert result.waiting is False
    else:
        assert reasons(result) == ["Interrupted"]
        assert st.finished_timestamp is None
        assert result.waiting is True


# ----------------------------------------------------------------------------- suspend


SUSPENDED_MESSAGE = "suspended: spec.suspend is true; the current run, if any, was cancelled"


@pytest.mark.parametrize(
    ("before", "run", "actions"),
    [
        (running(NOW - 15 * M, level=1, protected=True), run_of(job(), pod(0)), (DeleteRun(RUN1, "suspended"),)),
        (starting(), run_of(job(), pod(0, "Pending")), (DeleteRun(RUN1, "suspended"),)),
        (running(NOW - M), run_of(job(deleting=True), pod(0, deleting=True)), ()),
        (running(NOW - M, interrupted_count=2), run_of(job(), pod(0, disruption=PREEMPTION)),
         (DeleteRun(RUN1, "suspended"),)),
        (status(Phase.PENDING), NO_RUN, ()),
        (status(Phase.INTERRUPTED, interrupted_count=1, attempt=1, job_name=RUN1), NO_RUN, ()),
    ],
    ids=["running", "starting", "running-run-already-deleting", "running-while-preempted", "pending",
         "interrupted"],
)
def test_suspend_cancels_the_run_without_counting_an_interruption(
    before: ScavengerJobStatus, run: Run, actions: tuple[DeleteRun, ...]
) -> None:
    result = decide(spec(suspend=True), before, run)

    st = result.status
    assert st.phase == Phase.SUSPENDED
    assert st.interrupted_count == before.interrupted_count
    assert st.interrupted_timestamps == before.interrupted_timestamps
    assert st.running_priority is None and st.protected is False
    assert st.message == SUSPENDED_MESSAGE
    assert result.actions == actions
    assert result.events == (Event("Normal", "Suspended", SUSPENDED_MESSAGE),)
    assert true_conditions(st) == ["Suspended"]
    assert result.waiting is False


@pytest.mark.parametrize(
    "run",
    [NO_RUN, run_of(job(deleting=True), pod(0, deleting=True)), run_of(job(), pod(0))],
    ids=["run-gone", "run-stopping", "run-still-there"],
)
def test_suspended_sj_stays_suspended(run: Run) -> None:
    before = status(Phase.SUSPENDED, attempt=1, job_name=RUN1, message=SUSPENDED_MESSAGE)
    assert decide(spec(suspend=True), before, run) == Step(before)


@pytest.mark.parametrize(
    ("interrupted", "run", "phase"),
    [
        (0, run_of(job(deleting=True), pod(0, deleting=True)), None),
        (0, run_of(None, pod(0, "Pending", deleting=True)), None),
        (0, run_of(job(deleting=True), pod(0, "Failed", exit_code=143, deleting=True), pod(1, deleting=True)), None),
        (0, NO_RUN, Phase.PENDING),
        (0, run_of(job(deleting=True), pod(0, "Failed", exit_code=143, deleting=True)), Phase.PENDING),
        (3, NO_RUN, Phase.INTERRUPTED),
        (1, run_of(job(deleting=True)), Phase.INTERRUPTED),
    ],
    ids=["old-pod-stopping", "old-pending-pod-stopping", "old-gang-stopping", "old-run-gone",
         "old-pod-terminated", "interrupted-before", "old-job-still-deleting"],
)
def test_resume_waits_for_the_cancelled_run_to_stop(interrupted: int, run: Run, phase: Phase | None) -> None:
    before = status(Phase.SUSPENDED, attempt=1, job_name=RUN1, interrupted_count=interrupted,
                    message=SUSPENDED_MESSAGE)
    result = decide(spec(), before, run)
    if phase is None:
        assert result == Step(before)
        return
    st = result.status
    message = "resumed: spec.suspend is false; waiting for idle capacity"
    assert st.phase == phase
    assert st.message == message
    assert st.interrupted_count == interrupted
    assert result.events == (Event("Normal", "Resumed", message),)
    assert result.actions == ()
    assert true_conditions(st) == ["Queued"]
    assert condition(st, "Suspended").status == "False"
    assert result.waiting is True


# ----------------------------------------------------------------------------- terminal phases


@pytest.mark.parametrize(
    ("phase", "spec_", "run", "actions"),
    [
        (Phase.SUCCEEDED, spec(), NO_RUN, ()),
        (Phase.SUCCEEDED, spec(), run_of(job(), pod(0, disruption=PREEMPTION)),
         (DeleteRun(RUN1, "the SJ is Succeeded"),)),
        (Phase.SUCCEEDED, spec(), run_of(job(failed=True)), ()),
        (Phase.SUCCEEDED, spec(suspend=True), run_of(job(complete=True), pod(0, "Succeeded")), ()),
        (Phase.SUCCEEDED, spec(maxInterruptions=0), run_of(job(deleting=True)), ()),
        (Phase.FAILED, spec(), NO_RUN, ()),
        (Phase.FAILED, spec(parallelism=2), run_of(job(), pod(0, "Failed", exit_code=1), pod(1)),
         (DeleteRun(RUN1, "the SJ is Failed"),)),
        (Phase.FAILED, spec(parallelism=2), run_of(job(deleting=True), pod(0, "Failed", exit_code=1),
                                                  pod(1, deleting=True)), ()),
        (Phase.FAILED, spec(), run_of(job(), pod(0, "Failed", exit_code=1)), ()),
        (Phase.FAILED, spec(suspend=True), NO_RUN, ()),
    ],
    ids=["succeeded-pods-vanished", "succeeded-leftover-running", "succeeded-job-failed-later",
         "succeeded-then-suspended", "succeeded-job-deleted", "failed-pods-vanished", "failed-gang-still-running",
         "failed-gang-stopping", "failed-run-kept-for-inspection", "failed-then-suspended"],
)
def test_terminal_phases_are_sticky(
    phase: Phase, spec_: ScavengerJobSpec, run: Run, actions: tuple[DeleteRun, ...]
) -> None:
    before = status(phase, attempt=1, job_name=RUN1, finished_timestamp=NOW - M, message="done")
    result = decide(spec_, before, run)
    assert result == Step(before, actions=actions)


# ----------------------------------------------------------------------------- running priority


def _protected_event(level: int) -> Event:
    return Event("Normal", "Protected",
                 f"running priority {level} of 3: run {RUN1} is protected by a PodDisruptionBudget", routine=True)


UNPROTECTED = Event("Normal", "Unprotected", f"checkpoint period of 30m ended: run {RUN1} is no longer protected",
                    routine=True)
T0 = NOW - timedelta(hours=1)  # start of the period in the table below


def _protect(due: datetime) -> SetProtection:
    return SetProtection(RUN1, True, due=due)


def _unprotect(due: datetime) -> SetProtection:
    return SetProtection(RUN1, False, due=due)


@pytest.mark.parametrize(
    ("offset", "stored", "protect_level", "expected", "actions", "events"),
    [
        (timedelta(0), (0, False), 1, (T0, 0, False), (), ()),
        (5 * M, (0, False), 1, (T0, 0, False), (), ()),
        (10 * M - S, (0, False), 1, (T0, 0, False), (), ()),
        (10 * M, (0, False), 1, (T0, 0, False), (_protect(T0 + 10 * M),), (_protected_event(1),)),
        (15 * M, (1, True), 1, (T0, 1, True), (), ()),
        (20 * M, (1, True), 1, (T0, 2, True), (), ()),
        (25 * M, (0, False), 1, (T0, 0, False), (_protect(T0 + 10 * M),), (_protected_event(2),)),
        (30 * M - S, (2, True), 1, (T0, 2, True), (), ()),
        (30 * M, (2, True), 1, (T0, 2, True), (_unprotect(T0 + 30 * M),), (UNPROTECTED,)),
        (40 * M, (2, True), 1, (T0 + 30 * M, 1, True), (), ()),
        (95 * M, (2, True), 1, (T0, 2, True), (_unprotect(T0 + 90 * M),), (UNPROTECTED,)),
        (130 * M, (0, False), 1, (T0, 0, False), (_protect(T0 + 130 * M),), (_protected_event(1),)),
        (timedelta(0), (0, False), 0, (T0, 0, False), (_protect(T0),), (_protected_event(0),)),
        (30 * M, (2, True), 0, (T0 + 30 * M, 0, True), (), ()),
        (15 * M, (0, False), 2, (T0, 1, False), (), ()),
        (20 * M, (1, False), 2, (T0, 1, False), (_protect(T0 + 20 * M),), (_protected_event(2),)),
        (25 * M, (1, False), 3, (T0, 2, False), (), ()),
    ],
    ids=["period-start", "level-0", "just-before-level-1", "level-1-protects", "level-1-unchanged",
         "level-2-already-protected", "missed-level-1", "end-of-period", "boundary-starts-over",
         "next-period-level-1", "several-periods-later", "four-periods-later-level-1", "protect-from-0",
         "protect-from-0-boundary", "protect-from-2-level-1", "protect-from-2-level-2", "never-protected"],
)
def test_running_priority(
    offset: timedelta,
    stored: tuple[int, bool],
    protect_level: int,
    expected: tuple[datetime, int, bool],
    actions: tuple[SetProtection, ...],
    events: tuple[Event, ...],
) -> None:
    """``stored``: the level and protection the status records, and the protection the run's pod carries. A
    toggle is the label and its Event alone (the status stays as it is); the level is written, with the
    protection, once the pod carries it."""
    level, protected = stored
    before = running(T0, level=level, protected=protected)
    result = decide(spec(), before, run_of(job(), pod(0, protected=protected)), now=T0 + offset,
                    cfg=LifecycleConfig(protect_level=protect_level))

    st = result.status
    assert (st.priority_start_over_timestamp, st.running_priority, st.protected) == expected
    assert result.actions == actions
    assert result.events == events
    assert st.phase == Phase.RUNNING
    assert st.conditions == before.conditions
    assert st.running_timestamps == before.running_timestamps
    if actions:
        assert st == before and result.kind == "steers"  # a toggle writes no status
    if expected == (T0, level, protected):
        assert result == Step(before, actions=actions, events=events, kind="steers" if actions else None)


GANG = spec(parallelism=2)


@pytest.mark.parametrize(
    ("pods", "status_", "actions", "written"),
    [
        # 20 minutes into a 30-minute period of 3 levels, protected from level 1: protection asked for.
        ((pod(0, protected=True), pod(1, protected=True)), running(T0, level=2, protected=True), (), None),
        ((pod(0, protected=True), pod(1)), running(T0, level=2, protected=True), (_protect(T0 + 10 * M),), None),
        ((pod(0), pod(1)), running(T0, level=2, protected=True), (_protect(T0 + 10 * M),), None),
        ((pod(0, protected=True), pod(1, "Succeeded")), running(T0, level=2, protected=True), (), None),
        ((pod(0, protected=True), pod(1, "Failed", exit_code=0)), running(T0, level=2, protected=True), (), None),
        # The pods carry the protection the status does not record yet (their toggle went out alone): the level
        # and the protection are written together.
        ((pod(0, protected=True), pod(1, protected=True)), running(T0, level=0, protected=False), (), (T0, 2, True)),
        ((pod(0, protected=True), pod(1, protected=True)), running(T0, level=2, protected=False), (), None),
        # Unlabelled pods toggle even when the level moved: the toggle first, the status after.
        ((pod(0), pod(1)), running(T0, level=0, protected=False), (_protect(T0 + 10 * M),), None),
    ],
    ids=["all-labelled", "one-pod-unlabelled", "none-labelled-status-says-protected", "ended-pod-ignored",
         "failed-pod-ignored", "level-written-with-protection", "stale-protected-alone-is-not-written",
         "toggle-before-level"],
)
def test_steering_compares_the_protection_with_the_pods_label(
    pods: tuple[PodView, ...], status_: ScavengerJobStatus, actions: tuple[SetProtection, ...],
    written: tuple[datetime, int, bool] | None,
) -> None:
    """What the run's pods carry is its protection, whatever the status records: pods that disagree carry
    neither, pods that ended are not looked at. A toggle writes no status; a status written for the level
    carries the level and the protection."""
    result = decide(GANG, status_, run_of(job(), *pods), now=T0 + 20 * M)
    assert result.actions == actions
    assert result.events == ((_protected_event(2),) if actions else ())
    if written is None:
        assert result.status == status_
    else:
        st = result.status
        assert (st.priority_start_over_timestamp, st.running_priority, st.protected) == written
        assert st == status_.model_copy(update={"running_priority": written[1], "protected": written[2]})
    assert result.kind == ("steers" if actions or written else None)


def test_a_new_period_at_the_same_level_moves_the_period_start() -> None:
    """30 min and 10 s after the run began, its second period is 10 s old: still level 0, new start."""
    before = running(NOW - 30 * M - 10 * S, level=0)
    result = decide(spec(duration="30m"), before, run_of(job(), pod(0)))
    assert result.status.priority_start_over_timestamp == NOW - 10 * S
    assert result.status.running_priority == 0
    assert result.actions == () and result.events == ()


def test_an_exempted_run_is_left_unprotected_and_says_why() -> None:
    """Level 2 of 3 asks for protection; steering exempts the run: no budget, and an Event saying so (posted
    each time: not a routine toggle)."""
    before = running(NOW - 21 * M, level=2, protected=True)
    result = step(spec(duration="30m"), before, run_of(job(), pod(0, protected=True)), NOW, CFG, sj_name=SJ,
                  exempt=True)
    assert result.status == before
    assert result.actions == (SetProtection(RUN1, False),)
    assert result.events == (Event("Normal", "Unprotected", f"run {RUN1} has the least unsaved work on its "
                                   "node(s): left unprotected so that a preemption there loses the least"),)


def test_a_run_past_its_period_loses_its_protection_with_a_reason() -> None:
    before = running(NOW - 30 * M - 10 * S, level=2, protected=True)
    result = decide(spec(duration="30m"), before, run_of(job(), pod(0, protected=True)))
    assert result.status == before  # the label toggles first; the level is written once the pod carries it
    assert result.actions == (SetProtection(RUN1, False, due=NOW - 10 * S),)
    assert result.events == (Event("Normal", "Unprotected", f"checkpoint period of 30m ended: run {RUN1} is no "
                                   "longer protected", routine=True),)
    after = decide(spec(duration="30m"), before, run_of(job(), pod(0)))
    assert after.status.protected is False and after.status.running_priority == 0 and after.actions == ()


@pytest.mark.parametrize(("exempt", "draining", "message"), [
    (False, True, f"run {RUN1} runs on a node being drained or removed: no protection, so the drain does not wait "
                  "on it"),
    (True, False, f"run {RUN1} has the least unsaved work on its node(s): left unprotected so that a preemption "
                  "there loses the least"),
], ids=["drain", "exemption"])
def test_a_drains_or_an_exemptions_unprotect_is_never_routine_even_once_the_period_began(
        exempt: bool, draining: bool, message: str) -> None:
    """The run's period began 10 s ago while its pod still carries the protection (its routine unprotect waited for
    the starts); its node is then drained, or steering exempts it: the unprotect is the drain's or the exemption's,
    with no ``due`` (it never waits for the starts) and an Event saying why, posted each time."""
    before = running(NOW - 30 * M - 10 * S, level=2, protected=True)
    result = step(spec(duration="30m"), before, run_of(job(), pod(0, protected=True)), NOW, CFG, sj_name=SJ,
                  exempt=exempt, draining=draining)
    assert result.actions == (SetProtection(RUN1, False),)
    assert result.events == (Event("Normal", "Unprotected", message),)


# ----------------------------------------------------------------------------- launch-time transitions


@pytest.mark.parametrize(("interrupted", "config_index", "shape"), [(0, 0, ""), (4, 2, "fallback 2, ")])
def test_a_launch_is_its_event_and_writes_nothing(interrupted: int, config_index: int, shape: str) -> None:
    before = status(Phase.PENDING if not interrupted else Phase.INTERRUPTED, attempt=interrupted,
                    interrupted_count=interrupted, not_before=NOW - S)
    run_name = run_job_name(SJ, interrupted + 1)
    result = launched(before, NOW, job_name=run_name, priority_class_name="scavenger-band-1", pods=3,
                      config_index=config_index)
    assert result.status is before, "the run is recorded by a later pass, with what its pods show"
    message = f"run {run_name} launched ({shape}3 pod(s), priority class scavenger-band-1)"
    assert result.events == (Event("Normal", "Launched", message),)
    assert result.actions == () and result.waiting is False


GANG = spec(parallelism=2)


@pytest.mark.parametrize(
    ("before", "pods", "now", "phase", "events", "waiting"),
    [
        pytest.param(ScavengerJobStatus(), (), NOW + S, None, (), False, id="new-sj-young-run-no-pods"),
        pytest.param(status(Phase.PENDING), (pod(0, "Pending", run=RUN1),), NOW + 9 * S, Phase.PENDING, (), False,
                     id="pod-pending-within-grace"),
        pytest.param(status(Phase.PENDING), (pod(0, run=RUN1),), NOW + S, Phase.RUNNING, ("Running",), False,
                     id="all-running-at-once"),
        pytest.param(ScavengerJobStatus(), (pod(0, run=RUN1),), NOW + 2 * S, Phase.RUNNING, ("Running",), False,
                     id="new-sj-all-running"),
        pytest.param(status(Phase.PENDING), (pod(0, run=RUN1), pod(1, "Pending", run=RUN1)), NOW + S, Phase.PENDING,
                     (), False, id="half-a-gang-within-grace"),
        pytest.param(status(Phase.PENDING), (pod(0, run=RUN1), pod(1, "Pending", run=RUN1)), NOW + 10 * S,
                     Phase.STARTING, ("Starting",), False, id="half-a-gang-past-grace"),
        pytest.param(status(Phase.PENDING), (pod(0, "Succeeded", run=RUN1), pod(1, "Succeeded", run=RUN1)),
                     NOW + 5 * S, Phase.SUCCEEDED, ("Succeeded",), False, id="finished-between-two-looks"),
    ],
)
def test_a_new_run_is_recorded_with_what_its_pods_show(
    before: ScavengerJobStatus, pods: tuple[PodView, ...], now: datetime, phase: Phase | None,
    events: tuple[str, ...], waiting: bool,
) -> None:
    """A launch writes no status: a later pass writes the run in, as Running when its pods all run (one
    write, not Starting then Running), Starting once `record_grace` (10 s here) passed without that, and
    nothing before (the run holds the SJ: it is not waiting)."""
    result = decide(GANG if len(pods) == 2 else spec(), before, run_of(job(RUN1, created=NOW, started=NOW), *pods),
                    now=now)
    st = result.status
    assert (st.phase, tuple(e.reason for e in result.events), result.waiting) == (phase, events, waiting)
    if phase in (None, Phase.PENDING):
        assert st is before, "nothing written within the grace"
        run = run_of(job(RUN1, created=NOW, started=NOW), *pods)
        assert quiet_until(spec(), before, now, run=run, cfg=CFG, sj_name=SJ) == NOW + record_grace(CFG), \
            "the same until the grace has passed"
        assert quiet_until(spec(), before, now, run=run) is None, "without its config and name: at every pass"
        return
    assert (st.attempt, st.job_name, st.launched_timestamp, st.priority_class_name) == (
        1, RUN1, NOW, launch_class(0))
    assert admitted_condition(st.conditions) is not None and admitted_condition(st.conditions).status == "True"
    if phase is Phase.RUNNING:
        assert st.running_timestamps == (now,) and st.priority_start_over_timestamp == now


@pytest.mark.parametrize(("created", "started", "recorded"), [
    (NOW - 30 * M, None, False),  # never taken up by the Job controller: however old, nothing to write
    (NOW - 30 * M, NOW - 9 * S, False),  # taken up late: its grace counts from then
    (NOW - 30 * M, NOW - 10 * S, True),
    (NOW - 5 * S, NOW - 30 * S, False),  # a startTime before the Job was made counts from the Job
    (NOW - 10 * S, NOW - 30 * S, True),
], ids=["not-taken-up", "taken-up-within-grace", "taken-up-past-grace", "clock-skew-within", "clock-skew-past"])
def test_a_new_run_is_recorded_as_starting_only_past_its_grace_after_the_job_controller_took_it_up(
        created: datetime, started: datetime | None, recorded: bool) -> None:
    """A controller-manager given thousands of Jobs may take minutes to reach a new run's: the run is not
    written as Starting meanwhile (its pods will run a moment after they are made: one write, as Running), and
    the step is quiet until its grace ends after the take-up, or for ever before it (only the Job's change,
    its startTime, can change the answer)."""
    before = status(Phase.PENDING, not_before=None)
    pods = () if started is None else (pod(0, "Pending", placed=started),)
    run = run_of(job(RUN1, created=created, started=started), *pods)
    result = decide(spec(), before, run)
    assert (result.status.phase == Phase.STARTING) is recorded
    assert [e.reason for e in result.events] == (["Starting"] if recorded else [])
    if not recorded:
        assert result.status == before
        until = quiet_until(spec(), before, NOW, run=run, cfg=CFG, sj_name=SJ)
        assert until == (FOREVER if started is None else max(started, created) + record_grace(CFG))


def _reached(phase: str, *, placed: timedelta | None, started: timedelta | None = None, bound: bool = True,
             index: int = 0) -> PodView:
    """A pod of the new run: looked at by the scheduler ``placed`` before now (None: not yet), bound to a node or
    not, taken up by that node's agent ``started`` before now (None: not yet)."""
    return replace(pod(index, phase, placed=None if placed is None else NOW - placed),
                   node="node-1" if bound else None, started=None if started is None else NOW - started)


RUNNING_LONG = _reached("Running", placed=M, started=M)
"""A gang member running since a minute ago (its Job made and taken up then)."""


@pytest.mark.parametrize(("pods", "recorded", "grace_from", "quiet"), [
    pytest.param((RUNNING_LONG, _reached("Pending", placed=None, bound=False, index=1)),
                 False, None, FOREVER, id="a-pod-the-scheduler-has-not-looked-at"),
    pytest.param((RUNNING_LONG, _reached("Pending", placed=M, index=1)),
                 False, None, FOREVER, id="a-bound-pod-its-node-has-not-taken-up"),
    pytest.param((_reached("Pending", placed=M, index=0), _reached("Pending", placed=30 * S, bound=False, index=1)),
                 False, None, NOW + 30 * S, id="a-bound-pod-its-node-has-not-taken-up-beside-one-found-no-room"),
    pytest.param((RUNNING_LONG, _reached("Pending", placed=M, started=9 * S, index=1)),
                 False, 9 * S, NOW + S, id="taken-up-by-its-node-within-grace"),
    pytest.param((RUNNING_LONG, _reached("Pending", placed=M, started=10 * S, index=1)),
                 True, 10 * S, None, id="taken-up-by-its-node-past-grace"),
    pytest.param((RUNNING_LONG, _reached("Pending", placed=9 * S, bound=False, index=1)),
                 False, 9 * S, NOW + S, id="found-no-room-within-grace"),
    pytest.param((RUNNING_LONG, _reached("Pending", placed=10 * S, bound=False, index=1)),
                 True, 10 * S, None, id="found-no-room-past-grace"),
    pytest.param((RUNNING_LONG,), True, M, None, id="a-pod-never-made"),
    pytest.param((_reached("Pending", placed=None, bound=False),), False, None, None,
                 id="a-pod-never-made-and-one-the-scheduler-has-not-looked-at"),
])
def test_a_new_runs_grace_counts_from_when_the_cluster_caught_up_with_it(
        pods: tuple[PodView, ...], recorded: bool, grace_from: timedelta | None, quiet: datetime | None) -> None:
    """A gang's run, its Job made and taken up a minute ago: its grace begins once every pod has been looked at
    by the scheduler (bound, or found no room) and, bound, taken up by its node's agent; while one has not, a
    scheduler or a node behind is not the SJ's news. ``quiet_until`` is the step's next move by time alone: the
    grace's end, or the start timeout of a pod the scheduler found no room for or of a pod never made (None:
    at every pass), and never a moment past it; FOREVER when only a change of the pods moves it (nothing times
    the run out). A pod never made is the SJ's news: once the pods made are reached, the grace counts from the
    take-up."""
    before = status(Phase.PENDING, not_before=None)
    run = run_of(job(RUN1, created=NOW - M, started=NOW - M), *pods)
    result = decide(GANG, before, run)
    assert (result.status.phase, [e.reason for e in result.events]) == (
        (Phase.STARTING, ["Starting"]) if recorded else (Phase.PENDING, []))
    assert record_from(run.job, run.pods, GANG.parallelism) == (None if grace_from is None else NOW - grace_from)
    if recorded:
        return
    assert result.status is before
    assert quiet_until(GANG, before, NOW, run=run, cfg=CFG, sj_name=SJ) == quiet
    later = decide(GANG, before, run, now=NOW + 30 * M)
    if quiet is FOREVER:
        assert later == result, "however long it waits so"
    elif grace_from is None:
        assert [e.reason for e in later.events] == ["StartTimeout"], "a timeout comes"
        if quiet is not None:
            assert decide(GANG, before, run, now=quiet - S) == result, "the same until then"
            assert [e.reason for e in decide(GANG, before, run, now=quiet).events] == ["StartTimeout"]


def test_record_grace_is_shorter_than_the_start_timeout() -> None:
    assert record_grace(LifecycleConfig()) == RECORD_GRACE
    assert record_grace(LifecycleConfig(start_timeout=timedelta(seconds=6))) == timedelta(seconds=3)


def test_a_run_in_a_fallback_configuration_is_recorded_and_judged_in_it() -> None:
    with_fallback = spec(parallelism=4, fallbacks=[{"parallelism": 2}])
    made = replace(job(RUN1, created=NOW), config_index=1)
    result = decide(with_fallback, status(Phase.PENDING), run_of(made, pod(0, run=RUN1), pod(1, run=RUN1)),
                    now=NOW + S)
    assert (result.status.phase, result.status.config_index) == (Phase.RUNNING, 1), "2 of the fallback's 2 pods run"


@pytest.mark.parametrize("reason", ["MissingReference", "InvalidSpec", "InvalidRun"])
def test_a_refused_launch_fails_the_sj_naming_why(reason: str) -> None:
    before = status(Phase.PENDING)
    result = launch_refused(before, NOW, reason, "persistentVolumeClaim \"data\" not found")  # type: ignore[arg-type]
    st = result.status
    assert st.phase == Phase.FAILED and st.finished_timestamp == NOW
    assert st.message == 'persistentVolumeClaim "data" not found'
    assert result.events == (Event("Warning", reason, 'persistentVolumeClaim "data" not found'),)
    assert true_conditions(st) == ["Failed"] and condition(st, "Failed").reason == reason


def test_running_priority_starts_its_period_when_none_is_recorded() -> None:
    before = running(NOW - M).model_copy(update={"priority_start_over_timestamp": None, "running_priority": None})
    result = decide(spec(), before, run_of(job(), pod(0)))
    assert result.status.priority_start_over_timestamp == NOW
    assert result.status.running_priority == 0
    assert result.actions == ()


@pytest.mark.parametrize(
    ("duration", "levels", "offset", "level"),
    [
        ("90s", 3, 29 * S, 0),
        ("90s", 3, 30 * S, 1),
        ("90s", 3, 89 * S, 2),
        ("2h", 4, 30 * M, 1),
        ("2h", 4, 119 * M, 3),
        ("2h", 1, 119 * M, 0),
    ],
    ids=["90s-level-0", "90s-level-1", "90s-level-2", "2h-4-levels-1", "2h-4-levels-3", "one-level"],
)
def test_running_priority_follows_the_spec(duration: str, levels: int, offset: timedelta, level: int) -> None:
    result = decide(spec(duration=duration, priorityLevels=levels), running(T0), run_of(job(), pod(0)),
                    now=T0 + offset, cfg=LifecycleConfig(protect_level=levels))
    assert result.status.running_priority == level
    assert result.status.priority_start_over_timestamp == T0


# ----------------------------------------------------------------------------- conditions


CONCERNS = ("Queued", "Running", "Complete", "Failed", "Suspended")


@pytest.mark.parametrize(
    ("phase", "true_type"),
    [
        (Phase.PENDING, "Queued"),
        (Phase.INTERRUPTED, "Queued"),
        (Phase.STARTING, None),
        (Phase.RUNNING, "Running"),
        (Phase.SUCCEEDED, "Complete"),
        (Phase.FAILED, "Failed"),
        (Phase.SUSPENDED, "Suspended"),
    ],
    ids=lambda v: str(v),
)
def test_one_concern_condition_is_true_per_phase(phase: Phase, true_type: str | None) -> None:
    """Every phase sets one concern True and the rest False, whatever it comes from; Starting is the one
    in-between phase (no longer queued, not yet running) and reports Running=False instead."""
    for previous in Phase:
        old = set_conditions((), previous, "Before", "before", NOW - M)
        new = set_conditions(old, phase, "Now", "now", NOW)
        assert [c.type for c in new if c.status == "True"] == ([true_type] if true_type else [])
        assert len({c.type for c in new}) == len(new)
        assert {c.type for c in new} <= set(CONCERNS)
        if true_type is None:
            assert next(c for c in new if c.type == "Running").status == "False"
        assert all(c.status in ("True", "False") for c in new)


T1, T2, T3 = NOW - 3 * M, NOW - 2 * M, NOW - M


def cond(ctype: str, status_: str, reason: str, message: str, at: datetime) -> Condition:
    return Condition(type=ctype, status=status_, reason=reason, message=message, last_transition_time=at)


@pytest.mark.parametrize(
    ("old", "phase", "expected"),
    [
        ((), Phase.PENDING, (cond("Queued", "True", "R", "m", NOW),)),
        ((), Phase.STARTING, (cond("Running", "False", "R", "m", NOW),)),
        ((cond("Queued", "True", "Queued", "q", T1),), Phase.PENDING,
         (cond("Queued", "True", "R", "m", T1),)),
        ((cond("Queued", "True", "Queued", "q", T1),), Phase.STARTING,
         (cond("Queued", "False", "R", "", NOW), cond("Running", "False", "R", "m", NOW))),
        ((cond("Queued", "False", "Launched", "", T2), cond("Running", "False", "Launched", "l", T2)), Phase.RUNNING,
         (cond("Queued", "False", "Launched", "", T2), cond("Running", "True", "R", "m", NOW))),
        ((cond("Queued", "False", "Launched", "", T2), cond("Running", "True", "Running", "r", T3)),
         Phase.INTERRUPTED,
         (cond("Queued", "True", "R", "m", NOW), cond("Running", "False", "R", "", NOW))),
        ((cond("Queued", "True", "Interrupted", "i", T1), cond("Running", "False", "Interrupted", "", T1)),
         Phase.INTERRUPTED,
         (cond("Queued", "True", "R", "m", T1), cond("Running", "False", "Interrupted", "", T1))),
        ((cond("Queued", "False", "Launched", "", T2), cond("Running", "True", "Running", "r", T3)), Phase.SUCCEEDED,
         (cond("Queued", "False", "Launched", "", T2), cond("Running", "False", "R", "", NOW),
          cond("Complete", "True", "R", "m", NOW))),
        ((cond("Queued", "False", "Launched", "", T2), cond("Running", "True", "Running", "r", T3)), Phase.SUSPENDED,
         (cond("Queued", "False", "Launched", "", T2), cond("Running", "False", "R", "", NOW),
          cond("Suspended", "True", "R", "m", NOW))),
        ((cond("Queued", "False", "Launched", "", T2), cond("Suspended", "True", "Suspended", "s", T3)),
         Phase.PENDING,
         (cond("Queued", "True", "R", "m", NOW), cond("Suspended", "False", "R", "", NOW))),
        ((cond("Queued", "True", "Queued", "q", T1), cond("Admitted", "True", "X", "x", T1)), Phase.FAILED,
         (cond("Queued", "False", "R", "", NOW), cond("Failed", "True", "R", "m", NOW),
          cond("Admitted", "True", "X", "x", T1))),
    ],
    ids=["first-pending", "first-starting", "pending-again", "pending-to-starting", "starting-to-running",
         "running-to-interrupted", "interrupted-again", "running-to-succeeded", "running-to-suspended",
         "suspended-to-pending", "other-condition-kept"],
)
def test_set_conditions_moves_transition_time_only_when_status_flips(
    old: tuple[Condition, ...], phase: Phase, expected: tuple[Condition, ...]
) -> None:
    assert set_conditions(old, phase, "R", "m", NOW) == expected


def test_conditions_follow_a_whole_lifecycle() -> None:
    queued = decide(spec(), ScavengerJobStatus(), now=T1).status
    adopted = decide(spec(), queued, run_of(job(RUN1, created=T1, started=T1)), now=T2).status
    started = decide(spec(), adopted, run_of(job(), pod(0)), now=T3).status
    done = decide(spec(), started, run_of(job(complete=True), pod(0, "Succeeded"))).status

    times = {c.type: (c.status, c.last_transition_time) for c in done.conditions}
    assert times == {
        "Queued": ("False", T2),
        "Running": ("False", NOW),
        "Complete": ("True", NOW),
        "Admitted": ("True", T2),
    }
    assert [p.phase for p in (queued, adopted, started, done)] == [
        Phase.PENDING, Phase.STARTING, Phase.RUNNING, Phase.SUCCEEDED]


# ----------------------------------------------------------------------------- idempotence


@pytest.mark.parametrize(
    ("spec_", "before", "run", "now"),
    [
        (spec(), running(T0, level=1, protected=True), run_of(job(), pod(0, protected=True)), T0 + 15 * M),
        (spec(), running(T0, level=0, protected=False), run_of(job(), pod(0)), T0 + 10 * M),
        (spec(), running(T0, level=2, protected=True), run_of(job(), pod(0, protected=True)), T0 + 30 * M),
        (spec(), ScavengerJobStatus(), NO_RUN, NOW),
        (spec(), status(Phase.PENDING), NO_RUN, NOW),
        (spec(), status(Phase.INTERRUPTED, interrupted_count=2, not_before=NOW + M), NO_RUN, NOW),
        (spec(), starting(), run_of(job(), pod(0, "Pending")), NOW),
        (spec(), starting(), run_of(job(), pod(0)), NOW),
        (spec(), running(NOW - M), run_of(job(complete=True), pod(0, "Succeeded")), NOW),
        (spec(), running(NOW - M), run_of(job(), pod(0, "Failed", exit_code=1)), NOW),
        (spec(), status(Phase.SUCCEEDED, job_name=RUN1, finished_timestamp=NOW - M), NO_RUN, NOW),
        (spec(suspend=True), running(NOW - M), run_of(job(deleting=True), pod(0, deleting=True)), NOW),
        (spec(), running(NOW - M, message=f"interrupting: {PREEMPTION_CAUSE}"),
         run_of(job(deleting=True), pod(0, deleting=True)), NOW),
        (invalid_spec(parallelism=0), status(Phase.PENDING), NO_RUN, NOW),
    ],
    ids=["running-mid-period", "running-protects", "running-period-boundary", "first-sight", "pending-waiting",
         "interrupted-backing-off", "starting-pod-pending", "starting-to-running", "succeeds", "fails",
         "succeeded", "suspends", "interrupting-run-stopping", "invalid-spec"],
)
def test_step_is_idempotent(
    spec_: ScavengerJobSpec | InvalidSpec, before: ScavengerJobStatus, run: Run, now: datetime
) -> None:
    """Once a step is carried out (its status written, its pods labelled), the next one does nothing again. A
    protection toggle goes out alone: the level is written by the step after it, which is then the same."""
    first = decide(spec_, before, run, now=now)
    run = carried_out(run, first.actions)
    again = decide(spec_, first.status, run, now=now)
    assert again.actions == ()
    assert again.events == ()
    assert again.waiting == first.waiting
    if any(isinstance(a, SetProtection) for a in first.actions):
        first, again = again, decide(spec_, again.status, run, now=now)
        assert again.actions == () and again.events == ()
    assert again.status == first.status


def carried_out(run: Run, actions: Sequence[DeleteRun | SetProtection]) -> Run:
    """The run as the cluster shows it once its protection toggles are carried out: its pods labelled."""
    for action in actions:
        if isinstance(action, SetProtection):
            run = replace(run, pods=tuple(p if p.terminal else replace(p, protected=action.protected)
                                          for p in run.pods))
    return run


@pytest.mark.parametrize(
    ("before", "run", "now", "waiting"),
    [
        (running(T0, level=1, protected=True), run_of(job(), pod(0, protected=True)), T0 + 15 * M, False),
        (status(Phase.PENDING), NO_RUN, NOW, True),
        (status(Phase.SUCCEEDED, job_name=RUN1, finished_timestamp=NOW - M), NO_RUN, NOW, False),
        (status(Phase.SUCCEEDED, job_name=RUN1, finished_timestamp=NOW - M), run_of(job(complete=True),
                                                                                  pod(0, "Succeeded")), NOW, False),
    ],
    ids=["running-mid-period", "pending-waiting", "succeeded", "succeeded-run-kept"],
)
def test_steady_states_change_nothing(before: ScavengerJobStatus, run: Run, now: datetime, waiting: bool) -> None:
    assert decide(spec(), before, run, now=now) == Step(before, waiting=waiting)


def test_same_inputs_same_decision() -> None:
    args = (spec(parallelism=2), running(NOW - M), run_of(job(), pod(0, disruption=PREEMPTION), pod(1)))
    assert decide(*args) == decide(*args)


# ----------------------------------------------------------------------------- MPI success


@pytest.mark.parametrize(
    ("run", "phase", "actions"),
    [
        # The launcher succeeded; the Job has not said so yet and the workers still run sshd.
        (run_of(job(), pod(0, "Succeeded"), pod(1), pod(2)), Phase.SUCCEEDED,
         (DeleteRun(RUN1, "succeeded; the rest of the gang is cleaned up"),)),
        # The Job controller already stops the workers after SuccessCriteriaMet: not an interruption.
        (run_of(job(), pod(0, "Succeeded"), pod(1, deleting=True), pod(2, deleting=True)), Phase.SUCCEEDED,
         (DeleteRun(RUN1, "succeeded; the rest of the gang is cleaned up"),)),
        (run_of(job(complete=True), pod(0, "Succeeded"), pod(1, deleting=True), pod(2)), Phase.SUCCEEDED, ()),
        # A worker finishing first means nothing: the launcher decides.
        (run_of(job(), pod(0), pod(1, "Succeeded"), pod(2)), Phase.RUNNING, ()),
    ],
    ids=["launcher-succeeded", "workers-being-stopped", "job-says-complete", "worker-done-first"],
)
def test_mpi_run_succeeds_when_its_launcher_does(run: Run, phase: Phase, actions: tuple[DeleteRun, ...]) -> None:
    mpi_spec = spec(parallelism=3, command=["mpirun"], mpi={"slotsPerWorker": 1})
    result = decide(mpi_spec, running(NOW - M), run)
    assert result.status.phase == phase
    assert result.actions == actions


MPI = {"slotsPerWorker": 1}


@pytest.mark.parametrize(
    ("run", "phase"),
    [
        # mpirun forwarded SIGTERM, the ranks checkpointed and it exited 0: saved, not finished.
        (run_of(job(complete=True), pod(0, "Succeeded", disruption=PREEMPTION, disrupted_at=NOW - 9 * S,
                                        finished=NOW - 5 * S), pod(1, "Failed", exit_code=143), pod(2)),
         Phase.RUNNING),
        (run_of(job(complete=True), pod(0, "Succeeded", disruption=PREEMPTION, disrupted_at=NOW - 9 * S,
                                        finished=NOW - 5 * S), pod(1, "Failed", exit_code=143),
                pod(2, "Failed", exit_code=143)),
         Phase.INTERRUPTED),
        # A worker was preempted first; the launcher then exited 0 (it saved what the ranks had).
        (run_of(job(), pod(0, "Succeeded", finished=NOW - 5 * S),
                pod(1, "Failed", exit_code=0, disruption=PREEMPTION, disrupted_at=NOW - 20 * S),
                pod(2, "Failed", exit_code=143)),
         Phase.INTERRUPTED),
        # The launcher had finished before a worker was preempted during the clean-up: a real success.
        (run_of(job(), pod(0, "Succeeded", finished=NOW - 20 * S),
                pod(1, "Failed", exit_code=143, disruption=PREEMPTION, disrupted_at=NOW - 5 * S)),
         Phase.SUCCEEDED),
        # Same second: counted as disrupted before.
        (run_of(job(), pod(0, "Succeeded", finished=NOW - 5 * S),
                pod(1, "Failed", exit_code=143, disruption=PREEMPTION, disrupted_at=NOW - 5 * S),
                pod(2, "Failed", exit_code=143)),
         Phase.INTERRUPTED),
        # Times unknown: the safe side is an interruption (re-running from a checkpoint loses nothing).
        (run_of(job(), pod(0, "Succeeded"), pod(1, "Failed", exit_code=143, disruption=PREEMPTION),
                pod(2, "Failed", exit_code=143)),
         Phase.INTERRUPTED),
        (run_of(job(), pod(0, "Succeeded", finished=NOW - 5 * S),
                pod(1, "Failed", exit_code=143, disruption=PREEMPTION), pod(2, "Failed", exit_code=143)),
         Phase.INTERRUPTED),
    ],
    ids=["launcher-disrupted-gang-stopping", "launcher-disrupted-exit-0", "worker-disrupted-before-launcher-exit",
         "worker-disrupted-after-launcher-exit", "same-second", "no-times", "no-disruption-time"],
)
def test_mpi_disrupted_exit_zero(run: Run, phase: Phase) -> None:
    """What a disrupted exit 0 of an MPI launcher means: success only when the launcher finished
    before any member of the gang was told to stop."""
    result = decide(spec(parallelism=3, command=["mpirun"], mpi=MPI), running(NOW - M), run)
    assert result.status.phase == phase
    if phase == Phase.INTERRUPTED:
        assert result.status.interrupted_count == 1
        assert "PreemptionByScheduler" in result.status.message
    if phase == Phase.RUNNING:
        assert result.actions == (DeleteRun(RUN1, PREEMPTION_CAUSE),)


# ----------------------------------------------------------------------------- disrupted exit 0


@pytest.mark.parametrize(
    ("parallelism", "run"),
    [
        (1, run_of(job(complete=True), pod(0, "Succeeded", disruption=PREEMPTION))),
        (1, run_of(job(), pod(0, "Succeeded", disruption=PREEMPTION))),
        (1, run_of(None, pod(0, "Succeeded", disruption=PREEMPTION))),
        (3, run_of(job(complete=True), pod(0, "Succeeded", disruption=PREEMPTION), pod(1, "Succeeded"),
                   pod(2, "Succeeded"))),
        (2, run_of(job(), pod(0, "Succeeded", disruption=PREEMPTION, deleting=True), pod(1, "Succeeded"))),
    ],
    ids=["job-complete", "job-not-yet-complete", "job-not-seen", "gang-job-complete", "pod-being-removed"],
)
def test_a_disrupted_pod_that_exited_zero_is_an_interruption_not_a_success(parallelism: int, run: Run) -> None:
    """An app that checkpoints on SIGTERM and exits 0 after a preemption has not finished."""
    result = decide(spec(parallelism=parallelism), running(NOW - M), run)

    st = result.status
    assert st.phase == Phase.INTERRUPTED
    assert st.interrupted_count == 1
    assert st.finished_timestamp is None
    assert st.message == f"interrupted (1, PreemptionByScheduler): {PREEMPTION_CAUSE}; waiting to run again"
    assert "Succeeded" not in reasons(result)
    assert result.waiting is True


@pytest.mark.parametrize(
    ("failed_at", "phase"),
    [
        (NOW - 30 * S, Phase.FAILED),        # it failed on its own first
        (NOW - 10 * S, Phase.INTERRUPTED),   # it failed because its peer had been preempted
        (NOW - 20 * S, Phase.INTERRUPTED),   # the same second: the safe side
        (None, Phase.INTERRUPTED),
    ],
    ids=["failed-before-disruption", "failed-after-disruption", "same-second", "time-unknown"],
)
def test_a_gang_member_failing_after_a_peer_was_disrupted_is_collateral(failed_at: datetime | None,
                                                                        phase: Phase) -> None:
    run = run_of(job(), pod(0, "Failed", exit_code=137, disruption=PREEMPTION, disrupted_at=NOW - 20 * S),
                 pod(1, "Failed", exit_code=1, finished=failed_at))
    result = decide(spec(parallelism=2), running(NOW - M), run)
    assert result.status.phase == phase


def test_a_disrupted_gang_member_that_exited_zero_cancels_the_rest() -> None:
    run = run_of(job(), pod(0, "Succeeded", disruption=PREEMPTION), pod(1), pod(2, "Succeeded"))
    result = decide(spec(parallelism=3), running(NOW - M), run)
    assert result.status.phase == Phase.RUNNING
    assert result.actions == (DeleteRun(RUN1, PREEMPTION_CAUSE),)
    assert reasons(result) == ["Interrupting"]


@pytest.mark.parametrize(
    ("before", "run"),
    [
        # Every pod exited 0 but the Job is being deleted and never said Complete: not a success.
        (running(NOW - M), run_of(job(deleting=True), pod(0, "Succeeded"))),
        (running(NOW - M), run_of(job(deleting=True), pod(0, "Succeeded"), pod(1, "Succeeded"))),
    ],
    ids=["single", "gang"],
)
def test_pods_succeeded_in_a_deleted_job_is_not_a_success(before: ScavengerJobStatus, run: Run) -> None:
    result = decide(spec(parallelism=len(run.pods)), before, run)
    assert result.status.phase == Phase.INTERRUPTED
    assert result.status.message == f"interrupted (1, Deleted): run {RUN1} was deleted; waiting to run again"


def test_a_removed_pod_that_had_succeeded_is_not_an_interruption() -> None:
    """The garbage collector or the Job controller removing a finished member disrupts nothing."""
    before = running(NOW - M)
    run = run_of(job(), pod(0, "Succeeded", deleting=True), pod(1))
    assert decide(spec(parallelism=2), before, run) == Step(before)


@pytest.mark.parametrize(
    "phase",
    ["Running", "Pending", "Unknown"],
)
def test_a_non_zero_exit_counts_as_a_failure_only_once_the_pod_failed(phase: str) -> None:
    """A container that stopped with a code while the pod is not Failed (a sidecar, a restart) is not
    the run's failure."""
    before = running(NOW - M)
    run = run_of(job(), pod(0, phase, all_running=False, exit_code=1), pod(1))
    result = decide(spec(parallelism=2), before, run)
    assert result.status.phase == Phase.RUNNING
    assert result.actions == ()


def test_run_that_finished_between_two_looks_records_when_its_pods_ran() -> None:
    """Starting -> Succeeded directly (it ran while no operator was active): the pods' start time
    is recorded as the run's running timestamp; a run seen Running records nothing more."""

    ran = replace(pod(0, "Succeeded"), started=NOW - 30 * S)
    result = decide(spec(), starting(), run_of(job(complete=True), ran))
    assert result.status.phase == Phase.SUCCEEDED
    assert result.status.running_timestamps == (NOW - 30 * S,)

    seen = running(NOW - M)
    result = decide(spec(), seen, run_of(job(complete=True), ran))
    assert result.status.running_timestamps == seen.running_timestamps


def test_a_member_deleted_from_outside_and_gone_before_a_pass_is_still_the_cause() -> None:
    """The pass sees the Job Failed (its backoff limit) and the deleted member only as remembered."""
    from sj_operator.observed import remember_disrupted, with_disrupted

    seen: dict[Any, PodView] = {}
    remember_disrupted(seen, pod(1, deleting=True))
    failed = job(failed=True, failure="BackoffLimitExceeded: Job has reached the specified backoff limit")
    pods, _ = with_disrupted({("work", RUN1): (pod(0), pod(2))}, seen, {("work", RUN1): failed})
    result = decide(spec(parallelism=3), running(NOW - M), run_of(failed, *pods[("work", RUN1)]))
    assert result.actions == (DeleteRun(RUN1, f"pod {RUN1}-1 was deleted"),)


@pytest.mark.parametrize(
    ("launched_ago", "taken_up_ago", "pods", "timed_out", "says"),
    [
        (2 * M, 2 * M, [(0, 30 * S), (1, 30 * S)], False, ""),
        (2 * M, 2 * M, [(0, 90 * S), (1, 60 * S)], True, "(2 of 2 not running)"),
        (2 * M, 2 * M, [(0, 90 * S), (1, 59 * S)], False, ""),
        (2 * M, 2 * M, [(0, 2 * M)], False, ""),
        (5 * M - S, 5 * M - S, [(0, 5 * M)], False, ""),
        (5 * M, 5 * M, [(0, 5 * M)], True, "1 never made"),
        (20 * M, None, [], False, ""),
        (20 * M, None, [(0, 5 * M)], False, ""),
        (20 * M, 5 * M - S, [(0, 5 * M)], False, ""),
        (20 * M, 5 * M, [], True, "2 never made"),
        (5 * M, 10 * M, [(0, 5 * M)], True, "1 never made"),
        (2 * M, 2 * M, [(0, 2 * M), (1, None)], False, ""),
        (5 * M - S, None, [(0, 5 * M), (1, None)], False, ""),
        (5 * M, None, [(0, 5 * M), (1, None)], False, ""),
        (60 * M, 60 * M, [(0, None), (1, None)], False, ""),
        (5 * M, 5 * M, [(0, None)], True, "1 never made, 1 never looked at by the scheduler"),
    ],
    ids=["pods-placed-late", "last-pod-placed-60s-ago", "last-pod-placed-59s-ago", "a-pod-not-made-yet",
         "pods-missing-just-under-five-timeouts", "pods-missing-five-timeouts",
         "job-controller-never-took-it-up", "job-controller-not-yet-but-one-pod-made",
         "taken-up-late-just-under-five-timeouts", "taken-up-late-five-timeouts",
         "taken-up-before-the-launch-counts-from-the-launch", "a-pod-not-placed-yet",
         "unplaced-just-under-five-timeouts", "unplaced-five-timeouts-waits-for-the-scheduler",
         "none-looked-at-for-an-hour-waits-for-the-scheduler", "missing-and-unplaced"],
)
def test_start_timeout_counts_from_when_the_scheduler_decided_about_the_last_pod(
    launched_ago: timedelta, taken_up_ago: timedelta | None, pods: list[tuple[int, timedelta | None]],
    timed_out: bool, says: str
) -> None:
    """A control plane slow to make or schedule the Job's pods does not time the run out (the clock starts
    when the scheduler bound the last pod or found no room for it): pods all made but not all looked at by
    the scheduler wait for it however long its backlog is; a run whose pods are never all made does time
    out, after five start timeouts from when the Job controller took the Job up (its ``startTime``), and
    not at all while it has not."""
    made = [pod(i, "Pending", placed=None if ago is None else NOW - ago) for i, ago in pods]
    taken_up = None if taken_up_ago is None else NOW - taken_up_ago
    result = decide(spec(parallelism=2), starting(launched=NOW - launched_ago), run_of(job(started=taken_up), *made))
    assert (result.actions == (DeleteRun(RUN1, "start timeout"),)) is timed_out
    assert says in (result.status.message or "")


@pytest.mark.parametrize(
    ("bound_ago", "unschedulable_ago", "timed_out", "says"),
    [
        ([2 * M, 2 * M], None, False, ""),
        ([5 * M - S, 6 * M], None, False, ""),
        ([5 * M, 6 * M], None, True, "within 5m (2 of 2 not running, all bound to nodes)"),
        ([5 * M], 60 * S, True, "within 1m (2 of 2 not running)"),
        ([5 * M], 59 * S, False, ""),
    ],
    ids=["bound-two-minutes-ago", "last-bound-just-under-five-timeouts", "last-bound-five-timeouts",
         "one-bound-one-without-room-60s", "one-bound-one-without-room-59s"],
)
def test_pods_bound_but_not_started_wait_five_start_timeouts_from_the_last_binding(
    bound_ago: list[timedelta], unschedulable_ago: timedelta | None, timed_out: bool, says: str
) -> None:
    """Pods bound to nodes and taken up by their kubelets are the nodes' work (an image pull may take
    minutes, and the run holds no room it cannot use): they time out after five start timeouts from the
    last binding. A pod the scheduler found no room for still times the run out after one."""
    made = [replace(pod(i, "Pending", placed=NOW - ago), node="node-1", started=NOW - ago)
            for i, ago in enumerate(bound_ago)]
    if unschedulable_ago is not None:
        made.append(pod(len(made), "Pending", placed=NOW - unschedulable_ago))
    result = decide(spec(parallelism=2), starting(launched=NOW - 10 * M), run_of(job(started=NOW - 10 * M), *made))
    assert (result.actions == (DeleteRun(RUN1, "start timeout"),)) is timed_out
    assert says in (result.status.message or "")


@pytest.mark.parametrize(
    ("started", "phase", "timed_out"),
    [
        ((NOW - 20 * M, NOW - 20 * M), "Pending", True),
        ((NOW - 20 * M, None), "Pending", False),
        ((None, None), "Pending", False),
        ((NOW - 20 * M, None), "Failed", True),
    ],
    ids=["both-taken-up", "one-not-taken-up", "none-taken-up", "the-unacknowledged-one-ended"],
)
def test_pods_their_kubelet_has_not_taken_up_wait_for_it(
    started: tuple[datetime | None, datetime | None], phase: str, timed_out: bool
) -> None:
    """Bound 20 minutes ago (four times the limit for bound pods): a pod without ``startTime`` waits for its
    node's kubelet, whose node's health decides (a lost node's pods are evicted: an interruption); once
    every live pod was taken up, or the one that was not has ended, the limit applies again."""
    made = (replace(pod(0, "Pending", placed=NOW - 20 * M), node="node-1", started=started[0]),
            replace(pod(1, phase, placed=NOW - 20 * M), node="node-1", started=started[1]))
    result = decide(spec(parallelism=2), starting(launched=NOW - 30 * M), run_of(job(started=NOW - 30 * M), *made))
    assert (result.actions == (DeleteRun(RUN1, "start timeout"),)) is timed_out


@pytest.mark.parametrize(("running", "interrupted", "ran"), [
    ((), (), 0),
    ((50,), (), 50),
    ((50,), (60,), 50),  # interrupted before this run began
    ((50,), (50,), 50),  # began at the instant of the interruption: a run of its own
    ((50,), (40,), 0),  # interrupted after it began: not running now
    ((50, 20), (40,), 20),  # running again since the interruption
    ((50, 20), (60, 40, 10), 0),  # the last interruption came after the last start
], ids=repr)
def test_a_run_has_run_since_its_last_start_after_the_last_interruption(
        running: tuple[int, ...], interrupted: tuple[int, ...], ran: int) -> None:
    """``running``, ``interrupted``: minutes before now, oldest first."""
    st = ScavengerJobStatus(running_timestamps=tuple(NOW - m * M for m in running),
                            interrupted_timestamps=tuple(NOW - m * M for m in interrupted))
    assert ran_for(st, NOW) == ran * M
