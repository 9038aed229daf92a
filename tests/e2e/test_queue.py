"""The cluster-wide queue on the local cluster: threshold, order, backfill, the backoff hold, start timeout."""
from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from sj_operator.observed import pod_requests
from sj_operator.resources import to_milli
from tests.e2e.kube import dedicated_node, node_placement, scheduler_paused, sim_container, wait_for
from tests.e2e.scenarios import QUEUE_CONFIG, interrupted_sj_goes_before_an_older_one, run_that_cannot_start_is_retried
from tests.e2e.sj import create_sj, event_list, event_messages, jobs_of, run_pods, sj_spec, status, wait_phase

pytestmark = pytest.mark.kwok_only

# The anti-thrash backoff long enough to make room come back, and a later SJ ask for it, before it ends.
OPERATOR_CONFIG = {**QUEUE_CONFIG, "thrash_backoff": timedelta(seconds=12), "max_thrash_backoff": timedelta(seconds=24)}


def _cpu_milli(core: client.CoreV1Api) -> tuple[int, int, int]:
    """(requests of all non-terminated pods, requests of SJ pods, allocatable of schedulable nodes), in mCPU."""
    pods = core.list_pod_for_all_namespaces().items
    nodes = core.list_node().items
    api = client.ApiClient()
    total = sj = 0
    for pod in pods:
        if pod.status.phase in ("Succeeded", "Failed"):
            continue
        cpu = pod_requests(api.sanitize_for_serialization(pod.spec)).get("cpu", 0)
        total += cpu
        if "scavenger.dev/run" in (pod.metadata.labels or {}):
            sj += cpu
    alloc = sum(int(float(n.status.allocatable["cpu"]) * 1000) for n in nodes if not n.spec.unschedulable)
    return total, sj, alloc


def test_requests_never_exceed_the_threshold_while_others_wait(api, namespace, operator):
    core = client.CoreV1Api(api)
    names = [f"fill-{i:02d}" for i in range(12)]
    for name in names:
        create_sj(api, namespace, name, sj_spec(run_for=None, cpu="3", memory="1Gi"))
    threshold = operator.threshold
    deadline = time.monotonic() + 15
    samples = 0
    while time.monotonic() < deadline:
        total, _, alloc = _cpu_milli(core)
        assert total <= threshold * alloc, f"requests {total}m over {threshold:.0%} of {alloc}m"
        samples += 1
        time.sleep(0.3)
    phases = [status(api, namespace, n).get("phase") for n in names]
    running = phases.count("Running")
    assert running >= 1 and phases.count("Pending") >= 1, phases
    total, _sj, alloc = _cpu_milli(core)
    # Admission packs up to the threshold: one more 3-CPU SJ would cross it.
    assert total + 3000 > threshold * alloc, (total, alloc)
    assert samples > 10


def test_interrupted_sj_starts_before_an_older_never_run_sj(api, namespace, operator):
    with dedicated_node(cpu="4") as node:
        interrupted_sj_goes_before_an_older_one(api, namespace, node_placement(node), sj_cpu="3", owner_cpu="2")


def _admitted(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    """The SJ's Admitted condition, if it has one."""
    return next((c for c in status(api, namespace, name).get("conditions") or [] if c["type"] == "Admitted"), None)


def test_the_room_of_an_sj_backing_off_after_a_wasted_run_is_held_from_a_later_sj(api, namespace, operator):
    """Issue 43, point 6: an SJ interrupted within its first checkpoint period backs off; its room comes back
    during the backoff; an SJ created later, never interrupted, that needs the same room must not take it (and,
    running, keep it). When the backoff ends the interrupted SJ starts in its room; the later one waits."""
    core = client.CoreV1Api(api)
    with dedicated_node(cpu="4") as node:
        pinned = {"nodeSelector": node["nodeSelector"], "tolerations": node["tolerations"]}
        create_sj(api, namespace, "first", sj_spec(run_for=None, cpu="3", **pinned))
        wait_phase(api, namespace, "first", "Running")
        # A default-priority workload needs the room: the scheduler preempts the SJ seconds into its 30m period.
        core.create_namespaced_pod(namespace, {
            "metadata": {"name": "owner"},
            "spec": {"restartPolicy": "Never", **pinned, "containers": [sim_container(cpu="2")]},
        })
        st = wait_for("the interruption recorded", lambda: (s := status(api, namespace, "first")).get(
            "interruptedCount") == 1 and s, timeout=60)
        assert st["phase"] == "Interrupted" and st["wastedRuns"] == 1, st
        backing_off = _admitted(api, namespace, "first")
        assert backing_off is not None and backing_off["reason"] == "BackingOff", backing_off
        not_before = datetime.fromisoformat(st["notBefore"].replace("Z", "+00:00"))
        # The room comes back during the backoff: the owner leaves (and the operator sees it go before the later
        # SJ comes, so that the later SJ's first reason is the hold's).
        core.delete_namespaced_pod("owner", namespace, grace_period_seconds=0)
        wait_for("the owner gone", lambda: not core.list_namespaced_pod(
            namespace, field_selector="metadata.name=owner").items, timeout=30)
        time.sleep(1)
        create_sj(api, namespace, "later", sj_spec(run_for=None, cpu="3", **pinned))
        held = wait_for("the later SJ waiting for the room held for the first", lambda: (c := _admitted(
            api, namespace, "later")) and f"is held for {namespace}/first" in c.get("message", "") and c, timeout=30)
        assert datetime.now(UTC) < not_before, "seen during the backoff (a longer thrash_backoff is needed here)"
        assert held["status"] == "False" and held["reason"] == "NoNodeFitsGang", held
        assert status(api, namespace, "later")["phase"] == "Pending" and jobs_of(api, namespace, "later") == []
        # The backoff ends: the interrupted SJ starts in its room, and the later one still waits.
        st = wait_phase(api, namespace, "first", "Starting", "Running", timeout=60)
        assert st["jobName"] == "first-r2" and st["interruptedCount"] == 1
        time.sleep(3)  # several passes
        assert status(api, namespace, "later")["phase"] == "Pending"
        assert jobs_of(api, namespace, "later") == []


def test_small_sj_backfills_while_a_large_one_waits(api, namespace, operator):
    core = client.CoreV1Api(api)
    with dedicated_node(cpu="4") as node:
        pinned = {"nodeSelector": node["nodeSelector"], "tolerations": node["tolerations"]}
        core.create_namespaced_pod(namespace, {
            "metadata": {"name": "tenant"},
            "spec": {**pinned, "containers": [sim_container(cpu="2")]},
        })
        wait_for("tenant running", lambda: core.read_namespaced_pod("tenant", namespace).status.phase == "Running")
        create_sj(api, namespace, "large", sj_spec(run_for=None, cpu="3", **pinned))
        time.sleep(1.1)
        create_sj(api, namespace, "small", sj_spec(run_for=None, cpu="1", **pinned))
        wait_phase(api, namespace, "small", "Running")
        time.sleep(3)  # several passes
        assert status(api, namespace, "large")["phase"] == "Pending"
        assert jobs_of(api, namespace, "large") == []


def test_sj_larger_than_any_node_is_never_launched(api, namespace, operator):
    """10 CPU: within the threshold of the cluster's 4 x 8 CPU, but more than any one node has, so
    it is node fit (not the threshold) that keeps it waiting."""
    nodes = client.CoreV1Api(api).list_node(label_selector="type=kwok").items
    biggest = max(to_milli(n.status.allocatable["cpu"]) for n in nodes)
    total = sum(to_milli(n.status.allocatable["cpu"]) for n in nodes if not n.spec.unschedulable)
    assert biggest < 10_000 <= operator.threshold * total - 2_000, "the cluster shape this test assumes"
    create_sj(api, namespace, "huge", sj_spec(run_for=None, cpu="10"))
    wait_phase(api, namespace, "huge", "Pending")
    time.sleep(operator.start_timeout.total_seconds() + 3)
    assert status(api, namespace, "huge")["phase"] == "Pending"
    assert jobs_of(api, namespace, "huge") == []
    assert client.CoreV1Api(api).list_namespaced_pod(namespace).items == []


def test_run_that_cannot_start_times_out_and_leaves_nothing_pending(api, namespace, operator):
    """A run the scheduler cannot place (its claim never binds) is deleted after the start
    timeout; the SJ waits again with backoff, no interruption counted, no pod left pending."""
    run_that_cannot_start_is_retried(api, namespace, operator)


def test_a_scheduler_far_behind_times_no_run_out(api, namespace, operator):
    """Pods the scheduler has not looked at yet wait for it, however long: with the scheduler stopped for
    six start timeouts (past the five that pods not yet made are given), the run is never retried, and the SJ
    is not written twice meanwhile: it has no phase yet (its Launched Event says its run was made) until the
    scheduler goes on, then is written once, as Running."""
    waited = operator.start_timeout * 6
    with scheduler_paused():
        create_sj(api, namespace, "behind", sj_spec(run_for=None))
        assert event_messages(api, namespace, "behind", "Launched")
        wait_for("its pod made", lambda: run_pods(api, namespace, "behind-r1"), timeout=30)
        time.sleep(waited.total_seconds())
        st = status(api, namespace, "behind")
        # Admitted in the pass that first saw it, it was never written: no phase yet (a launch writes no status).
        assert (st.get("phase"), st.get("startTimeouts", 0), st.get("attempt", 0)) == (None, 0, 0), st
        assert [p.spec.node_name for p in run_pods(api, namespace, "behind-r1")] == [None]
        assert [j.metadata.name for j in jobs_of(api, namespace, "behind")] == ["behind-r1"]
    st = wait_phase(api, namespace, "behind", "Running", timeout=60)
    assert (st.get("startTimeouts", 0), st["attempt"]) == (0, 1), st
    assert [r for r, _ in event_list(api, namespace, "behind")].count("Starting") == 0, "written once, as Running"
    assert [j.metadata.name for j in jobs_of(api, namespace, "behind")] == ["behind-r1"]
