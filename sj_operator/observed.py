"""Slim, immutable views of what the cluster reports, parsed from raw API dicts.

The watch handlers keep only these views in memory (never whole objects), and the
pure decision functions read nothing else. Parsing is total: a malformed field
becomes "unknown", never an exception in the middle of a watch stream.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from typing import Any

from sj_operator.api.fields import TIMESTAMP_YEARS
from sj_operator.names import (
    ANNOTATION_COMPLETION_INDEX,
    ANNOTATION_CONFIG_INDEX,
    JOB_MANAGER,
    LABEL_PROTECTED,
    LABEL_RUN,
    LABEL_SJ,
    controller_uid,
    in_band,
)
from sj_operator.resources import Resources, accumulate, resources_milli
from sj_operator.settings import DEFAULT_SCHEDULER, DEFAULT_SCHEDULERS


def parse_time(raw: Any) -> datetime | None:
    """A timestamp the API reports; None when missing, unreadable, without a timezone, or outside the years
    `TIMESTAMP_YEARS` (the time arithmetic of a pass must not leave what a ``datetime`` holds)."""
    if not raw:
        return None
    if isinstance(raw, datetime):
        value = raw
    else:
        try:
            value = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
        except ValueError:
            return None
    if value.utcoffset() is None or value.year not in TIMESTAMP_YEARS:
        return None
    return value


def small_int(raw: Any, most: int = 1 << 31) -> int | None:
    """A non-negative integer written in ASCII digits (``"3"``, or an int), below ``most``; None for anything
    else. ``str.isdigit`` is no test for ``int``: it is true of ``"²"``, which ``int`` refuses, and of a
    string of 5,000 digits, which ``int`` refuses too."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if 0 <= raw < most else None
    if isinstance(raw, str) and 0 < len(raw) <= 19 and raw.isascii() and raw.isdigit():
        value = int(raw)
        return value if value < most else None
    return None


def _exit_code(raw: Any) -> int:
    """A container's exit code (an int32 the kubelet writes); 0 for anything else, as for a missing one."""
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else 0


def _container_requests(container: Mapping[str, Any]) -> dict[str, int]:
    res = container.get("resources") or {}
    # The API server defaults each request a container lacks to its limit for that resource.
    return resources_milli({**(res.get("limits") or {}), **(res.get("requests") or {})})


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Effective requests as the scheduler sees them, plus overhead: the larger of the containers (with
    the sidecars, i.e. init containers with restartPolicy Always, that keep running beside them) and
    what runs during any init container (itself and the sidecars started before it)."""
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        accumulate(total, _container_requests(c))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in spec.get("initContainers") or []:
        running = dict(sidecars)
        accumulate(running, _container_requests(c))
        if c.get("restartPolicy") == "Always":
            sidecars = dict(running)
        for name, value in running.items():
            init_peak[name] = max(init_peak.get(name, 0), value)
    accumulate(total, sidecars)
    for name, value in init_peak.items():
        total[name] = max(total.get(name, 0), value)
    accumulate(total, resources_milli(spec.get("overhead")))
    total.setdefault("pods", 1000)
    return total


@dataclass(frozen=True)
class Termination:
    container: str
    exit_code: int
    reason: str
    finished: datetime | None = None


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    uid: str
    sj: str | None
    run: str | None
    node: str | None
    phase: str
    deleting: bool
    requests: Resources
    disruption: tuple[str, str] | None = None
    """(reason, message) of a DisruptionTarget=True condition: preemption, eviction, node loss..."""
    disrupted_at: datetime | None = None
    """When that condition became True (None: not disrupted, or the time is unknown)."""
    terminations: tuple[Termination, ...] = ()
    all_running: bool = False
    index: int | None = None
    protected: bool = False
    started: datetime | None = None
    placed: datetime | None = None
    """When the scheduler last decided about it (its ``PodScheduled`` condition, bound or not); None while
    no scheduler has looked at it yet."""
    unschedulable: bool = False
    """Bound to no node, found no node by the default scheduler (``PodScheduled`` False, reason ``Unschedulable``)
    and nominated none (no ``status.nominatedNodeName``: it preempts nothing). It does not count toward the
    threshold (`memo.PodSums`): fewer scavenger pods would not make it room (they are the lowest priority: were they
    in its way, the scheduler's preemption would have taken them and nominated their node; a pod that may not preempt,
    ``preemptionPolicy: Never``, is left out all the same), and one pod that can never run (a nodeSelector no
    node has, a request no node holds) would otherwise stop scavenging for every tenant. A run's own pod is still
    accounted for by its run (`policy.snapshot.InFlightRun`, the start timeout) and in its namespace's usage.
    A pod of another scheduler listed in ``--schedulers`` (Volcano's, YuniKorn's) never is: those do not preempt the
    band's pods, so room the threshold keeps free is its only way in (a pod of a scheduler not listed is
    `unclaimed`)."""
    unclaimed: bool = False
    """Bound to no node, and no scheduler the operator counts (``--schedulers``) will place it as it is: it names
    another scheduler (one that may not run at all), or it has scheduling gates, which keep every scheduler off it
    until they are lifted. It does not count toward the threshold (`memo.PodSums`): a namespace could otherwise hold
    the threshold reached for every tenant with pods nothing ever places. Once its gates are lifted it counts (and the
    default scheduler's preemption takes the band's pods in its way); bound, it counts as every pod does."""
    ip: str | None = None
    """Its primary address (``status.podIP``); None until it has one."""
    hostname: str | None = None
    """Its hostname when it is named under its run's Service (a gang member: ``spec.subdomain`` is its run's
    name); None for any other pod."""
    band: bool = False
    """Whether it runs in the scavenger band (`names.in_band` of its ``spec.priorityClassName``): a pod of an SJ's
    run, whatever its labels say. ``sj`` and ``run`` map a pod to its SJ and run, but its namespace may edit them;
    what a namespace's SJs use is counted from this, which it cannot (`memo.PodSums`). A bool, not the class's
    name: every pod of the cluster has a view."""

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def finished(self) -> datetime | None:
        """When the last of its stopped containers stopped; None when none stopped or a time is missing."""
        times = [t.finished for t in self.terminations]
        if not times or any(t is None for t in times):
            return None
        return max(t for t in times if t is not None)

    @property
    def holds_resources(self) -> bool:
        """Non-terminated pods count against capacity, scheduled or not (as the scheduler counts); the threshold
        leaves out the `unschedulable` and the `unclaimed` ones."""
        return not self.terminal


def _text(value: object) -> str | None:
    """A string field as read, None when it is missing, empty or not a string."""
    return value if isinstance(value, str) and value else None


def pod_view(body: Mapping[str, Any], schedulers: frozenset[str] = DEFAULT_SCHEDULERS) -> PodView:
    """The pod as the loop sees it. ``schedulers``: the schedulers whose pending pods count toward the threshold
    (`PodView.unclaimed`); a pod that names none is the default scheduler's."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    disruption = None
    disrupted_at = placed = None
    no_room = False
    for cond in status.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            disruption = (cond.get("reason") or "DisruptionTarget", cond.get("message") or "")
            disrupted_at = parse_time(cond.get("lastTransitionTime"))
        elif cond.get("type") == "PodScheduled" and cond.get("reason") != "SchedulingGated":
            # Bound (True) or looked at and found no room (False): a gated pod the scheduler has not seen yet.
            placed = parse_time(cond.get("lastTransitionTime"))
            no_room = cond.get("status") == "False" and cond.get("reason") == "Unschedulable"
    terminations = []
    statuses = status.get("containerStatuses") or []
    for cs in statuses:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            terminations.append(Termination(str(cs.get("name", "?")), _exit_code(term.get("exitCode")),
                                            str(term.get("reason") or ""), parse_time(term.get("finishedAt"))))
    all_running = (
        status.get("phase") == "Running"
        and bool(statuses)
        and all("running" in (cs.get("state") or {}) for cs in statuses)
    )
    index = annotations.get(ANNOTATION_COMPLETION_INDEX) or labels.get(ANNOTATION_COMPLETION_INDEX)
    run = labels.get(LABEL_RUN)
    scheduler = _text(spec.get("schedulerName")) or DEFAULT_SCHEDULER
    return PodView(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        sj=labels.get(LABEL_SJ),
        run=run,
        node=spec.get("nodeName") or None,
        phase=status.get("phase") or "Pending",
        deleting=bool(meta.get("deletionTimestamp")),
        requests=pod_requests(spec),
        disruption=disruption,
        disrupted_at=disrupted_at,
        terminations=tuple(terminations),
        all_running=all_running,
        index=small_int(index),
        protected=labels.get(LABEL_PROTECTED) == "true",
        started=parse_time(status.get("startTime")),
        # Bound without the condition (made with a nodeName): placed when it was made.
        placed=placed if placed is not None or not spec.get("nodeName") else parse_time(meta.get("creationTimestamp")),
        unschedulable=(no_room and not spec.get("nodeName") and _text(status.get("nominatedNodeName")) is None
                       and scheduler == DEFAULT_SCHEDULER),
        unclaimed=not spec.get("nodeName") and (scheduler not in schedulers or bool(spec.get("schedulingGates"))),
        ip=_text(status.get("podIP")),
        hostname=_text(spec.get("hostname")) if run is not None and spec.get("subdomain") == run else None,
        band=in_band(spec.get("priorityClassName")),
    )


RunKey = tuple[str, str]
"""(namespace, Job name) of one run."""
DisruptedKey = tuple[str, str, str]
"""(namespace, run, pod uid) of a disrupted run member."""


def remember_disrupted(seen: dict[DisruptedKey, PodView], pod: PodView) -> None:
    """Keeps the last view of a run member that was told to stop: disrupted (preempted, evicted) or
    deleted from outside. Such a pod may be gone before a pass looks (a preempted pod that exits 0 is
    removed moments later; a deleted one after its grace period), and a pass that sees only its Job,
    Complete or Failed, must still know why the run ended."""
    if pod.run is not None and (pod.disruption is not None or pod.deleting):
        seen[(pod.namespace, pod.run, pod.uid)] = pod


def with_disrupted(run_pods: Mapping[RunKey, tuple[PodView, ...]], seen: Mapping[DisruptedKey, PodView],
                   jobs: Mapping[RunKey, object]) -> tuple[dict[RunKey, tuple[PodView, ...]],
                                                           dict[DisruptedKey, PodView]]:
    """Adds the remembered disrupted members that the pod watch no longer shows to their runs, as
    stopped (they hold nothing). Returns the runs' pods and what is still worth remembering: members of
    runs whose Job still exists."""
    merged = dict(run_pods)
    kept: dict[DisruptedKey, PodView] = {}
    for key, pod in seen.items():
        namespace, run, uid = key
        if (namespace, run) not in jobs:
            continue
        kept[key] = pod
        members = merged.get((namespace, run), ())
        if any(p.uid == uid for p in members):
            continue
        gone = pod if pod.terminal else replace(pod, phase="Failed")
        merged[(namespace, run)] = (*members, replace(gone, deleting=True))
    return merged, kept


@dataclass(frozen=True)
class JobView:
    namespace: str
    name: str
    uid: str
    sj: str | None
    deleting: bool
    complete: bool
    failed: bool
    failure: str = ""
    created: datetime | None = None
    started: datetime | None = None
    """When the Job controller first took it up (``status.startTime``); None until it has: a busy
    controller-manager may take minutes to reach a new Job."""
    config_index: int = 0
    """The configuration it was launched in (``scavenger.dev/config-index``; 0: the preferred one)."""
    suspended: bool = False
    """``spec.suspend``: the operator makes its runs' Jobs unsuspended; a queueing controller's admission webhook
    (Kueue's) may suspend them, and the Job controller does not take a suspended Job up."""
    owner: str | None = None
    """The uid of the SJ that controls it (`names.controller_uid`); None for a Job no SJ controls, which the
    operator never takes as a run, nor deletes, whatever its name and labels."""


def job_view(body: Mapping[str, Any]) -> JobView:
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    complete = failed = False
    failure = ""
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True":
            continue
        # With a successPolicy (MPI: the launcher's success) SuccessCriteriaMet comes first, then
        # the Job controller stops the other pods, then Complete.
        if cond.get("type") in ("Complete", "SuccessCriteriaMet"):
            complete = True
        elif cond.get("type") == "Failed":
            failed = True
            failure = f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
    return JobView(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        sj=(meta.get("labels") or {}).get(LABEL_SJ),
        deleting=bool(meta.get("deletionTimestamp")),
        complete=complete,
        failed=failed,
        failure=failure,
        created=parse_time(meta.get("creationTimestamp")),
        started=parse_time(status.get("startTime")),
        config_index=_config_index(meta.get("annotations") or {}),
        suspended=(body.get("spec") or {}).get("suspend") is True,
        owner=controller_uid(meta),
    )


def _config_index(annotations: Mapping[str, Any]) -> int:
    return small_int(annotations.get(ANNOTATION_CONFIG_INDEX), most=1 << 16) or 0


@dataclass(frozen=True)
class NodeInfo:
    name: str
    allocatable: Resources
    labels: Mapping[str, str]
    taints: tuple[tuple[str, str, str], ...]
    unschedulable: bool
    ready: bool


def node_info(body: Mapping[str, Any]) -> NodeInfo:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return NodeInfo(
        name=meta.get("name", ""),
        allocatable=resources_milli(status.get("allocatable")),
        labels=dict(meta.get("labels") or {}),
        taints=tuple((t.get("key", ""), t.get("value", "") or "", t.get("effect", ""))
                     for t in spec.get("taints") or []),
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
    )


@dataclass(frozen=True)
class QuotaView:
    """A ScavengerQuota: the most its namespace's SJ runs may request at once, and its fair-share weight."""
    namespace: str
    name: str
    hard: Resources
    weight: int


def quota_view(body: Mapping[str, Any]) -> QuotaView:
    """Tolerant, like every view of the watch: the CRD's schema has checked the object already."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    return QuotaView(namespace=meta.get("namespace", ""), name=meta.get("name", ""),
                     hard=resources_milli(spec.get("hard")), weight=_weight(spec))


@dataclass(frozen=True)
class SelectorView:
    """A label selector: every ``match_labels`` pair and every ``(key, operator, values)`` requirement must
    hold (`policy.tenancy.selects`)."""
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[tuple[str, str, frozenset[str]], ...] = ()


@dataclass(frozen=True)
class ClusterQuotaView:
    """A ScavengerClusterQuota: the cap and fair-share weight of each namespace its selector selects
    (``selector`` None: none)."""
    name: str
    selector: SelectorView | None
    hard: Resources
    weight: int


@dataclass(frozen=True)
class NamespaceView:
    """A namespace's name and labels (what a ScavengerClusterQuota's selector reads)."""
    name: str
    labels: Mapping[str, str]


def _weight(spec: Mapping[str, Any]) -> int:
    weight = spec.get("weight", 1)
    return weight if isinstance(weight, int) and not isinstance(weight, bool) and weight > 0 else 1


def selector_view(raw: Any) -> SelectorView | None:
    """A label selector as the API holds it; None for none. Tolerant: a requirement it cannot read (the
    CRD's schema has checked them) is kept with an unknown operator, which selects nothing."""
    if not isinstance(raw, Mapping):
        return None
    labels = raw.get("matchLabels")
    expressions = []
    for term in raw.get("matchExpressions") or ():
        term = term if isinstance(term, Mapping) else {}
        values = term.get("values")
        expressions.append((str(term.get("key", "")), str(term.get("operator", "")),
                            frozenset(str(v) for v in values) if isinstance(values, list) else frozenset()))
    return SelectorView(
        match_labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())) if isinstance(labels, Mapping)
        else (),
        match_expressions=tuple(expressions))


def cluster_quota_view(body: Mapping[str, Any]) -> ClusterQuotaView:
    """Tolerant, like every view of the watch: the CRD's schema has checked the object already."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    return ClusterQuotaView(name=meta.get("name", ""), selector=selector_view(spec.get("namespaceSelector")),
                            hard=resources_milli(spec.get("hard")), weight=_weight(spec))


def namespace_view(body: Mapping[str, Any]) -> NamespaceView:
    meta = body.get("metadata") or {}
    labels = meta.get("labels")
    return NamespaceView(name=meta.get("name", ""),
                         labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {})


@dataclass(frozen=True)
class SJObject:
    """A ScavengerJob as read from the API: identity, raw spec, raw status."""
    namespace: str
    name: str
    uid: str
    generation: int
    resource_version: str
    created: datetime | None
    deleting: bool
    spec: Mapping[str, Any] = field(default_factory=dict)
    status: Mapping[str, Any] = field(default_factory=dict)
    job_owner: str | None = None
    """The uid of the Job that owns it, for an SJ that runs an adopted Job."""

    @cached_property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def sj_object(body: Mapping[str, Any]) -> SJObject:
    meta = body.get("metadata") or {}
    return SJObject(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        generation=int(meta.get("generation") or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
        created=parse_time(meta.get("creationTimestamp")),
        deleting=bool(meta.get("deletionTimestamp")),
        spec=dict(body.get("spec") or {}),
        status=dict(body.get("status") or {}),
        job_owner=next((ref.get("uid") for ref in meta.get("ownerReferences") or []
                        if ref.get("kind") == "Job" and ref.get("apiVersion") == "batch/v1"), None),
    )


@dataclass(frozen=True)
class AdoptedJob:
    """A Job labelled for adoption, as read from the API."""

    namespace: str
    name: str
    uid: str
    created: datetime | None
    managed: bool
    """Its ``spec.managedBy`` is the operator's: the adoption webhook suspended it."""
    finished: bool
    """It has its final condition (Complete or Failed) already."""
    body: Mapping[str, Any]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def adopted_job(body: Mapping[str, Any]) -> AdoptedJob:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    conditions = (body.get("status") or {}).get("conditions") or []
    return AdoptedJob(
        namespace=meta.get("namespace", ""), name=meta.get("name", ""), uid=meta.get("uid", ""),
        created=parse_time(meta.get("creationTimestamp")), managed=spec.get("managedBy") == JOB_MANAGER,
        finished=any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions),
        body={"metadata": dict(meta), "spec": dict(spec)},
    )
