"""Scale and speed on the local cluster, side by side with the floor and with plain Jobs.

Run: ``make bench-scale`` (starts the local cluster when none runs), or with KUBECONFIG set:
``python benchmarks/bench_scale.py [--sjs 10000] [--nodes 1000] [--plot bench-scale.png]``.

One workload, seeded: ``--sjs`` units of work, most one pod, ``--gang-share`` of them gangs of 2 to 16
pods (100m CPU, 64Mi each), on ``--nodes`` kwok nodes made for the run (8 CPU, 32Gi, tainted so nothing
else lands there). It goes through the same cluster in turn:

1. **The floor**: the work as plain low-priority Jobs created directly (Indexed for gangs), 8 client
   threads. The operator can never be faster than this. Measured: from the first create to the last Job,
   and to 99.5 % of the pods ready (as the Jobs count them, looked at every 15 s); a plain Job is what is
   created, so its created -> Job is 0 by construction (the Job controller's lag, from each Job's creation
   to its ``status.startTime``, is measured instead, p50 and p99). The creates and the wait are done again
   after the operator's run (an A-B-A order: each run leaves the cluster older than it found it, and the
   first floor had it fresh), and the operator's figures are ratios of the mean of the two (``--floor-once``:
   of the first alone, A-B, when two floors would not fit the time there is). Once the first
   floor's pods run, a stream of high-priority pods arrives (Poisson, ``--rate`` per second for
   ``--stream`` seconds, each needing most of a node for 20 s): the default scheduler alone picks the
   victims. A plain Job's preempted pod starts again from nothing, so the work it lost is how long it had
   run; for a gang, every member's (its app stops when one member goes), counted as the members times the
   preempted pod's run.
2. **The operator**: the same work as ScavengerJobs (checkpoint period ``--period``) created in one
   burst by 8 client threads, the operator running as its own process with its default settings
   (threshold 70 %, victim steering at protect level 1). Measured: SJs launched per second, from the
   first create to the last Job; each SJ's time from its create call to a watch seeing its Job (p50,
   p99); from the first create until 99.5 % of the SJs are Running (as the operator counts them, every
   15 s); the operator's API calls per SJ by operation; its CPU until every Job exists (and the wall time
   its garbage collector took meanwhile); over the whole run, its peak RSS, the lags of its event loop over
   a second, the runs it deleted for a start timeout (``scavenger_start_timeouts_total``) and the Events it
   dropped at its backlog's cap (``scavenger_events_dropped_total``); its collections over the run by
   generation (seconds, how many, objects freed); the API server's CPU. While every SJ runs (``--settle``),
   victim steering: the routine protection toggles written and the share written before their run's next
   toggle was due (``scavenger_protection_toggle_lateness_seconds``). Then the same stream of high-priority
   pods; an interrupted SJ lost the time since its checkpoint period began, for every pod of its gang
   (``policy.lifecycle.lost_work``, the operator's own estimate).
3. **The ceiling** (``--ceiling``, before the operator's run): the SJs created as for the operator, and
   each one's plain Job created by the benchmark (as many threads again) once its SJ exists, with no
   operator running, until 99.5 % of their pods are ready. An operator must at least make the Job of every
   SJ it is given, so this is the most any operator could reach here: the users' SJs plus the floor's Jobs.
   Where the ceiling itself is far from the floor, the cluster (its control plane on the machine's cores) is
   the limit, not the operator. With ``--ceiling-as-operator``, the ceiling again with each SJ's Job and a
   gang's Service as the operator builds them in place of the plain Job (`operator_objects`): what the operator's
   objects cost the cluster, apart from its process (but a gang's EndpointSlice, which the operator writes once its
   pods have addresses: the ceiling's gangs have no DNS names, which their sleeping pods do not need). With
   ``--ceiling-recorded``, those objects and each SJ's record as the operator writes it for a run that starts at
   once (its state machine's status patch as Running, its ``Launched`` and ``Running`` Events), written as soon as
   the objects are made: what every write an operator must make costs the cluster, apart from its process; where
   this ceiling is itself far from the floor, the writes, not the operator's way of making them, are the limit. With
   ``--standby``, the ceiling again while a replica of the operator watches on standby, as the operator does
   (another identity holds its Lease, so it decides and writes nothing): what watching costs, before any decision.
   Also measured: that replica's CPU while the units are created.
4. **Kueue** (``--kueue``; ``make bench-scale`` passes it): the same burst as plain Jobs through Kueue's
   manager (v0.17, built from its Go module by ``hack/build-binaries kueue``), running as its own process
   against the same cluster with a ClusterQueue whose quota is the operator's threshold of these nodes.
   Measured: from the first create until Kueue started (unsuspended) the last Job, and until 99.5 % of the
   pods are ready (as for the floor); each Job's time from create to started (p50, p99); Kueue's CPU until
   the last Job started and its peak RSS over the run; the API server's CPU. No stream: Kueue does not
   preempt for workloads outside its queues, so the default scheduler would pick the victims as for plain
   Jobs.
5. Side by side: throughput and the time to 99.5 % running as ratios of the floor's (the mean of its two
   timings), and the work lost per high-priority pod.

Progress is printed as it goes, and the result so far is written after each run (`Keeper`: a benchmark stopped part
way keeps what its finished runs measured); the result is a table, optionally a PNG plot (matplotlib) and the result as
data (``--json PATH``, ``--save``: ``benchmarks/harness/results.py``), with the goals beside the figures they
are set for (``GOALS``: ``benchmarks/harness/scale_report.py``). ``--profile FILE`` samples the operator with py-spy
while it runs (its collapsed stacks go to FILE; the shares by package, function and API operation are logged); with
``--profile-burst``, only until every SJ's Job exists. ``--profile-control-plane`` takes the API server's and the
controller manager's own CPU profiles during each run and sums them by what spent their CPU (``pprof.py``: which
controller, which kind of request). Everything the run made (nodes, namespaces, PriorityClasses)
is deleted at the end.

What runs beside the benchmark (the operator, Kueue's manager), what they use and what they serve, the cluster's
objects, the stream sent and the work its victims lost, and how a run is shown (``scale_report``) come from
``benchmarks/harness/``; this script is the workload and what is measured of it.
"""
from __future__ import annotations

import argparse
import copy
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # this checkout's code, not the installed one's

from kubernetes import client, config  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from benchmarks.harness import kueue, results, scavenger  # noqa: E402
from benchmarks.harness.kube import (  # noqa: E402
    WritesSince,
    claimed,
    create_namespace,
    delete_nodes,
    earlier_runs_gone,
    ensure_crd,
    job_sync_lag,
    make_kwok_nodes,
    priority_classes,
    ready_pods,
    retrying,
    run_namespace,
)
from benchmarks.harness.metrics import (  # noqa: E402
    calls_by_operation,
    counts,
    loop_lag,
    scrape,
    toggle_lateness,
    writes,
)
from benchmarks.harness.pprof import WINDOW as PROFILE_WINDOW  # noqa: E402
from benchmarks.harness.pprof import ControlPlaneProfiles, by_component, cluster_takers  # noqa: E402
from benchmarks.harness.preemption import Stream, lost_by_sjs, preempted  # noqa: E402
from benchmarks.harness.processes import (  # noqa: E402
    KWOK,
    CpuAccount,
    CpuSince,
    apiserver_cpu,
    free_port,
    niced,
    peak_rss_mib,
    scratch,
)
from benchmarks.harness.profiling import profiled  # noqa: E402
from benchmarks.harness.progress import in_parallel_then, log, timed_creates, wait_until  # noqa: E402
from benchmarks.harness.recorder import RecorderProcess  # noqa: E402
from benchmarks.harness.scale_report import (  # noqa: E402
    RUNNING,
    SHAPE_PARTS,
    Keeper,
    Result,
    creation_figures,
    without_run,
)
from benchmarks.harness.stats import percentile  # noqa: E402
from sj_operator.api import ScavengerJobStatus  # noqa: E402
from sj_operator.api.fields import parse_duration  # noqa: E402
from sj_operator.api.parse import parse_spec  # noqa: E402
from sj_operator.builders.job import build_run_job  # noqa: E402
from sj_operator.builders.priority_classes import priority_class_objects  # noqa: E402
from sj_operator.builders.service import build_gang_service  # noqa: E402
from sj_operator.kube import event_body  # noqa: E402
from sj_operator.names import API_VERSION, GROUP, KIND, LABEL_PROTECTED, PLURAL, VERSION, run_job_name  # noqa: E402
from sj_operator.observed import PodView, job_view  # noqa: E402
from sj_operator.policy.lifecycle import LifecycleConfig, launched, step  # noqa: E402
from sj_operator.policy.outcomes import Run  # noqa: E402
from sj_operator.policy.priority import launch_class  # noqa: E402
from tests.e2e.kube import unique  # noqa: E402

BENCH_LABEL = "scavenger.dev/bench"
TAINT = {"key": BENCH_LABEL, "value": "scale", "effect": "NoSchedule"}
SELECTOR = {BENCH_LABEL: "scale"}
TOLERATIONS = [{"key": BENCH_LABEL, "operator": "Equal", "value": "scale", "effect": "NoSchedule"}]
LOW, HIGH = "bench-scale-low", "bench-scale-high"
POD_CPU, POD_MEMORY = "100m", "64Mi"
GANG_ANNOTATION = "bench.scavenger.dev/gang-size"
THRESHOLD = 0.70
"""The operator's default admission threshold; Kueue's ClusterQueue gets the same share as its quota."""
NODE_MEMORY_GI = 32
NAMESPACES = "bench-scale"
"""How the names of the runs' namespaces begin."""
POLL = 15
"""Seconds between two looks at what runs (each time to running is up to this late)."""
RUN_TIMEOUT = 3 * 3600
"""Seconds a run may take to running before the benchmark fails: at 10,000 units on two cores the floor took 11
minutes and the operator of 2b2bff0 more than 20; a slower contender must not fail the run."""


# --- the workload ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    gangs: tuple[int, ...]
    """Pods of each unit of work, in creation order."""
    arrivals: tuple[tuple[float, int], ...]
    """High-priority pods: (seconds after the stream starts, node CPU it needs)."""

    @property
    def pods(self) -> int:
        return sum(self.gangs)


def workload(units: int, gang_share: float, rate: float, stream: float, node_cpu: int, seed: int) -> Workload:
    rnd = random.Random(seed)
    gangs = tuple(rnd.randint(2, 16) if rnd.random() < gang_share else 1 for _ in range(units))
    arrivals: list[tuple[float, int]] = []
    at = rnd.expovariate(rate) if rate > 0 else stream
    while at < stream:
        arrivals.append((at, node_cpu - 1))
        at += rnd.expovariate(rate)
    return Workload(gangs, tuple(arrivals))


def pod_spec(priority_class: str) -> dict[str, Any]:
    return {"priorityClassName": priority_class, "nodeSelector": SELECTOR, "tolerations": TOLERATIONS,
            "terminationGracePeriodSeconds": 1, "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", "sleep 36000"],
                            "resources": {"requests": {"cpu": POD_CPU, "memory": POD_MEMORY}}}]}


def plain_job(name: str, pods: int) -> dict[str, Any]:
    """What a user would otherwise submit: a low-priority Job (Indexed for a gang)."""
    spec: dict[str, Any] = {"parallelism": pods, "completions": pods, "backoffLimit": 1000,
                            "template": {"metadata": {"labels": {BENCH_LABEL: "plain"},
                                                      "annotations": {GANG_ANNOTATION: str(pods)}},
                                         "spec": pod_spec(LOW)}}
    if pods > 1:
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def scavenger_job(name: str, pods: int, period: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ScavengerJob", "metadata": {"name": name},
            "spec": {"image": "busybox:1.36", "command": ["sh", "-c", "sleep 36000"], "parallelism": pods,
                     "duration": period, "terminationGracePeriodSeconds": 1,
                     "resources": {"requests": {"cpu": POD_CPU, "memory": POD_MEMORY}},
                     "nodeSelector": SELECTOR, "tolerations": TOLERATIONS}}


def high_pod(name: str, cpu: int) -> dict[str, Any]:
    spec = pod_spec(HIGH)
    spec["containers"][0]["resources"] = {"requests": {"cpu": str(cpu), "memory": "1Gi"}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {"sim.scavenger.dev/run-for": "20s"}}, "spec": spec}


# --- the runs -----------------------------------------------------------------------------------

def create_plain_jobs(batch: client.BatchV1Api, namespace: str, work: Workload, threads: int, result: Result,
                      run: str) -> list[float]:
    """The floor's creates: every unit as a plain Job, ``threads`` at a time; ``run``'s creation figures. When
    each Job existed, in seconds after the first create."""
    apiserver = apiserver_cpu()
    start = time.monotonic()
    names = [f"job-{i:05d}" for i in range(len(work.gangs))]
    took, created = timed_creates(
        lambda i: retrying(lambda: batch.create_namespaced_job(namespace, plain_job(names[i], work.gangs[i]))),
        names, threads, "plain Jobs created")
    creation_figures(result, run, len(names), took, apiserver)
    log(f"  all {len(names)} Jobs created in {took:.1f}s ({len(names) / took:.0f}/s)")
    return sorted(t - start for t in created.values())


def floor_run(api: client.ApiClient, work: Workload, threads: int, result: Result, settle: float) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    with run_namespace(api, NAMESPACES, "the floor's", followed=True) as namespace:
        log(f"the floor: {len(work.gangs)} plain Jobs ({work.pods} pods) in {namespace}")
        account, start = Account.begun(api), time.monotonic()
        result.floor_created = create_plain_jobs(batch, namespace, work, threads, result, "floor")
        result.figures["floor_running_seconds"] = pods_running(batch, namespace, work.pods, start, "plain pods running")
        to_running(result, "floor", account)
        result.figures.update({f"floor_{k}": v for k, v in job_sync_lag(batch, namespace).items()})
        time.sleep(settle)
        log(f"  the stream: {len(work.arrivals)} high-priority pods")
        result.lost_plain = preempted(Stream(core, namespace, work.arrivals, high_pod),
                                      label_selector=f"{BENCH_LABEL}=plain", members_annotation=GANG_ANNOTATION)
        log(f"  {len(result.lost_plain)} plain pods preempted, {sum(result.lost_plain):.0f} pod-seconds of work lost")


def pods_running(batch: client.BatchV1Api, namespace: str, pods: int, start: float, what: str) -> float:
    """Waits until `RUNNING` of the ``pods`` of the Jobs in ``namespace`` are ready, as the Jobs count them
    (looked at every `POLL` seconds): the seconds since ``start`` (monotonic), the first create, also logged."""
    wait_until(what, lambda: ((n := ready_pods(batch, namespace)) >= RUNNING * pods, f"{n}/{pods}"),
               timeout=RUN_TIMEOUT, every=POLL)
    took = time.monotonic() - start
    log(f"  {RUNNING:.1%}: {what} {took:.0f}s after the first create")
    return took


@dataclass
class Account:
    """What a run cost the cluster from its first create: where the machine's CPU went (`CpuAccount`), the writes
    the API server served, whoever made them (`WritesSince`), and with ``--profile-control-plane`` what the API
    server's and the controller manager's CPU went to (`ControlPlaneProfiles`)."""
    cpu: CpuAccount
    writes: WritesSince
    profiles: ControlPlaneProfiles | None = None
    profiling: ClassVar[bool] = False
    """Whether runs profile the control plane (``--profile-control-plane``; set once, by `main`)."""

    @classmethod
    def begun(cls, api: client.ApiClient, processes: dict[str, int] | None = None) -> Account:
        profiles = ControlPlaneProfiles(cluster_takers(api)) if cls.profiling else None
        return cls(CpuAccount(processes), WritesSince(api), profiles)


def to_running(result: Result, run: str, account: Account) -> None:
    """What ``run`` cost the cluster until its units ran (`Account`), as ``{run}_cpu_to_running``,
    ``{run}_writes_to_running`` (the requests to write, refused ones too), ``{run}_refused_to_running`` (those
    refused, by code), ``{run}_watches_closed_to_running`` (on clients behind, by resource) and (profiled)
    ``{run}_control_plane_cpu``, also logged (the most first)."""
    seconds = result.figures[f"{run}_cpu_to_running"] = account.cpu.seconds()
    written, refused, closed = account.writes.writes()
    result.figures[f"{run}_writes_to_running"], result.figures[f"{run}_refused_to_running"] = written, refused
    result.figures[f"{run}_watches_closed_to_running"] = {"pods": 0.0, **closed}  # none closed is a figure too
    log("  CPU to running: " + ", ".join(f"{name} {s:.0f}s" for name, s in seconds.items()))
    log(f"  writes to running: {sum(written.values()):.0f}, the most "
        + ", ".join(f"{key} {n:.0f}" for key, n in list(written.items())[:8]))
    if closed:
        log("  watches the API server closed on clients behind: "
            + ", ".join(f"{key} {n:.0f}" for key, n in closed.items()))
    if refused:
        log(f"  of which refused: {sum(refused.values()):.0f}, the most "
            + ", ".join(f"{key} {n:.0f}" for key, n in list(refused.items())[:8]))
    if account.profiles is not None:
        spent = result.figures[f"{run}_control_plane_cpu"] = account.profiles.seconds()
        for name, parts in by_component(spent).items():
            log(f"  {name}'s CPU profile to running: " + ", ".join(f"{p} {s:.0f}s" for p, s in list(parts.items())[:8]))


def floor_again(api: client.ApiClient, work: Workload, threads: int, result: Result, *,
                followed: bool = False) -> None:
    """The floor's creates once more, after the operator's run (an A-B-A order), until its pods run: each run
    leaves the cluster older (thousands of objects made and deleted, etcd grown until its next compaction), and
    the first floor had it fresh. The operator's ratios are taken against the mean of the two floors, which have
    aged as much as the operator's run between them, on average."""
    batch = client.BatchV1Api(api)
    with run_namespace(api, NAMESPACES, "the floor's second", followed=followed) as namespace:
        log(f"the floor again: {len(work.gangs)} plain Jobs in {namespace}")
        account, start = Account.begun(api), time.monotonic()
        create_plain_jobs(batch, namespace, work, threads, result, "floor_after")
        result.figures["floor_after_running_seconds"] = pods_running(batch, namespace, work.pods, start,
                                                                     "plain pods running")
        to_running(result, "floor_after", account)
    floor_means(result.figures)


def floor_means(figures: dict[str, float]) -> None:
    """The floor's figures the operator's are taken against: the mean of the floors that ran (both in an A-B-A
    order; the first alone with ``--floor-once``)."""
    for figure in ("per_second", "running_seconds"):
        floors = [figures[key] for key in (f"floor_{figure}", f"floor_after_{figure}") if key in figures]
        if floors:
            figures[f"floor_mean_{figure}"] = sum(floors) / len(floors)


def without_part(job: dict[str, Any], part: str) -> dict[str, Any]:
    """The operator's ``job`` with one of its `SHAPE_PARTS` as the plain Job (`plain_job`) has it: ``owner`` no
    owner reference to its SJ; ``failure-policy`` no pod failure or replacement policy (the plain Job's backoff
    limit); ``band`` the floor's PriorityClass in place of the band's; ``env`` no environment, and the plain Job's
    pod labels and annotations."""
    job = copy.deepcopy(job)
    spec = job["spec"]
    pod = spec["template"]["spec"]
    if part == "owner":
        del job["metadata"]["ownerReferences"]
    elif part == "failure-policy":
        del spec["podFailurePolicy"], spec["podReplacementPolicy"]
        spec["backoffLimit"] = plain_job("", 1)["spec"]["backoffLimit"]
    elif part == "band":
        pod["priorityClassName"] = LOW
    elif part == "env":
        del pod["containers"][0]["env"]
        spec["template"]["metadata"] = copy.deepcopy(plain_job("", 1)["spec"]["template"]["metadata"])
    else:
        raise ValueError(f"not a part of the operator's Job: {part!r} (one of {', '.join(SHAPE_PARTS)})")
    return job


def operator_objects(sj: dict[str, Any], *, services: bool = True,
                     without: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """What the operator writes to start a created SJ's first run, as it builds them: a gang's headless Service
    (``services``) and the run's Job (its pod failure policy, labels, environment, owner reference, the band's
    PriorityClass; ``without`` one of those as the plain Job has it: `without_part`), each as (kind, body)."""
    meta = sj["metadata"]
    spec = parse_spec(sj["spec"])
    job_name = run_job_name(meta["name"], 1)
    job = build_run_job(sj_name=meta["name"], namespace=meta["namespace"], sj_uid=meta["uid"], spec=spec,
                        status_interrupted_count=0, attempt=1, priority_class_name=launch_class(0),
                        extra_pod_labels={LABEL_PROTECTED: "false"})
    service = ([("Service", build_gang_service(job_name=job_name, namespace=meta["namespace"], sj_name=meta["name"],
                                               sj_uid=meta["uid"]))] if spec.is_gang and services else [])
    return [*service, ("Job", job if without is None else without_part(job, without))]


def operator_record(sj: dict[str, Any], job: dict[str, Any],
                    now: datetime) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """What the operator writes of a created SJ whose first run (``job``, as `operator_objects` builds it) starts
    at once, as its own state machine says: the status patch that records the run as Running, and the Events it
    records (reason, message: ``Launched`` when the Job is made, then the transition's)."""
    meta, spec = sj["metadata"], parse_spec(sj["spec"])
    status = ScavengerJobStatus()
    made = job_view({**job, "metadata": {**job["metadata"], "uid": f"{meta['uid']}-r1",
                                         "creationTimestamp": now.isoformat()},
                     "status": {"startTime": now.isoformat()}})
    pods = tuple(PodView(namespace=meta["namespace"], name=f"{made.name}-{i}", uid=f"{made.name}-{i}",
                         sj=meta["name"], run=made.name, node="node", phase="Running", deleting=False,
                         requests={}, all_running=True, index=i, started=now, placed=now)
                 for i in range(spec.parallelism))
    launch = launched(status, now, job_name=made.name, priority_class_name=launch_class(0), pods=spec.parallelism)
    record = step(spec, status, Run(made, pods), now, LifecycleConfig(), sj_name=meta["name"])
    if record.status.phase is None or record.status.phase.value != "Running":
        raise AssertionError(f"the state machine did not record {meta['name']}'s run as Running: {record}")
    return record.status.to_patch(), [(ev.reason, ev.message) for ev in (*launch.events, *record.events)]


def recorded(custom: client.CustomObjectsApi, core: client.CoreV1Api, sj: dict[str, Any], job: dict[str, Any]) -> None:
    """Writes what the operator writes of ``sj``'s run (`operator_record`): its status patch and its Events, as
    the operator fills them (`kube.event_body`)."""
    now = datetime.now(UTC)
    patch, events = operator_record(sj, job, now)
    record_status(custom, sj, patch)
    for i, (reason, message) in enumerate(events):
        record_event(core, sj, reason, message, now, i)


def record_status(custom: client.CustomObjectsApi, sj: dict[str, Any], patch: dict[str, Any]) -> None:
    """Patches ``sj``'s status with ``patch``, as the operator writes it."""
    meta = sj["metadata"]
    retrying(lambda: custom.patch_namespaced_custom_object_status(GROUP, VERSION, meta["namespace"], PLURAL,
                                                                  meta["name"], {"status": patch}))


def record_event(core: client.CoreV1Api, sj: dict[str, Any], reason: str, message: str, now: datetime,
                 i: int = 0) -> None:
    """One Event about ``sj`` as the operator records it (`kube.event_body`; ``i`` keeps the names of one step's
    Events apart)."""
    meta = sj["metadata"]
    body = event_body(f"{meta['name']}.{time.time_ns() + i:x}", namespace=meta["namespace"], name=meta["name"],
                      uid=meta["uid"], kind=KIND, api_version=API_VERSION, type_="Normal", reason=reason,
                      message=message, component="scavenger", instance="scavenger", at=now, first=now, count=1)
    retrying(lambda: core.create_namespaced_event(meta["namespace"], body))


def ceiling_run(api: client.ApiClient, work: Workload, threads: int, period: str, result: Result, *,
                standby: bool = False, as_operator: bool = False, services: bool = True,
                without: str | None = None, records: bool = False) -> None:
    """The most any operator could do on this cluster: the SJs created as in the operator's run (``threads``
    at a time), and each one's plain Job created as soon as its SJ exists, by as many threads again, with no
    operator running: an operator that costs nothing and writes nothing but the Jobs. The API server's work
    per unit is then the user's create plus the one write no operator can skip; the Jobs' pods follow as
    they do for the floor, and its time to running is theirs (`pods_running`). Nothing runs after (no stream).

    ``standby``: the same with a replica of the operator watching as the operator does and deciding
    nothing (`scavenger.standby`): what watching alone costs an operator, before any decision or
    write of its own.

    ``as_operator``: the same with each SJ's Job and a gang's Service as the operator builds them
    (`operator_objects`) in place of the plain Job: what the objects an operator must write cost this cluster,
    apart from the operator's process; without ``services``, its Jobs alone (what the gangs' Services cost is
    the difference); with ``without``, those Jobs with one part as the plain Job has it (`without_part`: what
    that part costs is the difference from the Jobs whole).

    ``records`` (with ``as_operator``): the same, and each SJ's run recorded as the operator records a run that
    starts at once (`operator_record`: its status patch as Running, its ``Launched`` and ``Running`` Events), each
    written as soon as the SJ's objects are made: what an operator that writes what it must (its objects and its
    record of them) costs the cluster, apart from its process and from when it writes."""
    batch, core, custom = client.BatchV1Api(api), client.CoreV1Api(api), client.CustomObjectsApi(api)
    run, what = ((without_run(without), f"the ceiling of the operator's Jobs without their {without}")
                 if as_operator and without is not None
                 else ("ceiling_watched", "the ceiling watched") if standby
                 else ("ceiling_recorded", "the ceiling of the operator's objects and records")
                 if as_operator and records
                 else ("ceiling_shaped", "the ceiling of the operator's objects") if as_operator and services
                 else ("ceiling_shaped_jobs", "the ceiling of the operator's Jobs") if as_operator
                 else ("ceiling", "the ceiling"))
    created = result.ceiling_created if run == "ceiling" else []
    made: dict[int, dict[str, Any]] = {}
    if as_operator:
        for body in priority_class_objects():  # as the operator makes them when it starts
            with suppress(ApiException):
                client.SchedulingV1Api(api).create_priority_class(body)
    with run_namespace(api, NAMESPACES, f"{what}'s", followed=True) as namespace:
        made_as = "run as the operator builds it" if as_operator else "plain Job"
        log(f"{what}: {len(work.gangs)} SJs, each one's {made_as} made once it exists, in {namespace} "
            f"({'a standby replica of the operator watching' if standby else 'no operator'})")
        standby_log = scratch(f"bench-scale-standby-{namespace}.log")
        with scavenger.standby(api, namespace, standby_log) if standby else nullcontext() as replica:
            apiserver = apiserver_cpu()
            replica_cpu = CpuSince.of_pid(replica.pid) if replica is not None else None
            account = Account.begun(api, {"standby": replica.pid} if replica is not None else None)
            start = time.monotonic()

            def create_sj(i: int) -> None:
                made[i] = retrying(lambda: custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, scavenger_job(f"sj-{i:05d}", work.gangs[i], period)))

            def create_job(i: int) -> None:
                sj = made.pop(i)
                objects = (operator_objects(sj, services=services, without=without) if as_operator
                           else [("Job", plain_job(f"sj-{i:05d}-r1", work.gangs[i]))])
                for kind, body in objects:
                    create = core.create_namespaced_service if kind == "Service" else batch.create_namespaced_job
                    retrying(lambda: create(namespace, body))  # noqa: B023 (called here, in this iteration)
                created.append(time.monotonic() - start)
                if records:
                    recorded(custom, core, sj, objects[-1][1])

            in_parallel_then(create_sj, create_job, len(work.gangs), threads, "SJs created")
            took = time.monotonic() - start
            creation_figures(result, run, len(work.gangs), took, apiserver)
            note = ""
            if replica_cpu is not None:
                result.figures["standby_cpu_seconds"] = replica_cpu.seconds()
                note = f"; the standby replica's CPU meanwhile {result.figures['standby_cpu_seconds']:.1f}s"
            log(f"  all {len(work.gangs)} SJs' Jobs created {took:.1f}s after the first SJ "
                f"({len(work.gangs) / took:.0f} units/s){note}")
            result.figures[f"{run}_running_seconds"] = pods_running(batch, namespace, work.pods, start,
                                                                    f"{what}'s pods running")
            to_running(result, run, account)
            result.figures.update({f"{run}_{k}": v for k, v in job_sync_lag(batch, namespace).items()})


def operator_run(api: client.ApiClient, work: Workload, threads: int, period: str, result: Result,
                 settle: float, *, followed: bool = False, profile: Path | None = None,
                 profile_burst: bool = False, nice: int = 0) -> None:
    """The SJs' burst with the operator running as its own process, until every SJ runs; then the stream."""
    port = free_port()
    with run_namespace(api, NAMESPACES, "the operator's", followed=followed) as namespace:
        logfile = scratch(f"bench-scale-operator-{namespace}.log")
        log(f"the operator: {len(work.gangs)} SJs ({work.pods} pods) in {namespace} (operator log {logfile})")
        rec = RecorderProcess(namespace)
        try:
            with (scavenger.leading(namespace, port, logfile, nice=nice) as proc,
                  profiled(proc.pid, profile, "the operator") as stop_profile):
                rec.start()
                account = Account.begun(api, {"operator": proc.pid})
                start = sj_burst(api, namespace, work, threads, period, result, port, rec, CpuSince.of_pid(proc.pid),
                                 stop_profile if profile_burst else lambda: None)
                sjs_running(api, namespace, len(work.gangs), port, start, result)
                to_running(result, "operator", account)
                steady = scrape(port)
                time.sleep(settle)
                before = scrape(port)
                steering(steady, before, period, result)
                log(f"  the stream: {len(work.arrivals)} high-priority pods")
                Stream(client.CoreV1Api(api), namespace, work.arrivals, high_pod).run()
                time.sleep(60)  # the last victims stop (grace period 1 s) and their interruptions are recorded
                after = scrape(port)
                result.figures["operator_peak_rss_mib"] = peak_rss_mib(proc.pid)
                result.figures.update(loop_lag(after))
                counted = counts(after)
                result.figures.update(counted)
                interrupted = sum(v - before.get(k, 0) for k, v in after.items()
                                  if k.startswith("scavenger_interruptions_total{"))
                result.figures["operator_interruptions"] = interrupted
                result.lost_operator = lost_by_sjs(client.CustomObjectsApi(api), namespace, period)
                log(f"  {interrupted:.0f} SJ runs interrupted, {sum(result.lost_operator):.0f} pod-seconds of work "
                    f"lost; operator peak RSS {result.figures['operator_peak_rss_mib']:.0f} MiB; "
                    + ", ".join(f"{k.removeprefix('operator_').replace('_', ' ')} {v:.0f}"
                                for k, v in counted.items()))
        finally:
            rec.stop()


def steering(before: dict[str, float], after: dict[str, float], period: str, result: Result) -> None:
    """Victim steering while every SJ runs (between two scrapes): the routine toggles written and the share of
    each kind written before the next toggle of its run was due, which with the operator's defaults (3 levels,
    protected from level 1) is two thirds of a period after a run is to be protected, one third after a period
    began (`benchmarks.harness.metrics.toggle_lateness`)."""
    seconds = parse_duration(period).total_seconds()
    figures = toggle_lateness(before, after, {"protect": seconds * 2 / 3, "unprotect": seconds / 3})
    result.figures.update(figures)
    for toggle in ("protect", "unprotect"):
        if f"toggles_{toggle}" in figures:
            log(f"  {figures[f'toggles_{toggle}']:.0f} {toggle} toggles while all ran, "
                f"{figures[f'toggles_{toggle}_in_time_share']:.1%} in time, the slowest under "
                f"{figures[f'toggles_{toggle}_worst_le']:g}s")


def sj_burst(api: client.ApiClient, namespace: str, work: Workload, threads: int, period: str, result: Result,
             port: int, rec: RecorderProcess, operator_cpu: CpuSince, on_jobs: Callable[[], None]) -> float:
    """Every unit created as an SJ, ``threads`` at a time, until a watch has seen each one's Job: the rate, the
    latencies, and what the operator spent and wrote meanwhile (read after ``on_jobs()``, which stops the
    profile with ``--profile-burst``). When the first create began (monotonic)."""
    custom = client.CustomObjectsApi(api)
    apiserver = apiserver_cpu()
    names = [f"sj-{i:05d}" for i in range(len(work.gangs))]
    start = time.monotonic()
    took_create, created = timed_creates(
        lambda i: retrying(lambda: custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, scavenger_job(names[i], work.gangs[i], period))),
        names, threads, "SJs created")
    log(f"  all {len(names)} SJs created in {took_create:.1f}s; waiting for their Jobs")
    rec.wait(f"Jobs of all {len(names)} SJs", lambda: len(rec.job_seen) >= len(names), 3600)
    took = max(rec.job_seen[n] for n in names) - start
    on_jobs()
    apiserver_seconds, operator_seconds = apiserver.seconds(), operator_cpu.seconds()
    metrics = scrape(port)
    calls = calls_by_operation(metrics)
    written = writes(calls)
    result.operator_jobs = sorted(rec.job_seen[n] - start for n in names)
    result.latencies = sorted(rec.job_seen[n] - created[n] for n in names)
    result.figures.update({
        "operator_seconds": took, "operator_per_second": len(names) / took,
        "sj_create_seconds": took_create,
        "latency_p50": percentile(result.latencies, 0.5), "latency_p99": percentile(result.latencies, 0.99),
        "calls_per_sj": {op: n / len(names) for op, n in sorted(calls.items())},
        "writes_per_sj": sum(written.values()) / len(names),
        "writes_per_sj_without_gang_services": (sum(written.values())
                                                - written.get("create_namespaced_service", 0)) / len(names),
        "gangs": sum(1 for g in work.gangs if g > 1), "operator_cpu_seconds": operator_seconds,
        "operator_gc_seconds_to_jobs": loop_lag(metrics)["gc_seconds"],
    })
    if apiserver_seconds is not None:
        result.figures["operator_apiserver_cores"] = apiserver_seconds / took
    log(f"  all {len(names)} Jobs after {took:.1f}s ({len(names) / took:.0f} SJs/s); create -> Job "
        f"p50 {result.figures['latency_p50']:.1f}s p99 {result.figures['latency_p99']:.1f}s")
    return start


def sjs_running(api: client.ApiClient, namespace: str, units: int, port: int, start: float,
                result: Result) -> None:
    """Waits until `RUNNING` of the SJs run (as the operator counts them, every `POLL` seconds): how long that took
    from the first create, the Job controller's lag, and the operator's writes per SJ by then (steering's for the
    SJs that ran a period by then included; the unit test of the controller counts a single-pod SJ's own writes:
    four)."""
    scavenger.wait_running(port, units, RUNNING, timeout=RUN_TIMEOUT, every=POLL)
    result.figures["operator_running_seconds"] = time.monotonic() - start
    result.figures.update({f"operator_{k}": v for k, v in job_sync_lag(client.BatchV1Api(api), namespace).items()})
    calls = calls_by_operation(scrape(port))
    result.figures["writes_per_sj_to_running"] = sum(writes(calls).values()) / units
    result.figures["writes_per_sj_to_running_by"] = {op: n / units for op, n in sorted(writes(calls).items())}
    log(f"  {RUNNING:.1%} of the SJs Running {result.figures['operator_running_seconds']:.0f}s after the first create")


def kueue_run(api: client.ApiClient, work: Workload, threads: int, result: Result, nodes: int,
              node_cpu: int) -> None:
    """The same burst as plain Jobs through Kueue: from the first create until Kueue started the last, and until
    `RUNNING` of their pods run (as for the floor)."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    workdir = scratch(unique("bench-scale-kueue"))
    workdir.mkdir(parents=True)
    logfile = workdir / "kueue.log"
    namespace = create_namespace(core, NAMESPACES)
    log(f"Kueue {kueue.VERSION}: {len(work.gangs)} Jobs ({work.pods} pods) in {namespace} (Kueue log {logfile})")
    try:
        # Its ClusterQueue's quota is the operator's threshold of the benchmark's nodes.
        with kueue.queueing(api, namespace, workdir, logfile, cpu=str(int(THRESHOLD * nodes * node_cpu)),
                            memory=f"{int(THRESHOLD * nodes * NODE_MEMORY_GI)}Gi") as proc:
            started: dict[str, float] = {}
            stop = threading.Event()
            watcher = kueue.watch_started_jobs(namespace, stop, started)
            names = [f"job-{i:05d}" for i in range(len(work.gangs))]
            apiserver, kueue_cpu = apiserver_cpu(), CpuSince.of_pid(proc.pid)
            account, start = Account.begun(api, {"kueue": proc.pid}), time.monotonic()
            took_create, created = timed_creates(
                lambda i: retrying(lambda: batch.create_namespaced_job(
                    namespace, kueue.queued(plain_job(names[i], work.gangs[i])))),
                names, threads, "Kueue's Jobs created")
            log(f"  all {len(names)} Jobs created in {took_create:.1f}s; waiting for Kueue to start them")
            wait_until("Jobs started by Kueue", lambda: (len(started) >= len(names),
                                                         f"{len(started)}/{len(names)}"), timeout=RUN_TIMEOUT, every=5)
            took = max(started.values()) - start
            apiserver_seconds, kueue_seconds = apiserver.seconds(), kueue_cpu.seconds()
            stop.set()
            watcher.join(30)
            result.figures["kueue_running_seconds"] = pods_running(batch, namespace, work.pods, start,
                                                                   "Kueue's pods running")
            to_running(result, "kueue", account)
            result.kueue_started = sorted(t - start for t in started.values())
            result.kueue_latencies = sorted(started[n] - created[n] for n in names)
            result.figures.update({
                "kueue_version": kueue.VERSION, "kueue_seconds": took, "kueue_per_second": len(names) / took,
                "kueue_create_seconds": took_create,
                "kueue_latency_p50": percentile(result.kueue_latencies, 0.5),
                "kueue_latency_p99": percentile(result.kueue_latencies, 0.99),
                "kueue_cpu_seconds": kueue_seconds, "kueue_peak_rss_mib": peak_rss_mib(proc.pid),
            })
            if apiserver_seconds is not None:
                result.figures["kueue_apiserver_cores"] = apiserver_seconds / took
            log(f"  all {len(names)} Jobs started after {took:.1f}s ({len(names) / took:.0f}/s); create -> started "
                f"p50 {result.figures['kueue_latency_p50']:.1f}s p99 {result.figures['kueue_latency_p99']:.1f}s; "
                f"Kueue peak RSS {result.figures['kueue_peak_rss_mib']:.0f} MiB")
    finally:
        with suppress(ApiException):
            core.delete_namespace(namespace)


def runs(api: client.ApiClient, args: argparse.Namespace, work: Workload, result: Result, keeper: Keeper) -> None:
    """The runs ``args`` asks for, in order, the result so far written after each (`Keeper.ran`)."""
    if not args.no_floor:
        floor_run(api, work, args.threads, result, args.settle)
        keeper.ran("the floor")
    for asked, run, kinds in ((args.ceiling, "the ceiling", {}), (args.ceiling_as_operator,
                              "the ceiling of the operator's objects", {"as_operator": True}),
                              (args.ceiling_operator_jobs, "the ceiling of the operator's Jobs",
                               {"as_operator": True, "services": False}),
                              (args.ceiling_recorded, "the ceiling of the operator's objects and records",
                               {"as_operator": True, "records": True}),
                              (args.standby, "the ceiling watched", {"standby": True}),
                              *((True, f"the ceiling of the operator's Jobs without their {part}",
                                 {"as_operator": True, "services": False, "without": part})
                                for part in args.ceiling_jobs_without or ())):
        if asked:
            ceiling_run(api, work, args.threads, args.period, result, **kinds)
            keeper.ran(run)
    operator_run(api, work, args.threads, args.period, result, args.settle,
                 followed=args.kueue or not (args.no_floor or args.floor_once), profile=args.profile,
                 profile_burst=args.profile_burst, nice=args.operator_nice)
    floor_means(result.figures)  # of the first floor alone until the second runs
    keeper.ran("the operator")
    if not args.no_floor and not args.floor_once:
        floor_again(api, work, args.threads, result, followed=args.kueue)
        keeper.ran("the floor again")
    if args.kueue:
        kueue_run(api, work, args.threads, result, args.nodes, args.node_cpu)
        keeper.ran("Kueue")


KWOK_NICE = 0
"""kwok's niceness during a run (``--kwok-nice``). At -10 (a CFS weight about nine times the rest's) the API server
still closed pod watches at 10,000 units (fca3fea: 6 in the floor, 93 in the recorded ceiling) and kwok's CPU grew
with them as at 0: the CPU kwok gets is not what keeps it behind. By default it runs as the rest of the cluster."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sjs", type=int, default=10_000, help="units of work (default 10000)")
    parser.add_argument("--nodes", type=int, default=1_000, help="kwok nodes made for the run (default 1000)")
    parser.add_argument("--node-cpu", type=int, default=8)
    parser.add_argument("--gang-share", type=float, default=0.1, help="share of units that are gangs (default 0.1)")
    parser.add_argument("--period", default="60s", help="the SJs' checkpoint period (default 60s)")
    parser.add_argument("--rate", type=float, default=0.5, help="high-priority pods per second (default 0.5)")
    parser.add_argument("--stream", type=float, default=120, help="seconds of high-priority arrivals (default 120)")
    parser.add_argument("--settle", type=float, default=240,
                        help="seconds the work runs before the stream starts (default 240: four periods)")
    parser.add_argument("--threads", type=int, default=8, help="client threads creating objects (default 8)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-floor", action="store_true",
                        help="skip the floor and plain Jobs' run (the operator alone: at 10,000 units the floor, its "
                             "stream and the deletion of its 18,000 pods take this cluster about 20 minutes)")
    parser.add_argument("--floor-once", action="store_true",
                        help="the floor before the operator's run only (A-B, not A-B-A): at 10,000 units on two cores "
                             "each floor, with its stream and its namespace's deletion, takes about 20 minutes")
    parser.add_argument("--operator-nice", type=int, default=0, metavar="N",
                        help="the operator's CPU niceness (default 0); at 19 it takes only the CPU the cluster leaves, "
                             "as on a cluster whose control plane has cores of its own")
    parser.add_argument("--kwok-nice", type=int, default=KWOK_NICE, metavar="N",
                        help=f"kwok's CPU niceness during the runs (default {KWOK_NICE}: as the rest of the cluster; "
                             "below 0 needs root). kwok stands for the nodes' agents, which have machines of their "
                             "own; a lower niceness gives it the CPU first")
    parser.add_argument("--ceiling", action="store_true",
                        help="after the floor, each unit's SJ and its Job created by the benchmark with no operator: "
                             "the most any operator could reach on this cluster")
    parser.add_argument("--ceiling-as-operator", action="store_true",
                        help="after the floor, the ceiling with each SJ's Job (and a gang's Service) as the operator "
                             "builds them: what the operator's objects cost the cluster, apart from its process")
    parser.add_argument("--ceiling-operator-jobs", action="store_true",
                        help="then the ceiling of the operator's objects without the gangs' headless Services: its "
                             "Jobs alone (what the Services cost is the difference)")
    parser.add_argument("--ceiling-recorded", action="store_true",
                        help="then the ceiling of the operator's objects with each SJ's run recorded as the operator "
                             "records it (a status patch, the Launched and Running Events): what the writes an "
                             "operator must make cost the cluster, apart from its process")
    parser.add_argument("--ceiling-jobs-without", nargs="+", choices=SHAPE_PARTS, metavar="PART",
                        help="then the ceiling of the operator's Jobs again for each PART, with that part as the plain "
                             f"Job has it ({', '.join(SHAPE_PARTS)}): what each part of their shape costs")
    parser.add_argument("--standby", action="store_true",
                        help="then the ceiling again with a standby replica of the operator watching (deciding "
                             "nothing): what watching alone costs")
    parser.add_argument("--plot", type=Path, help="write the plot (PNG) here")
    results.add_arguments(parser)
    parser.add_argument("--profile", type=Path,
                        help="sample the operator with py-spy while it runs; its stacks go here (collapsed)")
    parser.add_argument("--profile-burst", action="store_true",
                        help="with --profile: sample only until every SJ's Job exists (the burst)")
    parser.add_argument("--profile-control-plane", action="store_true",
                        help="with each run, the API server's and the controller manager's CPU profiles (Go's pprof, "
                             f"{PROFILE_WINDOW}-s windows from the first create until running), summed by what spent "
                             "it: the controller, the kind of request (the profiler costs them a few percent)")
    parser.add_argument("--kueue", action="store_true",
                        help=f"then the same burst through Kueue {kueue.VERSION} (hack/build-binaries kueue builds it)")
    args = parser.parse_args()
    if args.profile_burst and args.profile is None:
        parser.error("--profile-burst needs --profile FILE")
    if args.floor_once and args.no_floor:
        parser.error("--floor-once runs the first floor, --no-floor none: give one of them")
    if not os.environ.get("KUBECONFIG"):
        parser.error("no cluster: set KUBECONFIG (make bench-scale starts the local cluster)")
    Account.profiling = args.profile_control_plane
    config.load_kube_config()
    client.Configuration._default.connection_pool_maxsize = 32
    api = client.ApiClient()
    work = workload(args.sjs, args.gang_share, args.rate, args.stream, args.node_cpu, args.seed)
    result = Result()
    keeper = Keeper(args, result, pods=work.pods, high_pods=len(work.arrivals))
    core = client.CoreV1Api(api)
    with claimed(api, "bench_scale"):
        earlier_runs_gone(api, NAMESPACES)
        ensure_crd(api)
        log(f"{args.nodes} kwok nodes of {args.node_cpu} CPU for the run")
        try:
            allocatable = {"cpu": str(args.node_cpu), "memory": f"{NODE_MEMORY_GI}Gi", "pods": "110"}
            # Named anew for each run: the node controller of a run just before may still be marking the pods of
            # its deleted nodes not ready, by node name, and would mark this run's pods on nodes of the same names.
            prefix = unique("scale")
            make_kwok_nodes(core, [f"{prefix}-{i:04d}" for i in range(args.nodes)], allocatable, SELECTOR, [TAINT],
                            args.threads)
            with (niced(KWOK, args.kwok_nice) if args.kwok_nice else nullcontext(),
                  priority_classes(client.SchedulingV1Api(api), {LOW: -100, HIGH: 1000})):
                runs(api, args, work, result, keeper)
        finally:
            delete_nodes(core, SELECTOR)
    keeper.conclude(units=len(work.gangs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
