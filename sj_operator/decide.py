"""One decision pass, without I/O: from what the watches show to what each SJ should become.

``observe_one`` pairs a handled SJ with its parsed spec, its status (as this process last wrote it,
when the watch lags) and its current run (`memo.PassMemo.observe` does so for every SJ, reusing what did
not change); ``decide`` runs the state machine for each, with victim steering's exemptions; the helpers
below make the admission snapshot's entries (a waiting SJ, a run in flight, the namespaces' quotas), which
`memo.PassMemo.admission` puts together. ``controller.Controller`` carries the results out.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress
from operator import is_not
from typing import Any, TypeVar, cast

from sj_operator.api import InvalidSpec, Phase, ScavengerJobSpec, ScavengerJobStatus
from sj_operator.names import run_job_name
from sj_operator.observed import (
    AdoptedJob,
    ClusterQuotaView,
    JobView,
    NamespaceView,
    NodeInfo,
    PodView,
    QuotaView,
    SJObject,
)
from sj_operator.policy.lifecycle import WAITING, LifecycleConfig, Run, Step, step
from sj_operator.policy.outcomes import NO_RUN
from sj_operator.policy.priority import RunClock, RunProgress, draining_nodes, run_clock, steering_exemptions
from sj_operator.policy.snapshot import (
    InFlightRun,
    QueuedSJ,
    Resources,
    Shape,
    frozen_labels,
)
from sj_operator.policy.tenancy import NO_DEFAULTS, EffectiveQuotas, QuotaDefaults, effective_quotas
from sj_operator.resources import freeze, resources_milli

RunKey = tuple[str, str]
K = TypeVar("K")
V = TypeVar("V")
OwnedRun = tuple[str, RunKey]
"""A run as an SJ points at it: the SJ's uid, and the run's (namespace, name)."""


@dataclass(frozen=True)
class ClusterView:
    """What the watches show at one moment (the handlers keep it current)."""

    sjs: tuple[SJObject, ...]
    jobs: Mapping[RunKey, JobView]
    run_pods: Mapping[RunKey, tuple[PodView, ...]]
    active_pods: tuple[PodView, ...]
    """Every non-terminated pod in the cluster, scheduled or not."""
    nodes: tuple[NodeInfo, ...]
    quotas: tuple[QuotaView, ...] = ()
    """Every ScavengerQuota (namespaced)."""
    adopted: tuple[AdoptedJob, ...] = ()
    """Jobs labelled for adoption."""
    cluster_quotas: tuple[ClusterQuotaView, ...] = ()
    """Every ScavengerClusterQuota."""
    namespaces: tuple[NamespaceView, ...] = ()
    """Every namespace with its labels, for the cluster quotas' selectors (may be left empty while there are
    no cluster quotas)."""


@dataclass(frozen=True, slots=True)
class Observed:
    """One SJ as this pass sees it."""

    sj: SJObject
    resource_version: str
    """The version the decision is based on; a write with it fails if the SJ changed since."""
    raw_status: Mapping[str, Any]
    status: ScavengerJobStatus
    spec: ScavengerJobSpec | InvalidSpec
    run: Run
    """Its current run: the one its status names, or the next one while it waits (to adopt it)."""


@dataclass(frozen=True, slots=True)
class Decided:
    """What the state machine decided for one observed SJ."""

    observed: Observed
    step: Step


@dataclass(frozen=True)
class Observation:
    sjs: tuple[Observed, ...]
    known_runs: frozenset[OwnedRun]
    """Every run some SJ's status points at (or will adopt), with that SJ's uid: the others its SJ controls are
    strays (`stray_runs`)."""




def run_keys(sj: SJObject, status: ScavengerJobStatus) -> tuple[RunKey, ...]:
    """The runs the SJ's status points at: its current run first (the next one while it waits, to adopt
    it), then the run its status names when that is another."""
    current = status.job_name
    if status.phase is None or status.phase in WAITING:
        current = run_job_name(sj.name, status.attempt + 1)
    if status.job_name and status.job_name != current:
        return ((sj.namespace, current), (sj.namespace, status.job_name)) if current else (
            (sj.namespace, status.job_name),)
    return ((sj.namespace, current),) if current else ()


def observe_one(sj: SJObject, rv: str, raw_status: Mapping[str, Any], status: ScavengerJobStatus,
                spec: ScavengerJobSpec | InvalidSpec, view: ClusterView, run_key: RunKey | None) -> Observed:
    """One SJ with its current run (``run_key``, the first of its ``run_keys``) as the view shows it. A Job of
    the run's name that this SJ does not control is not its run (nor are the pods labelled like it): the SJ
    never takes it up, and its launch finds the name taken."""
    key = run_key or (sj.namespace, "")
    job = view.jobs.get(key)
    pods = view.run_pods.get(key, ()) if job is None or job.owner == sj.uid else ()
    run = NO_RUN if not pods and (job is None or job.owner != sj.uid) else Run(job=job, pods=pods)
    if status.config_index and not isinstance(spec, InvalidSpec) and status.phase not in (None, *WAITING):
        spec = spec.launched_config(status.config_index)
    return Observed(sj, rv, raw_status, status, spec, run)


def changed_keys(mapping: Mapping[K, V], last: Mapping[K, V]) -> set[K]:
    """The keys whose entry differs between the two mappings: added, removed, or replaced by an unequal value.
    When ``mapping`` holds the keys of ``last`` in the same order, maybe with more after them (watch events replaced
    some entries in place and added some, the usual case between two passes), the entries are compared by identity
    at C speed and only the replaced ones by value: at 10,000 Jobs a walk in Python over every entry took a tenth
    of the operator's CPU in a burst."""
    held = list(last)
    if len(mapping) >= len(held) and (keys := list(mapping))[:len(held)] == held:
        # (and maybe more keys after them: runs whose first pods came)
        replaced = compress(held, map(is_not, mapping.values(), last.values()))
        changed = {key for key in replaced if mapping[key] != last[key]}
        changed.update(keys[len(held):])
        return changed
    changed = {key for key, value in mapping.items() if (before := last.get(key)) is not value and before != value}
    changed.update(last.keys() - mapping.keys())
    return changed


def stray_runs(jobs: Mapping[RunKey, JobView], known: Container[OwnedRun], *,
               keep: Container[RunKey] = ()) -> list[JobView]:
    """The runs to delete: Jobs an SJ controls (`JobView.owner`) that it no longer points at, or whose SJ is
    gone. Never a Job no SJ controls (whatever its name and labels say), one being deleted already, or one
    of ``keep`` (runs this process just launched, which the SJs' statuses may not name yet)."""
    return [job for key, job in jobs.items() if _stray(key, job, known, keep)]


def _stray(key: RunKey, job: JobView | None, known: Container[OwnedRun], keep: Container[RunKey]) -> bool:
    return (job is not None and job.owner is not None and not job.deleting and (job.owner, key) not in known
            and key not in keep)


@dataclass
class Strays:
    """`stray_runs`, kept from pass to pass: a pass looks again only at the Jobs whose entry changed
    (`changed_keys`) and the runs whose being known or kept changed (set differences, at C speed), not at every
    Job of the cluster."""

    jobs: dict[RunKey, JobView] = field(default_factory=dict)
    known: frozenset[OwnedRun] = frozenset()
    keep: frozenset[RunKey] = frozenset()
    found: dict[RunKey, JobView] = field(default_factory=dict)

    def update(self, jobs: Mapping[RunKey, JobView], known: frozenset[OwnedRun],
               keep: frozenset[RunKey]) -> list[JobView]:
        """The strays of ``jobs`` (`stray_runs` with these arguments)."""
        touched = changed_keys(jobs, self.jobs)
        if known is not self.known:
            touched.update(key for _, key in known ^ self.known)
        if keep != self.keep:
            touched.update(keep ^ self.keep)
        for key in touched:
            if _stray(key, job := jobs.get(key), known, keep):
                self.found[key] = cast(JobView, job)
            else:
                self.found.pop(key, None)
        self.jobs, self.known, self.keep = dict(jobs), known, keep
        return list(self.found.values())


def decide(observed: Iterable[Observed], now: datetime, cfg: LifecycleConfig,
           on_error: Callable[[Observed, Exception], None], draining: frozenset[str] = frozenset(),
           exempt: frozenset[str] | None = None) -> list[Decided]:
    """The state machine for every SJ; steering exempts the runs that should stay unprotected, and runs
    with a pod on a ``draining`` node hold no protection. ``exempt``: the steering exemptions when the
    caller worked them out over more SJs than ``observed`` (else they are worked out here).

    A bug in one SJ's decision is reported through ``on_error`` and does not stop the others."""
    observed = list(observed)
    if exempt is None:
        exempt = exemptions(observed, now, cfg)
    decided = []
    for o in observed:
        try:
            result = step(o.spec, o.status, o.run, now, cfg, sj_name=o.sj.name, exempt=o.sj.key in exempt,
                          draining=on_draining(o, draining))
        except Exception as exc:
            on_error(o, exc)
            continue
        decided.append(Decided(o, result))
    return decided


def exemptions(observed: Iterable[Observed], now: datetime, cfg: LifecycleConfig) -> frozenset[str]:
    """Victim steering over the running SJs among ``observed`` (`policy.priority.steering_exemptions`).

    Steering exempts nothing while any run is below the protecting level, which is nearly always so with
    many runs; that is seen from the first such run's level, before any run's nodes and work are gathered
    (at 2,000 running SJs this was half of a quiet pass)."""
    return running_exemptions([o for o in observed
                               if o.status.phase is Phase.RUNNING and not isinstance(o.spec, InvalidSpec)], now, cfg)


def running_exemptions(running: Iterable[Observed], now: datetime, cfg: LifecycleConfig) -> frozenset[str]:
    """`exemptions` when ``running`` are the running SJs with a valid spec already (`memo.Worklist.running`)."""
    running = list(running)
    if any(not _clock(o, now, cfg.protect_level).protected for o in running):
        return frozenset()
    return steering_exemptions(progress(o, now, cfg.protect_level) for o in running)


def _clock(o: Observed, now: datetime, protect_level: int) -> RunClock:
    assert not isinstance(o.spec, InvalidSpec)
    return run_clock(now, o.status.priority_start_over_timestamp or now, o.spec.duration, o.spec.priority_levels,
                     protect_level)


def on_draining(o: Observed, draining: frozenset[str]) -> bool:
    """Whether a live pod of the SJ's run is on one of the ``draining`` nodes."""
    return bool(draining) and any(p.node in draining for p in o.run.pods if not p.terminal)


def nodes_being_drained(view: ClusterView) -> frozenset[str]:
    return draining_nodes((n.name, n.unschedulable, (key for key, _, _ in n.taints)) for n in view.nodes)


def progress(o: Observed, now: datetime, protect_level: int) -> RunProgress:
    """A running SJ as victim steering sees it: its nodes and the work since its current period began."""
    clock = _clock(o, now, protect_level)
    return RunProgress(key=o.sj.key, nodes=frozenset(p.node for p in o.run.pods if p.node and not p.terminal),
                       unsaved=now - clock.period_start, protected_by_level=clock.protected)


# --- the admission snapshot's entries -----------------------------------------------------------

def pod_request(spec: ScavengerJobSpec) -> dict[str, int]:
    """What one pod of the SJ requests, in milli-units, counting the pod itself."""
    req = resources_milli(spec.effective_resources.requests)
    req["pods"] = 1000
    return req


@dataclass(frozen=True, slots=True)
class QueueShape:
    """What a queue entry takes from the spec alone: SJs that share a parsed spec share one."""
    request: Resources
    node_selector: Mapping[str, str]
    fallbacks: tuple[Shape, ...]


def queue_shape(spec: ScavengerJobSpec) -> QueueShape:
    fallbacks = tuple(Shape(c.parallelism, freeze(pod_request(c)), frozen_labels(c.node_selector), c.tolerations)
                      for c in (spec.config(i) for i in range(1, len(spec.fallbacks) + 1)))
    return QueueShape(freeze(pod_request(spec)), frozen_labels(spec.node_selector), fallbacks)


def queued(sj: SJObject, spec: ScavengerJobSpec, status: ScavengerJobStatus, now: datetime,
           shape: QueueShape | None = None) -> QueuedSJ:
    """``shape``: ``queue_shape(spec)``, when the caller keeps it."""
    shape = shape or queue_shape(spec)
    return QueuedSJ(key=sj.key, created=sj.created or now, interrupted_count=status.interrupted_count,
                    pods=spec.parallelism, request=shape.request, node_selector=shape.node_selector,
                    tolerations=spec.tolerations, not_before=status.not_before, fallbacks=shape.fallbacks,
                    fallback_after=spec.fallback_after,
                    waiting_from=status.interrupted_timestamps[-1] if status.interrupted_timestamps else None)


def in_flight(sj: SJObject, spec: ScavengerJobSpec, scheduled: int) -> InFlightRun:
    return InFlightRun(key=sj.key, pods=spec.parallelism, request=pod_request(spec), scheduled_pods=scheduled,
                       node_selector=dict(spec.node_selector), tolerations=spec.tolerations)






def quota_table(view: ClusterView, defaults: QuotaDefaults = NO_DEFAULTS) -> EffectiveQuotas:
    """Each namespace's effective quota (`policy.tenancy.effective_quotas`): the cluster quotas selecting it,
    its own ScavengerQuotas and the operator's defaults, the tightest winning."""
    return effective_quotas(view.namespaces, view.cluster_quotas, view.quotas, defaults)
