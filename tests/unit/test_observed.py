"""Parsing what the cluster reports (sj_operator.observed): raw API dicts in, exact views out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sj_operator.observed import (
    JobView,
    NodeInfo,
    PodView,
    Termination,
    job_view,
    node_info,
    pod_requests,
    pod_view,
    remember_disrupted,
    with_disrupted,
)

GI = 2**30 * 1000  # milli-units
MI = 2**20 * 1000
POD = {"pods": 1000}
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def container(name: str = "main", requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None,
              **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "busybox:1.36", "resources": resources, **extra}


def sidecar(name: str, requests: dict[str, Any]) -> dict[str, Any]:
    return container(name, requests, restartPolicy="Always")


# ----------------------------------------------------------------------------- pod_requests

REQUESTS: list[tuple[str, dict[str, Any], dict[str, int]]] = [
    ("no containers", {}, POD),
    ("container without resources", {"containers": [container()]}, POD),
    ("one container", {"containers": [container(requests={"cpu": "500m", "memory": "1Gi"})]},
     {"cpu": 500, "memory": GI, **POD}),
    ("containers summed", {"containers": [
        container("a", {"cpu": "500m", "memory": "1Gi"}),
        container("b", {"cpu": "1", "memory": "512Mi"}),
        container("c", {"cpu": 0.25}),
    ]}, {"cpu": 1750, "memory": GI + 512 * MI, **POD}),
    ("integer and exponent quantities", {"containers": [container(requests={"cpu": 2, "memory": "1e3"})]},
     {"cpu": 2000, "memory": 1_000_000, **POD}),
    ("extended resources kept", {"containers": [container(requests={"nvidia.com/gpu": "1", "cpu": "100m"})]},
     {"nvidia.com/gpu": 1000, "cpu": 100, **POD}),
    ("limits ignored when requests are given",
     {"containers": [container(requests={"cpu": "250m", "memory": "64Mi"}, limits={"cpu": "2", "memory": "1Gi"})]},
     {"cpu": 250, "memory": 64 * MI, **POD}),
    ("limits-only container: requests default to limits",
     {"containers": [container(limits={"cpu": "2", "memory": "1Gi"})]}, {"cpu": 2000, "memory": GI, **POD}),
    ("limits-only container beside a requesting one", {"containers": [
        container("a", requests={"cpu": "500m"}),
        container("b", limits={"cpu": "1", "memory": "256Mi"}),
    ]}, {"cpu": 1500, "memory": 256 * MI, **POD}),
    ("a missing request defaults to that resource's limit",
     {"containers": [container(requests={"cpu": "100m"}, limits={"cpu": "1", "memory": "1Gi"})]},
     {"cpu": 100, "memory": GI, **POD}),
    ("init container larger than the containers wins", {
        "initContainers": [container("init", {"cpu": "2", "memory": "128Mi"})],
        "containers": [container("a", {"cpu": "500m", "memory": "1Gi"}), container("b", {"cpu": "500m"})],
    }, {"cpu": 2000, "memory": GI, **POD}),
    ("init containers: the largest, not their sum", {
        "initContainers": [container("i1", {"cpu": "3"}), container("i2", {"cpu": "2", "memory": "2Gi"})],
        "containers": [container("a", {"cpu": "1", "memory": "1Gi"})],
    }, {"cpu": 3000, "memory": 2 * GI, **POD}),
    ("init container smaller than the containers", {
        "initContainers": [container("init", {"cpu": "100m"})],
        "containers": [container("a", {"cpu": "1"})],
    }, {"cpu": 1000, **POD}),
    ("limits-only init container", {
        "initContainers": [container("init", limits={"memory": "4Gi"})],
        "containers": [container("a", {"cpu": "1", "memory": "1Gi"})],
    }, {"cpu": 1000, "memory": 4 * GI, **POD}),
    ("sidecar runs beside the containers: summed", {
        "initContainers": [sidecar("proxy", {"cpu": "200m", "memory": "128Mi"})],
        "containers": [container("a", {"cpu": "1", "memory": "1Gi"})],
    }, {"cpu": 1200, "memory": GI + 128 * MI, **POD}),
    ("init container after a sidecar runs beside it", {
        "initContainers": [sidecar("proxy", {"cpu": "500m"}), container("migrate", {"cpu": "2"})],
        "containers": [container("a", {"cpu": "1"})],
    }, {"cpu": 2500, **POD}),
    ("init container before a sidecar runs alone", {
        "initContainers": [container("setup", {"cpu": "2"}), sidecar("proxy", {"cpu": "500m"})],
        "containers": [container("a", {"cpu": "1"})],
    }, {"cpu": 2000, **POD}),
    ("overhead added to the containers", {
        "containers": [container("a", {"cpu": "1", "memory": "1Gi"})],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
    }, {"cpu": 1250, "memory": GI + 120 * MI, **POD}),
    ("overhead added after the init maximum", {
        "initContainers": [container("init", {"cpu": "4"})],
        "containers": [container("a", {"cpu": "1"})],
        "overhead": {"cpu": "100m"},
    }, {"cpu": 4100, **POD}),
    ("overhead only", {"overhead": {"memory": "64Mi"}}, {"memory": 64 * MI, **POD}),
    ("unparsable quantity skipped", {"containers": [container(requests={"cpu": "lots", "memory": "1Gi"})]},
     {"memory": GI, **POD}),
    ("null fields", {"containers": None, "initContainers": None, "overhead": None}, POD),
]


@pytest.mark.parametrize(("spec", "expected"), [c[1:] for c in REQUESTS], ids=[c[0] for c in REQUESTS])
def test_pod_requests(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert pod_requests(spec) == expected


# ----------------------------------------------------------------------------- pod_view

RUN_LABELS = {"scavenger.dev/job-name": "demo", "scavenger.dev/run": "demo-r1"}
SPEC = {"nodeName": "kwok-node-0", "containers": [container(requests={"cpu": "500m", "memory": "256Mi"})]}
REQ = {"cpu": 500, "memory": 256 * MI, **POD}


def pod(*, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "work", "name": "demo-r1-0-abcde", "uid": "u-1",
                     "labels": RUN_LABELS if labels is None else labels, "annotations": annotations or {}, **meta},
        "spec": SPEC if spec is None else spec,
        "status": status or {},
    }


def view(**fields: Any) -> PodView:
    base: dict[str, Any] = dict(namespace="work", name="demo-r1-0-abcde", uid="u-1", sj="demo", run="demo-r1",
                                node="kwok-node-0", phase="Pending", deleting=False, requests=REQ)
    return PodView(**{**base, **fields})


def running(name: str = "main") -> dict[str, Any]:
    return {"name": name, "state": {"running": {"startedAt": "2025-03-01T12:00:05Z"}}}


def terminated(name: str = "main", code: int = 0, reason: str = "Completed") -> dict[str, Any]:
    return {"name": name, "state": {"terminated": {"exitCode": code, "reason": reason}}}


PREEMPTED = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
             "message": "Preempted in order to admit critical pod"}

NO_ROOM = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
           "message": "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
           "lastTransitionTime": "2025-03-01T12:00:00Z"}

PODS: list[tuple[str, dict[str, Any], PodView]] = [
    ("pending, unscheduled", pod(spec={"containers": SPEC["containers"]}, status={"phase": "Pending"}),
     view(node=None)),
    ("empty status defaults to Pending", pod(), view()),
    ("empty body", {}, PodView(namespace="", name="", uid="", sj=None, run=None, node=None, phase="Pending",
                               deleting=False, requests=POD)),
    ("not an SJ pod", pod(labels={"app": "web"}, status={"phase": "Running"}),
     view(sj=None, run=None, phase="Running")),
    ("running, all containers running",
     pod(status={"phase": "Running", "startTime": "2025-03-01T12:00:00Z",
                 "containerStatuses": [running("a"), running("b")]}),
     view(phase="Running", all_running=True, started=T0)),
    ("running, one container still waiting",
     pod(status={"phase": "Running", "containerStatuses": [
         running("a"), {"name": "b", "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
     view(phase="Running")),
    ("running, no container statuses yet", pod(status={"phase": "Running"}), view(phase="Running")),
    ("all running containers but phase Pending", pod(status={"phase": "Pending", "containerStatuses": [running()]}),
     view()),
    ("succeeded", pod(status={"phase": "Succeeded", "containerStatuses": [terminated()]}),
     view(phase="Succeeded", terminations=(Termination("main", 0, "Completed"),))),
    ("failed: every termination, in order",
     pod(status={"phase": "Failed", "containerStatuses": [terminated("a", 3, "Error"), running("b"),
                                                          terminated("c", 137, "")]}),
     view(phase="Failed", terminations=(Termination("a", 3, "Error"), Termination("c", 137, "")))),
    ("termination without exit code or name",
     pod(status={"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": None}}}]}),
     view(phase="Failed", terminations=(Termination("?", 0, ""),))),
    ("preempted: DisruptionTarget reason and message",
     pod(status={"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}, PREEMPTED],
                 "containerStatuses": [running()]}),
     view(phase="Running", all_running=True,
          disruption=("PreemptionByScheduler", "Preempted in order to admit critical pod"))),
    ("evicted, then ended by the kubelet",
     pod(deletionTimestamp="2025-03-01T12:01:00Z",
         status={"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "True",
                                                    "reason": "EvictionByEvictionAPI",
                                                    "message": "Eviction API: evicting"}],
                 "containerStatuses": [terminated(code=137, reason="Error")]}),
     view(phase="Failed", deleting=True, disruption=("EvictionByEvictionAPI", "Eviction API: evicting"),
          terminations=(Termination("main", 137, "Error"),))),
    ("preempted, then exited 0: when it was told to stop and when it stopped",
     pod(status={"phase": "Succeeded", "conditions": [{**PREEMPTED, "lastTransitionTime": "2025-03-01T12:00:00Z"}],
                 "containerStatuses": [{"name": "main", "state": {"terminated": {
                     "exitCode": 0, "reason": "Completed", "finishedAt": "2025-03-01T12:00:07Z"}}}]}),
     view(phase="Succeeded", disruption=("PreemptionByScheduler", "Preempted in order to admit critical pod"),
          disrupted_at=T0, terminations=(Termination("main", 0, "Completed", T0 + timedelta(seconds=7)),))),
    ("DisruptionTarget without reason or message",
     pod(status={"phase": "Running", "conditions": [{"type": "DisruptionTarget", "status": "True"}]}),
     view(phase="Running", disruption=("DisruptionTarget", ""))),
    ("DisruptionTarget False is no disruption",
     pod(status={"phase": "Running", "conditions": [{**PREEMPTED, "status": "False"}]}), view(phase="Running")),
    ("deleted from outside", pod(deletionTimestamp="2025-03-01T12:01:00Z", status={"phase": "Running"}),
     view(phase="Running", deleting=True)),
    ("completion index from the annotation",
     pod(annotations={"batch.kubernetes.io/job-completion-index": "3"}), view(index=3)),
    ("completion index from the label",
     pod(labels={**RUN_LABELS, "batch.kubernetes.io/job-completion-index": "0"}), view(index=0)),
    ("annotation wins over label",
     pod(labels={**RUN_LABELS, "batch.kubernetes.io/job-completion-index": "1"},
         annotations={"batch.kubernetes.io/job-completion-index": "2"}), view(index=2)),
    ("non-numeric index ignored", pod(annotations={"batch.kubernetes.io/job-completion-index": "x1"}), view()),
    ("protected", pod(labels={**RUN_LABELS, "scavenger.dev/protected": "true"}), view(protected=True)),
    ("protected=false", pod(labels={**RUN_LABELS, "scavenger.dev/protected": "false"}), view()),
    ("unparsable start time", pod(status={"phase": "Pending", "startTime": "yesterday"}), view()),
    # A run's own pod too: its run still reads it as placed and pending (its start timeout, its room in flight).
    ("no room: placed when the scheduler first found none, left out of the threshold",
     pod(spec={"containers": SPEC["containers"]}, status={"phase": "Pending", "conditions": [NO_ROOM]}),
     view(node=None, placed=T0, unschedulable=True)),
    ("no room, an empty nominated node: none",
     pod(spec={"containers": SPEC["containers"]}, status={"phase": "Pending", "conditions": [NO_ROOM],
                                                          "nominatedNodeName": ""}),
     view(node=None, placed=T0, unschedulable=True)),
    ("no room, named the default scheduler: left out",
     pod(spec={"containers": SPEC["containers"], "schedulerName": "default-scheduler"},
         status={"phase": "Pending", "conditions": [NO_ROOM]}),
     view(node=None, placed=T0, unschedulable=True)),
    ("no room by a scheduler not counted: unclaimed",
     pod(spec={"containers": SPEC["containers"], "schedulerName": "volcano"},
         status={"phase": "Pending", "conditions": [NO_ROOM]}),
     view(node=None, placed=T0, unclaimed=True)),
    ("names a scheduler not counted, not looked at: unclaimed",
     pod(spec={"containers": SPEC["containers"], "schedulerName": "nobody-runs-this"}),
     view(node=None, unclaimed=True)),
    ("bound, naming a scheduler not counted: it counts as every bound pod",
     pod(spec={**SPEC, "schedulerName": "nobody-runs-this"}), view()),
    ("a schedulerName that is not a string is the default scheduler's",
     pod(spec={"containers": SPEC["containers"], "schedulerName": ["volcano"]}), view(node=None)),
    ("an empty schedulerName is the default scheduler's",
     pod(spec={"containers": SPEC["containers"], "schedulerName": ""}), view(node=None)),
    ("scheduling gates: no scheduler places it until they are lifted, unclaimed",
     pod(spec={"containers": SPEC["containers"], "schedulingGates": [{"name": "example.com/hold"}]},
         status={"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                     "reason": "SchedulingGated"}]}),
     view(node=None, unclaimed=True)),
    ("gates lifted, the condition not updated yet: it counts",
     pod(spec={"containers": SPEC["containers"], "schedulingGates": []},
         status={"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                     "reason": "SchedulingGated"}]}),
     view(node=None)),
    ("no room, but the scheduler preempts for it on a nominated node: it counts",
     pod(spec={"containers": SPEC["containers"]}, status={"phase": "Pending", "conditions": [NO_ROOM],
                                                          "nominatedNodeName": "kwok-node-1"}),
     view(node=None, placed=T0)),
    ("bound, its no-room condition not updated yet: it counts",
     pod(status={"phase": "Pending", "conditions": [NO_ROOM]}), view(placed=T0)),
    ("PodScheduled False for another reason than no room: it counts",
     pod(spec={"containers": SPEC["containers"]}, status={"phase": "Pending", "conditions": [
         {**NO_ROOM, "reason": "SchedulerError"}]}), view(node=None, placed=T0)),
    ("bound: placed when bound", pod(creationTimestamp="2025-03-01T11:00:00Z", status={"conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-03-01T12:00:00Z"}]}),
     view(placed=T0)),
    ("bound without the condition: placed when made", pod(creationTimestamp="2025-03-01T12:00:00Z"),
     view(placed=T0)),
    ("not looked at yet", pod(creationTimestamp="2025-03-01T12:00:00Z", spec={"containers": SPEC["containers"]}),
     view(node=None)),
    ("gated: not looked at yet", pod(spec={"containers": SPEC["containers"]}, status={
        "phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                            "lastTransitionTime": "2025-03-01T12:00:00Z"}]}), view(node=None)),
    # In the scavenger band: from the class alone, never from the labels (a namespace may edit them).
    ("in the band", pod(spec={**SPEC, "priorityClassName": "scavenger-band-2"}), view(band=True)),
    ("in the band, its SJ labels taken off", pod(labels={}, spec={**SPEC, "priorityClassName": "scavenger-band-0"}),
     view(sj=None, run=None, band=True)),
    ("SJ labels without a class", pod(), view(band=False)),
    ("SJ labels in a class outside the band", pod(spec={**SPEC, "priorityClassName": "high-priority"}),
     view(band=False)),
    ("a class that only contains the band's name", pod(spec={**SPEC, "priorityClassName": "x-scavenger-band-0"}),
     view(band=False)),
    ("the band's name in capitals", pod(spec={**SPEC, "priorityClassName": "Scavenger-Band-0"}), view(band=False)),
    ("a class that is not a string", pod(spec={**SPEC, "priorityClassName": ["scavenger-band-0"]}),
     view(band=False)),
]


@pytest.mark.parametrize(("body", "expected"), [c[1:] for c in PODS], ids=[c[0] for c in PODS])
def test_pod_view(body: dict[str, Any], expected: PodView) -> None:
    assert pod_view(body) == expected


@pytest.mark.parametrize(("spec", "schedulers", "unclaimed", "unschedulable"), [
    # (the pod's spec past its containers, the schedulers counted, whether it is left out as unclaimed, as no room)
    ({"schedulerName": "volcano"}, {"default-scheduler"}, True, False),
    ({"schedulerName": "volcano"}, {"default-scheduler", "volcano"}, False, False),  # no room, yet counted
    ({}, {"volcano"}, True, True),  # the default scheduler's pod, not counted (and found no room)
    ({}, {"default-scheduler", "volcano"}, False, True),  # left out for no room only
    ({"schedulingGates": [{"name": "hold"}]}, {"default-scheduler"}, True, True),
    ({"schedulerName": "volcano", "schedulingGates": [{"name": "hold"}]}, {"volcano"}, True, False),
    ({"nodeName": "kwok-node-0", "schedulerName": "volcano"}, {"default-scheduler"}, False, False),  # bound
])
def test_a_pod_no_counted_scheduler_will_place_is_unclaimed(spec: dict[str, Any], schedulers: set[str],
                                                           unclaimed: bool, unschedulable: bool) -> None:
    body = pod(spec={"containers": SPEC["containers"], **spec}, status={"phase": "Pending", "conditions": [NO_ROOM]})
    seen = pod_view(body, frozenset(schedulers))
    assert (seen.unclaimed, seen.unschedulable) == (unclaimed, unschedulable)


@pytest.mark.parametrize(("phase", "terminal"), [("Pending", False), ("Running", False), ("Succeeded", True),
                                                 ("Failed", True), ("Unknown", False)])
def test_pod_terminal_and_holding_resources(phase: str, terminal: bool) -> None:
    v = pod_view(pod(status={"phase": phase}))
    assert (v.terminal, v.holds_resources) == (terminal, not terminal)


# ----------------------------------------------------------------------------- job_view


def job(conditions: list[dict[str, Any]] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"namespace": "work", "name": "demo-r1", "uid": "j-1", "labels": {"scavenger.dev/job-name": "demo"},
                     "creationTimestamp": "2025-03-01T12:00:00Z", **meta},
        "status": {"conditions": conditions} if conditions is not None else {},
    }


def jview(**fields: Any) -> JobView:
    base: dict[str, Any] = dict(namespace="work", name="demo-r1", uid="j-1", sj="demo", deleting=False,
                                complete=False, failed=False, created=T0)
    return JobView(**{**base, **fields})


def cond(type_: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


JOBS: list[tuple[str, dict[str, Any], JobView]] = [
    ("running", job(), jview()),
    ("empty body", {}, JobView(namespace="", name="", uid="", sj=None, deleting=False, complete=False,
                               failed=False)),
    ("Complete", job([cond("Complete", reason="CompletionsReached")]), jview(complete=True)),
    ("SuccessCriteriaMet (successPolicy) counts as complete",
     job([cond("SuccessCriteriaMet", reason="SuccessPolicy", message="Matched rules at index 0")]),
     jview(complete=True)),
    ("SuccessCriteriaMet then Complete",
     job([cond("SuccessCriteriaMet", reason="SuccessPolicy"), cond("Complete", reason="SuccessPolicy")]),
     jview(complete=True)),
    ("Complete False", job([cond("Complete", "False")]), jview()),
    ("Failed: reason and message",
     job([cond("FailureTarget", reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit"),
          cond("Failed", reason="BackoffLimitExceeded", message="Job has reached the specified backoff limit")]),
     jview(failed=True, failure="BackoffLimitExceeded: Job has reached the specified backoff limit")),
    ("Failed: reason only", job([cond("Failed", reason="DeadlineExceeded")]),
     jview(failed=True, failure="DeadlineExceeded")),
    ("Failed: message only", job([cond("Failed", message="pod failure policy matched")]),
     jview(failed=True, failure="pod failure policy matched")),
    ("Failed without reason or message keys", job([{"type": "Failed", "status": "True"}]),
     jview(failed=True, failure="")),
    ("Failed False", job([cond("Failed", "False", reason="BackoffLimitExceeded")]), jview()),
    ("Suspended is neither", job([cond("Suspended", reason="JobSuspended")]), jview()),
    ("being deleted", job(deletionTimestamp="2025-03-01T12:05:00Z"), jview(deleting=True)),
    ("not a run of an SJ", job(labels={"app": "other"}), jview(sj=None)),
    ("null conditions", {**job(), "status": {"conditions": None}}, jview()),
    ("taken up by the Job controller", {**job(), "status": {"startTime": "2025-03-01T12:00:00Z"}}, jview(started=T0)),
    ("unparsable start time", {**job(), "status": {"startTime": "soon"}}, jview()),
]


@pytest.mark.parametrize(("body", "expected"), [c[1:] for c in JOBS], ids=[c[0] for c in JOBS])
def test_job_view(body: dict[str, Any], expected: JobView) -> None:
    assert job_view(body) == expected


# ----------------------------------------------------------------------------- node_info


def node(*, spec: dict[str, Any] | None = None, conditions: list[dict[str, Any]] | None = None,
         labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "kwok-node-0", "labels": {"type": "kwok"} if labels is None else labels},
        "spec": spec or {},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                   "conditions": [cond("Ready", reason="KubeletReady")] if conditions is None else conditions},
    }


def ninfo(**fields: Any) -> NodeInfo:
    base: dict[str, Any] = dict(name="kwok-node-0", allocatable={"cpu": 8000, "memory": 32 * GI, "pods": 110_000},
                                labels={"type": "kwok"}, taints=(), unschedulable=False, ready=True)
    return NodeInfo(**{**base, **fields})


NODES: list[tuple[str, dict[str, Any], NodeInfo]] = [
    ("ready", node(), ninfo()),
    ("empty body", {}, NodeInfo(name="", allocatable={}, labels={}, taints=(), unschedulable=False, ready=False)),
    ("Ready False", node(conditions=[cond("Ready", "False", reason="KubeletNotReady")]), ninfo(ready=False)),
    ("Ready Unknown (node lost)", node(conditions=[cond("Ready", "Unknown", reason="NodeStatusUnknown")]),
     ninfo(ready=False)),
    ("no conditions", node(conditions=[]), ninfo(ready=False)),
    ("other conditions do not make it ready",
     node(conditions=[cond("MemoryPressure", "False"), cond("DiskPressure", "False")]), ninfo(ready=False)),
    ("taints: key, value, effect; missing value is empty",
     node(spec={"taints": [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"},
                           {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                            "timeAdded": "2025-03-01T12:00:00Z"},
                           {"key": "spot", "value": None, "effect": "PreferNoSchedule"}]}),
     ninfo(taints=(("dedicated", "batch", "NoSchedule"), ("node.kubernetes.io/unreachable", "", "NoExecute"),
                   ("spot", "", "PreferNoSchedule")))),
    ("cordoned", node(spec={"unschedulable": True, "taints": [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}),
     ninfo(unschedulable=True, taints=(("node.kubernetes.io/unschedulable", "", "NoSchedule"),))),
    ("labels copied", node(labels={"topology.kubernetes.io/zone": "a", "type": "kwok"}),
     ninfo(labels={"topology.kubernetes.io/zone": "a", "type": "kwok"})),
    ("null labels and taints", {**node(spec={"taints": None}), "metadata": {"name": "kwok-node-0", "labels": None}},
     ninfo(labels={})),
]


@pytest.mark.parametrize(("body", "expected"), [c[1:] for c in NODES], ids=[c[0] for c in NODES])
def test_node_info(body: dict[str, Any], expected: NodeInfo) -> None:
    assert node_info(body) == expected


@pytest.mark.parametrize(
    ("terminations", "finished"),
    [
        ((), None),
        ((Termination("a", 0, "", T0),), T0),
        ((Termination("a", 0, "", T0), Termination("b", 0, "", T0 + timedelta(seconds=3))), T0 + timedelta(seconds=3)),
        ((Termination("a", 0, "", T0), Termination("b", 0, "")), None),
    ],
    ids=["none-stopped", "one", "the-last-of-two", "a-time-missing"],
)
def test_pod_finished_is_when_its_last_container_stopped(terminations: tuple[Termination, ...],
                                                          finished: datetime | None) -> None:
    assert view(terminations=terminations).finished == finished


def member(uid: str, run: str = "demo-r1", **fields: Any) -> PodView:
    return view(uid=uid, name=f"{run}-{uid}", run=run, **fields)


PREEMPTION = ("PreemptionByScheduler", "Preempted in order to admit critical pod")


def test_remember_disrupted_keeps_only_run_members_told_to_stop() -> None:
    seen: dict[Any, PodView] = {}
    remember_disrupted(seen, member("a", phase="Running"))
    remember_disrupted(seen, view(uid="x", run=None, disruption=PREEMPTION))
    assert seen == {}
    deleted = member("b", phase="Running", deleting=True)
    remember_disrupted(seen, deleted)
    assert seen == {("work", "demo-r1", "b"): deleted}
    seen.clear()
    first = member("a", phase="Running", disruption=PREEMPTION)
    remember_disrupted(seen, first)
    last = member("a", phase="Succeeded", disruption=PREEMPTION)
    remember_disrupted(seen, last)
    assert seen == {("work", "demo-r1", "a"): last}


@pytest.mark.parametrize(
    ("run_pods", "seen", "jobs", "merged", "kept"),
    [
        # The preempted member that exited 0 was removed: it comes back, stopped.
        ({}, {("work", "demo-r1", "a"): member("a", phase="Succeeded", disruption=PREEMPTION)},
         {("work", "demo-r1"): "job"},
         {("work", "demo-r1"): (member("a", phase="Succeeded", disruption=PREEMPTION, deleting=True),)},
         {("work", "demo-r1", "a")}),
        # Last seen still running: it is gone now, so it holds nothing.
        ({("work", "demo-r1"): (member("b", phase="Running"),)},
         {("work", "demo-r1", "a"): member("a", phase="Running", disruption=PREEMPTION)},
         {("work", "demo-r1"): "job"},
         {("work", "demo-r1"): (member("b", phase="Running"),
                                member("a", phase="Failed", disruption=PREEMPTION, deleting=True))},
         {("work", "demo-r1", "a")}),
        # Still shown by the watch: the watch's view wins.
        ({("work", "demo-r1"): (member("a", phase="Running", disruption=PREEMPTION, deleting=True),)},
         {("work", "demo-r1", "a"): member("a", phase="Running", disruption=PREEMPTION)},
         {("work", "demo-r1"): "job"},
         {("work", "demo-r1"): (member("a", phase="Running", disruption=PREEMPTION, deleting=True),)},
         {("work", "demo-r1", "a")}),
        # The run's Job is gone: nothing to remember.
        ({}, {("work", "demo-r1", "a"): member("a", phase="Succeeded", disruption=PREEMPTION)}, {}, {}, set()),
    ],
    ids=["removed-after-exit-0", "removed-while-running", "still-watched", "job-gone"],
)
def test_with_disrupted(run_pods: dict[Any, tuple[PodView, ...]], seen: dict[Any, PodView], jobs: dict[Any, str],
                        merged: dict[Any, tuple[PodView, ...]], kept: set[Any]) -> None:
    got, remembered = with_disrupted(run_pods, seen, jobs)
    assert got == merged
    assert set(remembered) == kept
