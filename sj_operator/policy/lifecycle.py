"""The ScavengerJob state machine: a pure function from what is observed to what to do.

`step` looks at one SJ (its parsed spec, its status, the Job and pods of its
current run) at an injected `now`, and returns the new status, the actions to
carry out and the Events to record. It never calls the API; `controller.py`
carries the result out. Admission (whether a waiting SJ may start) is decided
cluster-wide by `policy.admission`; here an SJ only says it is waiting.

Outcomes are read from what Kubernetes reports, never guessed:
  * a pod has DisruptionTarget (preemption, eviction, node
    lost), or was deleted from outside, or the Job was         -> the whole run is cancelled;
    deleted, whatever the exit codes: an app that                 once none of its pods holds
    checkpoints on SIGTERM and exits 0 is interrupted,            resources: Interrupted (+1)
    not finished
  * every pod of the run succeeded (or the Job is Complete)
    and none was disrupted; MPI: the launcher exited 0
    before any member was disrupted                           -> Succeeded
  * a container exited non-zero in a pod nobody disrupted,
    before any member of the run was disrupted                -> Failed
  * not all pods running within the start timeout (counted   -> the run is deleted, the SJ
    from when the scheduler decided about its last pod; pods      waits again with backoff,
    the scheduler has not looked at yet wait for it, and pods     no interruption counted
    bound to a node whose kubelet has not taken them up wait
    for it)
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Literal, NamedTuple

from sj_operator.api import (
    InvalidSpec,
    Phase,
    ScavengerJobSpec,
    ScavengerJobStatus,
    format_duration,
)
from sj_operator.api.status import InterruptionReason
from sj_operator.names import run_job_name
from sj_operator.observed import JobView, PodView
from sj_operator.policy.conditions import WaitReason, admitted_condition, set_admitted, set_conditions
from sj_operator.policy.outcomes import Action, DeleteRun, Event, Run, SetProtection, Step, StepKind
from sj_operator.policy.priority import (
    current_period_start,
    launch_class,
    protection_begins,
    protection_expired,
    run_clock,
    steady_until,
)
from sj_operator.settings import (
    DEFAULT_MAX_PROTECTION,
    DEFAULT_MAX_RETRY_BACKOFF,
    DEFAULT_MAX_THRASH_BACKOFF,
    DEFAULT_PROTECT_LEVEL,
    DEFAULT_RETRY_BACKOFF,
    DEFAULT_START_TIMEOUT,
    DEFAULT_THRASH_BACKOFF,
    check_backoff_cap,
    check_non_negative,
    check_positive,
)

__all__ = [
    "FOREVER",
    "MISSING_RUN_GRACE",
    "RECORD_GRACE",
    "TERMINAL",
    "WAITING",
    "Action",
    "DeleteRun",
    "Event",
    "Hold",
    "LifecycleConfig",
    "Run",
    "SetProtection",
    "Step",
    "StepKind",
    "capped_doubling",
    "held_again",
    "holds",
    "launch_refused",
    "launched",
    "next_run",
    "quiet_until",
    "record_from",
    "record_grace",
    "recorded_until",
    "refusal_reason",
    "retry_delay",
    "step",
    "waiting_phase",
]

WAITING = (Phase.PENDING, Phase.INTERRUPTED)
TERMINAL = (Phase.SUCCEEDED, Phase.FAILED)

# How long a run recorded in status may be missing from the watch cache before it
# counts as lost (the SJ and Job watches are separate streams).
MISSING_RUN_GRACE = timedelta(seconds=15)
DISRUPTED_JOB_MARKER = "condition DisruptionTarget"
"""In the message of a Job that its podFailurePolicy failed for a disrupted pod."""
MISSING_PODS_FACTOR = 5
"""A run whose Job has not made all its pods yet, or whose pods are all bound but not all running yet,
times out after this many start timeouts (the start timeout itself counts from when the scheduler decided
about its last pod, for a run with a pod it found no room for). Missing pods count from when the Job
controller took the Job up, bound ones from the last binding. Pods the scheduler has not looked at yet
never time the run out: they wait for the scheduler."""


@dataclass(frozen=True)
class LifecycleConfig:
    start_timeout: timedelta = DEFAULT_START_TIMEOUT
    retry_backoff: timedelta = DEFAULT_RETRY_BACKOFF
    max_retry_backoff: timedelta = DEFAULT_MAX_RETRY_BACKOFF
    protect_level: int = DEFAULT_PROTECT_LEVEL
    max_protection: timedelta = DEFAULT_MAX_PROTECTION
    thrash_backoff: timedelta = DEFAULT_THRASH_BACKOFF
    """Wait before the next run after a wasted one (interrupted within its first checkpoint period)."""
    max_thrash_backoff: timedelta = DEFAULT_MAX_THRASH_BACKOFF

    def __post_init__(self) -> None:
        check_positive(self.start_timeout)
        check_positive(self.retry_backoff)
        check_backoff_cap(self.max_retry_backoff, self.retry_backoff)
        check_non_negative(self.protect_level)
        check_positive(self.max_protection)
        if self.thrash_backoff < timedelta(0):
            raise ValueError("thrash_backoff must not be negative (0 turns it off)")
        check_backoff_cap(self.max_thrash_backoff, self.thrash_backoff)


@dataclass
class _Builder:
    status: ScavengerJobStatus
    now: datetime
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def update(self, **changes: object) -> None:
        self.status = self.status.model_copy(update=changes)

    def event(self, type_: Literal["Normal", "Warning"], reason: str, message: str, *, routine: bool = False) -> None:
        self.events.append(Event(type_, reason, message, routine))

    def transition(self, phase: Phase, reason: str, message: str, *, warning: bool = False, **changes: object) -> None:
        conditions = set_conditions(self.status.conditions, phase, reason, message, self.now)
        self.update(phase=phase, message=message, conditions=conditions, **changes)
        self.event("Warning" if warning else "Normal", reason, message)

    def admitted(self, admitted: bool, reason: str, message: str) -> None:
        self.update(conditions=set_admitted(self.status.conditions, admitted, reason, message, self.now))

    def done(self, waiting: bool = False, kind: StepKind | None = None, *, backing_off: bool = False) -> Step:
        return Step(self.status, tuple(self.actions), tuple(self.events), waiting, kind, backing_off)


def launched(status: ScavengerJobStatus, now: datetime, *, job_name: str, priority_class_name: str,
             pods: int, config_index: int = 0) -> Step:
    """The admitted SJ's next run was created: its ``Launched`` Event, and nothing to write. The run is
    the record until a later pass writes it into the status (``step``: once all its pods run, as Running,
    or after `record_grace` as Starting), so a run that starts at once costs one status write, not two."""
    shape = f"fallback {config_index}, " if config_index else ""
    message = f"run {job_name} launched ({shape}{pods} pod(s), priority class {priority_class_name})"
    return Step(status, events=(Event("Normal", "Launched", message),))


RECORD_GRACE = timedelta(seconds=10)
"""How long a new run may go unrecorded in its SJ's status while its pods start (see `record_grace`)."""


def record_grace(cfg: LifecycleConfig) -> timedelta:
    """How long after the cluster caught up with it (`record_from`) a run whose pods are not all running yet is
    written into its SJ's status as Starting: `RECORD_GRACE`, or half the start timeout when that is shorter (a
    run is recorded as Starting before it can time out)."""
    return min(RECORD_GRACE, cfg.start_timeout / 2)


def record_from(job: JobView, pods: Iterable[PodView], expected: int) -> datetime | None:
    """When a new run's `record_grace` begins: once the cluster has caught up with it; None until then. The Job
    controller must have taken its Job up (its ``status.startTime``, which it sets as it makes the pods), and every pod
    made must have been taken up where it is going: the scheduler looked at it (bound it, or found no room:
    ``PodScheduled``) and, bound, its node's agent acknowledged it (its ``startTime``). A run with all ``expected`` pods
    counts from when the last of them was so; one still missing pods, from the take-up (pods the Job controller could
    not make, a namespace's policy refusing them, are the SJ's news). Never before the Job was made. Until then the run
    is not the SJ's news (its ``Launched`` Event is): a controller-manager given thousands of new Jobs may take minutes
    to reach this one, a scheduler as long to look at its pods and a node's agent to take them up, and writing the run
    as Starting meanwhile would be a second status write and Event per SJ, when its pods run a moment after the cluster
    reaches them (a burst of 10,000 SJs on two cores: 8,700 writes and as many Events more, to a control plane busy
    starting their pods). A scheduler or nodes behind never time the run out (`_starting`); pods never made, and
    pods the scheduler found no room for, do (`_unrecorded_until`)."""
    if job.started is None:
        return None
    taken_up = max(job.started, job.created) if job.created is not None else job.started
    reached, made = taken_up, 0
    for p in pods:
        if p.deleting:
            continue
        if p.placed is None or (p.node is not None and p.started is None and p.phase == "Pending"):
            return None  # the scheduler, or the pod's node, has not reached it yet
        reached, made = max(reached, p.placed if p.started is None else max(p.placed, p.started)), made + 1
    return taken_up if made < expected else reached


LaunchRefusal = Literal["MissingReference", "InvalidSpec", "InvalidRun"]


def launch_refused(status: ScavengerJobStatus, now: datetime, reason: LaunchRefusal, message: str) -> Step:
    """The admitted SJ can never run as it is (a missing reference, a run the API server rejects): it
    fails, naming why; no run exists."""
    b = _Builder(status, now)
    b.transition(Phase.FAILED, reason, message, warning=True, finished_timestamp=now)
    return b.done()


NamespaceRefusal = Literal["QuotaExceeded", "BackingOff", "NameTaken"]
"""Why a launch was held back: the namespace's quota or another of its rules refused the run (its pods in a
dry run, or one of its objects when made), or an object of a name the run needs is not the SJ's."""


def refusal_reason(message: str) -> NamespaceRefusal:
    """The reason an SJ waits when the API server refused its run with ``message``: ``QuotaExceeded`` for a
    ResourceQuota (of pods' resources or of a kind's count, ``count/jobs.batch``), else ``BackingOff``."""
    return "QuotaExceeded" if "exceeded quota" in message else "BackingOff"


def waiting_for_room(status: ScavengerJobStatus, now: datetime, reason: WaitReason, message: str) -> ScavengerJobStatus:
    """The waiting SJ's ``Admitted=False`` condition says why it waits, with the numbers."""
    return status.model_copy(update={"conditions": set_admitted(status.conditions, False, reason, message, now)})


def launch_forbidden(status: ScavengerJobStatus, now: datetime, reason: NamespaceRefusal, message: str) -> Step:
    """The SJ's namespace would refuse the run's pods or refused one of its objects (a ResourceQuota, Pod
    Security, another admission rule), or a name the run needs is someone else's object: no run is made (and
    nothing is taken or deleted); the SJ keeps waiting in its place, saying why. Nothing is written again while
    the refusal stays the same, so a refusal repeated at every retry costs no writes."""
    b = _Builder(status, now)
    current = admitted_condition(status.conditions)
    if current is None or (current.status, current.reason, current.message) != ("False", reason, message):
        b.admitted(False, reason, message)
        b.update(message=message)
        b.event("Warning", reason, message)
    return b.done(waiting=True)


def waiting_phase(status: ScavengerJobStatus) -> Phase:
    return Phase.INTERRUPTED if status.interrupted_count > 0 else Phase.PENDING


def capped_doubling(first: timedelta, times: int, cap: timedelta) -> timedelta:
    """The wait after the ``times``-th failure in a row: ``first``, doubled for each failure after the first,
    at most ``cap``; none before the first."""
    if times <= 0:
        return timedelta(0)
    return min(first * (1 << min(times - 1, 30)), cap)


def retry_delay(failures: int, cfg: LifecycleConfig) -> timedelta:
    """Backoff after the n-th start timeout, or the n-th launch held back in a row (the controller's
    refusals): retry_backoff * 2^(n-1), capped."""
    return capped_doubling(cfg.retry_backoff, failures, cfg.max_retry_backoff)


class Hold(NamedTuple):
    """Something refused, held back before it is tried again: until when (monotonic seconds), after how many
    refusals in a row (an SJ its namespace refused, `write.gate`; an adopted Job whose SJ was refused,
    `adopter`)."""
    until: float
    refusals: int


def held_again(hold: Hold | None, clock: float, cfg: LifecycleConfig) -> tuple[Hold, timedelta]:
    """The hold after one more refusal in a row at ``clock`` (monotonic seconds), ``hold`` the one so far (None:
    the first), and its wait: `retry_delay`, so it doubles per refusal up to the cap. The caller forgets the hold
    when what was refused succeeds or is gone, and the next refusal starts the waits over."""
    refusals = (hold.refusals if hold is not None else 0) + 1
    delay = retry_delay(refusals, cfg)
    return Hold(clock + delay.total_seconds(), refusals), delay


def holds(hold: Hold | None, clock: float) -> bool:
    """Whether ``hold`` still holds back at ``clock`` (monotonic seconds)."""
    return hold is not None and hold.until > clock


def step(
    spec: ScavengerJobSpec | InvalidSpec,
    status: ScavengerJobStatus,
    run: Run,
    now: datetime,
    cfg: LifecycleConfig,
    *,
    sj_name: str,
    exempt: bool = False,
    draining: bool = False,
) -> Step:
    """One reconciliation of one SJ. Pure: same inputs, same result.

    ``exempt``: victim steering leaves this run unprotected whatever its level
    (`policy.priority.steering_exemptions`); ``draining``: one of its nodes is being drained or
    removed (`policy.priority.draining_nodes`), so it holds no protection."""
    b = _Builder(status, now)
    if isinstance(spec, InvalidSpec):
        return _invalid_spec(b, spec, run)
    phase = status.phase
    if phase in TERMINAL:
        # A failed gang may still have members running: nothing of it stays.
        if run.job is not None and not run.job.deleting and run.holds_resources:
            b.actions.append(DeleteRun(run.job.name, f"the SJ is {phase.value}"))
        return b.done()
    if spec.suspend or phase == Phase.SUSPENDED:
        return _suspension(b, spec, run)
    if phase is None or phase in WAITING:
        return _waiting(b, spec, run, sj_name, cfg, exempt, draining)
    return _active(b, spec, run, cfg, exempt, draining)


FOREVER = datetime.max.replace(tzinfo=UTC)
"""``quiet_until`` of a result only a change of its inputs can change."""


def quiet_until(spec: ScavengerJobSpec | InvalidSpec, status: ScavengerJobStatus, now: datetime, *,
                run: Run | None = None, cfg: LifecycleConfig | None = None,
                sj_name: str | None = None) -> datetime | None:
    """Until when (exclusive) ``step``, having found nothing to do for these inputs at ``now``, finds the same as time
    goes on: ``FOREVER`` when only a change of the inputs can change it; None when the answer moves with time in ways
    not tracked here (a starting run's start timeout, a run the watch does not show yet), so it is computed at every
    pass. A running SJ (given its ``run`` and ``cfg``) is quiet until its level, its period or its protection's expiry
    moves (``priority.steady_until``), for the same ``exempt`` and ``draining``. A waiting SJ whose next run exists but
    is not written into its status yet (given its ``run``, ``cfg`` and ``sj_name``) is quiet until `record_grace` has
    passed since the cluster caught up with the run (`record_from`; `_record`), and never past its start timeout
    (`_start_clock`), and until a change before that (None while a pod the Job controller never made may time the run
    out meanwhile). A decision loop may reuse the quiet result until then."""
    if isinstance(spec, InvalidSpec):
        return FOREVER if status.phase == Phase.FAILED else None
    phase = status.phase
    if phase in TERMINAL or spec.suspend or phase == Phase.SUSPENDED:
        return FOREVER
    if phase is None or phase in WAITING:
        if run is not None and (job := run.job) is not None:
            # A run to record (the launch this process just made, or one to adopt). Another run (an old
            # one still stopping) is decided at every pass.
            if cfg is not None and sj_name is not None and next_run(run, status, sj_name) is not None:
                return _unrecorded_until(job, run.pods, spec.launched_config(job.config_index).parallelism, cfg,
                                         now)
            return None
        # Waiting with no run to adopt: the only clock is the backoff, which makes it eligible.
        return status.not_before if status.not_before is not None and status.not_before > now else FOREVER
    if (phase == Phase.RUNNING and run is not None and run.job is not None and cfg is not None
            and status.priority_start_over_timestamp is not None):
        return steady_until(now, status.priority_start_over_timestamp, spec.duration, spec.priority_levels,
                            cfg.protect_level, cfg.max_protection)
    return None


def _unrecorded_until(job: JobView, pods: Sequence[PodView], expected: int, cfg: LifecycleConfig,
                      now: datetime) -> datetime | None:
    """``quiet_until`` of a waiting SJ whose next run is not written into its status yet: its grace's end once the
    cluster caught up with the run (`record_from`), and never past the earliest moment its start timeout could come
    (`_start_clock`, from the Job's making as `_record` counts it). Until the cluster has caught up, only a change of
    the Job or its pods changes the answer, unless a start timeout counts meanwhile: then until it comes, or at every
    pass (None) while pods are missing."""
    since = record_from(job, pods, expected)
    grace_end = FOREVER if since is None else since + record_grace(cfg)
    live = [p for p in pods if not p.deleting]
    clock = _start_clock(job, live, expected, job.created or now, cfg)
    if clock is None:
        return grace_end
    if since is None and len(live) < expected:
        return None  # pods never made time the run out (`MISSING_PODS_FACTOR`), decided at every pass
    return min(grace_end, clock[0] + clock[1])


def recorded_until(spec: ScavengerJobSpec | InvalidSpec, status: ScavengerJobStatus, result: Step, *, run: Run,
                   cfg: LifecycleConfig, sj_name: str) -> datetime | None:
    """Until when (exclusive) ``result``, which writes a waiting SJ's new run into its status (Starting or
    Running, `_record`) and does nothing else, is what ``step`` gives for the same inputs but for the moments
    it stamps (the conditions' transitions; for Running, its first running time and period start): those of
    the first step stand for the later ones, as when its pods were first seen running. The run's start
    timeout is the first thing time alone changes (`_starting` counts from the run's creation at the
    earliest). A decision loop that holds such a record back may reuse it until then; None for any other
    result."""
    job = next_run(run, status, sj_name)
    if (isinstance(spec, InvalidSpec) or not (status.phase is None or status.phase in WAITING) or job is None
            or job.created is None or result.actions or result.status.phase not in (Phase.STARTING, Phase.RUNNING)):
        return None
    return job.created + cfg.start_timeout


def next_run(run: Run, status: ScavengerJobStatus, sj_name: str) -> JobView | None:
    """The run of the SJ's next attempt, when it exists and is not being deleted: the one a waiting SJ's
    step writes into its status (`_record`) rather than launching it again."""
    job = run.job
    if job is None or job.deleting or job.name != run_job_name(sj_name, status.attempt + 1):
        return None
    return job


def _invalid_spec(b: _Builder, spec: InvalidSpec, run: Run) -> Step:
    if b.status.phase != Phase.FAILED:
        _cancel(b, run, f"invalid spec: {spec}")
        b.transition(Phase.FAILED, "InvalidSpec", f"invalid spec: {spec}", warning=True,
                     finished_timestamp=b.now, running_priority=None)
    return b.done()


def _suspension(b: _Builder, spec: ScavengerJobSpec, run: Run) -> Step:
    """Suspending cancels the current run; resuming waits until it has stopped, then queues again."""
    suspended = b.status.phase == Phase.SUSPENDED
    if spec.suspend:
        if not suspended:
            _cancel(b, run, "suspended")
            b.transition(Phase.SUSPENDED, "Suspended", "suspended: spec.suspend is true; the current run, if any, "
                         "was cancelled", running_priority=None, protected=False)
            b.admitted(False, "Suspended", "spec.suspend is true: nothing runs until it is false")
        return b.done()
    if run.holds_resources:
        return b.done()  # the cancelled run is still stopping
    b.transition(waiting_phase(b.status), "Resumed", "resumed: spec.suspend is false; waiting for idle capacity")
    return _queued(b)


def _waiting(b: _Builder, spec: ScavengerJobSpec, run: Run, sj_name: str, cfg: LifecycleConfig, exempt: bool,
             draining: bool) -> Step:
    st = b.status
    # A run for the next attempt exists: it is recorded in the status, not launched again (`launched`
    # leaves the recording to this; after an operator restart it is the same).
    if (job := next_run(run, st, sj_name)) is not None:
        return _record(b, spec, run, job, cfg, exempt, draining)
    if st.phase is None:
        b.transition(Phase.PENDING, "Queued", "waiting for idle capacity")
        return b.done(waiting=True, kind="queues")
    return _queued(b)


def _queued(b: _Builder) -> Step:
    """A waiting SJ with no run: eligible once its backoff has passed; until then in the queue, its room held,
    only while it backs off after a wasted run (not after a start timeout)."""
    st = b.status
    eligible = st.not_before is None or st.not_before <= b.now
    return b.done(waiting=eligible, backing_off=not eligible and after_wasted_run(st))


def after_wasted_run(status: ScavengerJobStatus) -> bool:
    """Whether the SJ's backoff (``not_before``) is the anti-thrash one: its last run was wasted
    (`_record_interruption`) and none was launched since, so it is not a start timeout's."""
    interrupted = status.interrupted_timestamps
    return (status.wasted_runs > 0 and bool(interrupted)
            and (status.launched_timestamp is None or status.launched_timestamp <= interrupted[-1]))


def _record(b: _Builder, spec: ScavengerJobSpec, run: Run, job: JobView, cfg: LifecycleConfig, exempt: bool,
            draining: bool) -> Step:
    """The waiting SJ's next run, written into its status together with what its pods show: Running when
    they all run (Succeeded, Failed, Interrupted when they have ended); Starting once `record_grace` has
    passed since the cluster caught up with the run (`record_from`: its Job taken up, its pods looked at by the
    scheduler and acknowledged by their nodes) without that. Until then nothing is written (the run holds the
    SJ: it is not waiting)."""
    st, launched_at = b.status, job.created or b.now
    b.update(phase=Phase.STARTING, attempt=st.attempt + 1, job_name=job.name, launched_timestamp=launched_at,
             priority_class_name=launch_class(st.interrupted_count), not_before=None,
             config_index=job.config_index)
    message = f"run {job.name} launched"
    b.admitted(True, "Launched", message)
    spec = spec.launched_config(job.config_index)
    result = _active(b, spec, run, cfg, exempt, draining)
    if result.status.phase is not Phase.STARTING or result.events:
        # Running at once is a plain record; a run that already ended, failed or was cancelled is not.
        plain = result.status.phase is Phase.RUNNING and not result.actions
        return replace(result, kind="records-run") if plain else result
    if (since := record_from(job, run.pods, spec.parallelism)) is None or b.now - since < record_grace(cfg):
        return Step(st)
    running = sum(1 for p in run.pods if p.all_running and not p.deleting)
    b.transition(Phase.STARTING, "Starting", f"{message}; {running} of {spec.parallelism} pod(s) running")
    return b.done(kind="records-run")


def _active(b: _Builder, spec: ScavengerJobSpec, run: Run, cfg: LifecycleConfig, exempt: bool,
            draining: bool) -> Step:
    """A launched run, in this order: success, failure, interruption, start, then running priority."""
    if _succeeded(spec, run):
        return _success(b, run)
    failed = _failure(run, b.status)
    if failed is not None:
        if run.holds_resources:  # the rest of a gang stops; the failed run stays for inspection
            _cancel(b, run, "a gang member failed")
        b.transition(Phase.FAILED, "Failed", failed, warning=True, finished_timestamp=b.now,
                     running_priority=None, protected=False)
        return b.done()
    cause = _disruption(run, b.status, b.now)
    if cause is not None:
        return _interruption(b, spec, run, cause, cfg)
    if run.job is None:
        return b.done()  # launched moments ago; the watch has not shown the Job yet
    if b.status.phase == Phase.STARTING:
        return _starting(b, spec, run, run.job, cfg)
    # Running: progress inside the current checkpoint period.
    return _running_priority(b, spec, run, cfg, exempt, draining)


def _success(b: _Builder, run: Run) -> Step:
    st, job = b.status, run.job
    running_timestamps = st.running_timestamps
    started = [p.started for p in run.pods if p.started is not None]
    if st.phase == Phase.STARTING and started:
        # It ran and finished between two looks (e.g. while no operator was active): the pods say when.
        running_timestamps = (*running_timestamps, max(started))
    b.transition(Phase.SUCCEEDED, "Succeeded", f"run {st.job_name} succeeded",
                 finished_timestamp=b.now, running_priority=None, protected=False,
                 running_timestamps=running_timestamps)
    if job is not None and run.holds_resources and not job.deleting and not job.complete:
        b.actions.append(DeleteRun(job.name, "succeeded; the rest of the gang is cleaned up"))
    return b.done()


def _failure(run: Run, st: ScavengerJobStatus) -> str | None:
    """Why the run failed: a container exited non-zero in a pod that nobody disrupted, before any member
    of the run was disrupted (a gang member that fails because another was preempted is collateral)."""
    for pod in run.pods:
        if pod.disruption or pod.deleting or pod.phase != "Failed":
            continue
        bad = next((t for t in pod.terminations if t.exit_code != 0), None)
        if bad is not None and not _disrupted_by(run.pods, pod.finished):
            return (f"run {st.job_name} failed: pod {pod.name} container {bad.container} "
                    f"exited with code {bad.exit_code}" + (f" ({bad.reason})" if bad.reason else ""))
    return None


def _interruption(b: _Builder, spec: ScavengerJobSpec, run: Run, cause: str, cfg: LifecycleConfig) -> Step:
    """The whole run is cancelled; the interruption is recorded once none of its pods holds resources."""
    st, job = b.status, run.job
    if job is not None and not job.deleting:
        b.actions.append(DeleteRun(job.name, cause))
        b.event("Warning", "Interrupting", f"run {st.job_name} is cancelled: {cause}")
        b.update(message=f"interrupting: {cause}")
    if run.holds_resources:
        return b.done()  # recorded once every pod has stopped (after its grace period)
    # The cause seen when the run was cancelled beats what is left to see now.
    stored = st.message or ""
    return _record_interruption(b, spec, stored.removeprefix("interrupting: ")
                                if stored.startswith("interrupting: ") else cause, cfg)


def _start_clock(job: JobView, live: Sequence[PodView], expected: int, launched_at: datetime,
                 cfg: LifecycleConfig) -> tuple[datetime, timedelta] | None:
    """When a launched run's start timeout counts from and how long it is (`_starting`, and `_unrecorded_until`
    for a run not written into its status yet); None while nothing times it out. ``live``: its pods not being
    deleted."""
    if len(live) >= expected and all(p.placed is not None for p in live):
        # The clock starts once the scheduler has decided about every pod (bound it, or found no room): a
        # busy control plane that is slow to make or schedule them is not the run's fault (timing out
        # would only make it busier). Once every pod is bound, what is left is the nodes' work (pulling
        # images, mounting volumes): minutes for a large image, and the run holds no room it cannot use,
        # so that waits as long as pods not yet made.
        bound = all(p.node is not None for p in live)
        # A bound pod whose node's agent has not taken it up yet (no ``startTime``) waits for it: the node's
        # health decides (a lost node is tainted and its pods evicted, which interrupts the run), and a retry
        # would only add to a busy kubelet's queue (at 10,000 SJs, kwok's: 1,668 needless retries in 31 min).
        if bound and any(p.started is None and not p.terminal for p in live):
            return None
        since = max(launched_at, *(p.placed or launched_at for p in live))
        return since, cfg.start_timeout * (MISSING_PODS_FACTOR if bound else 1)
    # Pods not all made or not all looked at by the scheduler wait longer. Missing pods count from when
    # the Job controller took the Job up; until it has, the run waits (a controller-manager given
    # thousands of new Jobs may take minutes to reach this one, and a retry would only add to its queue).
    # Pods all made but not all looked at by the scheduler wait for it: a scheduler behind is not the
    # run's fault, and a retry would only add to its queue (at 10,000 SJs: hundreds of needless retries).
    if len(live) >= expected or job.started is None:
        return None
    return max(launched_at, job.started), cfg.start_timeout * MISSING_PODS_FACTOR


def _starting(b: _Builder, spec: ScavengerJobSpec, run: Run, job: JobView, cfg: LifecycleConfig) -> Step:
    """Running once every pod runs; past the start timeout the run is deleted and retried with backoff."""
    st, expected = b.status, spec.parallelism
    running = sum(1 for p in run.pods if p.all_running and not p.deleting)
    if running >= expected:
        b.transition(Phase.RUNNING, "Running", f"run {st.job_name}: all {expected} pod(s) running",
                     running_timestamps=(*st.running_timestamps, b.now),
                     priority_start_over_timestamp=b.now, running_priority=0, protected=False,
                     start_timeouts=0, not_before=None)
        return b.done()
    live = [p for p in run.pods if not p.deleting]
    clock = _start_clock(job, live, expected, st.launched_timestamp or job.created or b.now, cfg)
    if clock is not None and b.now - clock[0] >= clock[1]:
        limit = clock[1]
        unplaced = sum(1 for p in live if p.placed is None)
        if len(live) >= expected and not unplaced:
            missing = ", all bound to nodes" if all(p.node is not None for p in live) else ""
        else:
            missing = "".join([f", {expected - len(live)} never made" if len(live) < expected else "",
                               f", {unplaced} never looked at by the scheduler" if unplaced else ""])
        reason = (f"run {st.job_name} did not have all pods running within "
                  f"{format_duration(limit)} ({expected - running} of {expected} not running{missing}); "
                  f"it was deleted and will be retried")
        timeouts = st.start_timeouts + 1
        b.actions.append(DeleteRun(job.name, "start timeout"))
        not_before = b.now + retry_delay(timeouts, cfg)
        b.transition(waiting_phase(st), "StartTimeout", reason, warning=True, start_timeouts=timeouts,
                     not_before=not_before, running_priority=None)
        b.admitted(False, "StartTimeout", f"{timeouts} start timeout(s) in a row: the last run did not have all "
                   f"{expected} pod(s) running within {format_duration(limit)}; next try after "
                   f"{not_before.isoformat()}")
    return b.done()


def _succeeded(spec: ScavengerJobSpec, run: Run) -> bool:
    """A run succeeds only if its pods ended without a disruption. An app that checkpoints on SIGTERM
    and exits 0 after a preemption has not finished: its run is an interruption (step 3).

    MPI: the launcher (index 0) carries the outcome. Its exit 0 counts when it finished before any
    member of the gang was disrupted (itself included): mpirun that exits 0 after the gang was told
    to stop has saved its work, not finished it. Workers stopped after the launcher succeeded (the
    Job's successPolicy, or a preemption during that clean-up) do not change the outcome."""
    pods = run.pods
    if spec.mpi is not None:
        launcher = next((p for p in pods if p.index == 0 and p.phase == "Succeeded"), None)
        if launcher is not None:
            return not _disrupted_by(pods, launcher.finished)
    if any(p.disruption is not None for p in pods):
        return False
    if run.job is not None and run.job.complete:
        return True
    succeeded = sum(1 for p in pods if p.phase == "Succeeded")
    return succeeded >= spec.parallelism and not job_deleted(run.job)


def _disrupted_by(pods: Sequence[PodView], moment: datetime | None) -> bool:
    """Some pod was disrupted at or before ``moment``; an unknown time on either side counts as before
    (a lost success is re-run from its checkpoint; a lost interruption would lose the work)."""
    for pod in pods:
        if pod.disruption is None:
            continue
        if moment is None or pod.disrupted_at is None or pod.disrupted_at <= moment:
            return True
    return False


def job_deleted(job: JobView | None) -> bool:
    return job is None or job.deleting


def _disruption(run: Run, st: ScavengerJobStatus, now: datetime) -> str | None:
    for pod in run.pods:
        if pod.disruption is not None:
            reason, message = pod.disruption
            return f"pod {pod.name}: {reason}" + (f" ({message})" if message else "")
    for pod in run.pods:
        # A Failed pod counts too: deleted from outside, it may be seen only once it has stopped.
        if pod.deleting and pod.phase != "Succeeded" and run.job is not None and not run.job.deleting:
            return f"pod {pod.name} was deleted"
    if run.job is not None and run.job.deleting:
        return f"run {run.job.name} was deleted"
    if run.job is not None and run.job.failed:
        # The Job failed but no pod shows why (its pods are gone): treat it as
        # lost work, never as the application's failure.
        if DISRUPTED_JOB_MARKER in run.job.failure:
            # Its podFailurePolicy ended it for a disrupted pod that left before anyone looked (e.g. while
            # no operator ran): who disrupted it is gone with the pod.
            return f"run {run.job.name} was ended by a disrupted pod that is gone ({run.job.failure})"
        return f"run {run.job.name} ended without a visible cause ({run.job.failure})"
    if run.job is None:
        launched = st.launched_timestamp
        if launched is None or now - launched >= MISSING_RUN_GRACE:
            return f"run {st.job_name} disappeared"
    return None


_DISRUPTION_REASONS: tuple[tuple[str, InterruptionReason], ...] = (
    ("PreemptionByScheduler", "PreemptionByScheduler"), ("PreemptionByKubeScheduler", "PreemptionByScheduler"),
    ("EvictionByEvictionAPI", "EvictionByEvictionAPI"), ("DeletionByTaintManager", "DeletionByTaintManager"),
    ("TerminationByKubelet", "TerminationByKubelet"), ("DeletionByPodGC", "NodeLost"),
    ("ended without a visible cause", "NodeLost"))


def interruption_reason(cause: str) -> InterruptionReason:
    """The kind of an interruption from its cause: the pods' DisruptionTarget reason where Kubernetes set
    one; a run whose pods vanished without one lost its node; anything else was deleted."""
    return next((reason for marker, reason in _DISRUPTION_REASONS if marker in cause), "Deleted")


def lost_work(running: Sequence[datetime], interrupted: Sequence[datetime], duration: timedelta) -> list[timedelta]:
    """The estimated work each interruption lost: the time since the run's last checkpoint period began
    (the run checkpoints every ``duration`` from when all its pods ran). A run interrupted before it ran
    lost nothing."""
    out = []
    for i, at in enumerate(interrupted):
        after = interrupted[i - 1] if i else None
        # Timestamps have one-second resolution: the next run may have been running within the second of
        # the record (strictly before ``at``), and right after the previous one (from ``after`` on).
        started = [r for r in running if r < at and (after is None or r >= after)]
        out.append((at - started[-1]) % duration if started else timedelta(0))
    return out


def ran_for(status: ScavengerJobStatus, now: datetime) -> timedelta:
    """How long the current run has had all its pods running (0 if it never did)."""
    after = status.interrupted_timestamps[-1] if status.interrupted_timestamps else None
    starts = [r for r in status.running_timestamps if after is None or r >= after]
    return now - starts[-1] if starts else timedelta(0)


def thrash_delay(wasted_runs: int, cfg: LifecycleConfig) -> timedelta:
    """Backoff after the n-th wasted run in a row: thrash_backoff * 2^(n-1), capped (none when it is 0)."""
    return capped_doubling(cfg.thrash_backoff, wasted_runs, cfg.max_thrash_backoff)


def _record_interruption(b: _Builder, spec: ScavengerJobSpec, cause: str, cfg: LifecycleConfig) -> Step:
    st = b.status
    # A run interrupted before it completed one checkpoint period saved nothing: wasted. After one, the SJ
    # backs off (keeping its place in the queue), so a workload that preempts every new run at once does
    # not burn the room over and over.
    ran = ran_for(st, b.now)
    wasted = st.wasted_runs + 1 if ran < spec.duration and cfg.thrash_backoff else 0
    delay = thrash_delay(wasted, cfg)
    count = st.interrupted_count + 1
    stamps = (*st.interrupted_timestamps, b.now)
    b.update(last_interruption_reason=interruption_reason(cause))
    if spec.max_interruptions is not None and count > spec.max_interruptions:
        b.transition(Phase.FAILED, "TooManyInterruptions",
                     f"too many interruptions ({count} > maxInterruptions {spec.max_interruptions}); last: {cause}",
                     warning=True, interrupted_count=count, interrupted_timestamps=stamps,
                     finished_timestamp=b.now, running_priority=None, protected=False)
        return b.done()
    b.transition(Phase.INTERRUPTED, "Interrupted",
                 f"interrupted ({count}, {interruption_reason(cause)}): {cause}; waiting to run again",
                 warning=True, interrupted_count=count, interrupted_timestamps=stamps,
                 running_priority=None, protected=False, wasted_runs=wasted,
                 not_before=b.now + delay if delay else None)
    if not delay:
        return b.done(waiting=True)
    b.admitted(False, "BackingOff", f"run {st.job_name} was interrupted after {format_duration(ran)}, before it "
               f"completed a checkpoint period of {format_duration(spec.duration)} ({wasted} wasted run(s) in a "
               f"row): the next run starts no earlier than {(b.now + delay).isoformat()}")
    return b.done(waiting=False, backing_off=True)


def _running_priority(b: _Builder, spec: ScavengerJobSpec, run: Run, cfg: LifecycleConfig, exempt: bool,
                      draining: bool) -> Step:
    """Victim steering's bookkeeping of a running run. The protection it wants is compared with what its pods'
    label carries (`Run.carries`: the label is the protection, the budget selects by it); when they differ, the
    step is the toggle alone (`SetProtection` and its Event), the status left as it is. Once the pods carry it,
    the level and the period start are written when they moved, with the protection: the status's
    ``runningPriority`` and ``protected`` are a record, never read back as the run's state (the level comes from
    the period start and the clock)."""
    st = b.status
    start = st.priority_start_over_timestamp or b.now
    clock = run_clock(b.now, start, spec.duration, spec.priority_levels, cfg.protect_level)
    period_start, level, by_level = clock.period_start, clock.level, clock.protected
    expired = by_level and protection_expired(b.now, start, spec.duration, spec.priority_levels, cfg.protect_level,
                                              cfg.max_protection)
    protect = by_level and not exempt and not draining and not expired
    if not run.carries(protect):
        # A drain's and an exemption's unprotect say so, and are never routine (they never wait for the starts),
        # even when the run's period began meanwhile.
        _toggle(b, spec, cfg, protect, start, level, exempt=exempt, draining=draining, expired=expired)
        return b.done(kind="steers")
    if period_start != st.priority_start_over_timestamp or level != st.running_priority:
        b.update(priority_start_over_timestamp=period_start, running_priority=level, protected=protect)
    return b.done(kind="steers" if b.status is not st else None)


def _toggle(b: _Builder, spec: ScavengerJobSpec, cfg: LifecycleConfig, protect: bool, start: datetime, level: int,
            *, exempt: bool, draining: bool, expired: bool) -> None:
    """The run's protection toggled, with the Event saying why. The routine ones (protected by its level, or no
    longer at a new period) say when the run's clock asked for them, and their Events are counted into one per
    SJ and reason (`Event.routine`)."""
    st = b.status
    if protect:
        due = protection_begins(b.now, start, spec.duration, spec.priority_levels, cfg.protect_level)
        b.actions.append(SetProtection(st.job_name or "", True, due=due))
        b.event("Normal", "Protected", f"running priority {level} of {spec.priority_levels}: run "
                f"{st.job_name} is protected by a PodDisruptionBudget", routine=True)
        return
    if draining:
        message = (f"run {st.job_name} runs on a node being drained or removed: no protection, so the drain does "
                   f"not wait on it")
    elif expired:
        message = (f"run {st.job_name} was protected for {format_duration(cfg.max_protection)}, the most a run may "
                   f"hold its budget in one period")
    elif exempt:
        message = (f"run {st.job_name} has the least unsaved work on its node(s): left unprotected so that a "
                   f"preemption there loses the least")
    else:
        due = current_period_start(b.now, start, spec.duration)
        b.actions.append(SetProtection(st.job_name or "", False, due=due))
        b.event("Normal", "Unprotected", f"checkpoint period of {format_duration(spec.duration)} ended: run "
                f"{st.job_name} is no longer protected", routine=True)
        return
    b.actions.append(SetProtection(st.job_name or "", False))
    b.event("Normal", "Unprotected", message)


def _cancel(b: _Builder, run: Run, reason: str) -> None:
    if run.job is not None and not run.job.deleting:
        b.actions.append(DeleteRun(run.job.name, reason))
