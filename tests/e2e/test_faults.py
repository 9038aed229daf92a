"""Nothing is lost under faults: a misbehaving API server, an operator SIGKILLed over and over during
preemptions, etcd restarted mid-run, expired watches, and a burst of 1,000 SJs.

Each test prints one line of figures (faults injected, SJs, runs launched twice, SJs lost);
docs/development/testing.md describes them. "Launched twice" counts Jobs beyond one per attempt the SJ's
status records, from a watch of every Job created; "lost" counts SJs that did not end in the phase their workload gives.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from sj_operator.names import GROUP, PLURAL, VERSION
from tests.e2e.faults import FaultProxy, JobRecorder
from tests.e2e.kube import CLUSTER_DIR, component_pid, unique, wait_for
from tests.e2e.sj import OperatorProcess, create_sj, custom, sj_spec

pytestmark = pytest.mark.kwok_only

REPO = Path(__file__).resolve().parents[2]
FAST = ("--tick", "1s", "--start-timeout", "60s", "--retry-backoff", "2s", "--thrash-backoff", "1s",
        "--max-thrash-backoff", "5s")
TERMINAL = ("Succeeded", "Failed")


def _phases(api: client.ApiClient, namespace: str) -> dict[str, dict[str, Any]]:
    items = custom(api).list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    return {item["metadata"]["name"]: item.get("status") or {} for item in items}


def _wait_all_terminal(api: client.ApiClient, namespace: str, count: int, timeout: float) -> dict[str, dict[str, Any]]:
    def done() -> dict[str, dict[str, Any]] | None:
        try:
            statuses = _phases(api, namespace)
        except (client.ApiException, OSError):  # the API server itself may be restarting
            return None
        finished = sum(1 for st in statuses.values() if st.get("phase") in TERMINAL)
        return statuses if len(statuses) == count and finished == count else None
    return wait_for(f"all {count} SJs finished", done, timeout=timeout, interval=2)


def _create_many(api: client.ApiClient, namespace: str, specs: dict[str, dict[str, Any]]) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda item: create_sj(api, namespace, *item), specs.items()))


def _launched_twice(recorder: JobRecorder, statuses: dict[str, dict[str, Any]]) -> int:
    """Jobs beyond one per attempt: a run name made twice, or more runs than the SJ's attempts."""
    runs = recorder.runs_by_sj()
    extra = 0
    for name, st in statuses.items():
        made = runs.get(name, [])
        extra += len(made) - len(set(made))
        extra += max(0, len(set(made)) - int(st.get("attempt", 0)))
    return extra


def _operator(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> OperatorProcess:
    return OperatorProcess(*FAST, "--peering", unique("faults"), *args, log=tmp_path / "operator.log", env=env).start()


@pytest.fixture
def recorder(api: client.ApiClient, namespace: str) -> Iterator[JobRecorder]:
    rec = JobRecorder(api, namespace).start()
    yield rec
    rec.stop()


def _mixed_workload(n: int) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """n SJs: most succeed, one in ten fails (exit 1), one in twenty is a gang of two."""
    specs, expected = {}, {}
    for i in range(n):
        name = f"sj-{i:04d}"
        if i % 10 == 3:
            specs[name], expected[name] = sj_spec(run_for="4s", exit_code=1, cpu="50m", memory="64Mi"), "Failed"
        elif i % 20 == 7:
            specs[name], expected[name] = sj_spec(run_for="4s", cpu="50m", memory="64Mi", parallelism=2), "Succeeded"
        else:
            specs[name], expected[name] = sj_spec(run_for="4s", cpu="50m", memory="64Mi"), "Succeeded"
    return specs, expected


def test_a_misbehaving_api_server_loses_and_duplicates_nothing(api, namespace, crd, kubeconfig, tmp_path, recorder):
    proxy = FaultProxy(kubeconfig, share=0.15, seed=12).start()
    operator = _operator(tmp_path, env={"KUBECONFIG": str(proxy.kubeconfig(tmp_path / "proxy.kubeconfig"))})
    try:
        specs, expected = _mixed_workload(200)
        _create_many(api, namespace, specs)
        statuses = _wait_all_terminal(api, namespace, len(specs), timeout=420)
    finally:
        operator.stop()
        proxy.stop()
    wrong = {name: st.get("phase") for name, st in statuses.items() if st.get("phase") != expected[name]}
    twice = _launched_twice(recorder, statuses)
    injected = sum(proxy.injected.values())
    retried = sum(1 for st in statuses.values() if st.get("attempt", 1) > 1)
    print(f"\nAPI faults: {injected} injected of {proxy.forwarded + injected} requests {dict(proxy.injected)}; "
          f"{len(specs)} SJs; launched twice {twice}; lost {len(wrong)}; retried after a start timeout {retried}")
    assert injected >= 100 and {"429", "500", "503", "409", "drop-before", "drop-after", "watch-410"} <= set(
        proxy.injected), proxy.injected
    assert wrong == {}, (wrong, (tmp_path / "operator.log").read_text()[-4000:])
    assert twice == 0
    interrupted = {name: st.get("message") for name, st in statuses.items() if st.get("interruptedCount", 0)}
    assert interrupted == {}, "no fault of the API may count as an interruption"


class _Evictor:
    """Evicts running SJ pods now and then (a preemption, as the Eviction API does one), at most once per
    SJ and only well before the pod would finish, counting the evictions the API server accepted."""

    def __init__(self, api: client.ApiClient, namespace: str, *, limit: int, run_for: float) -> None:
        self.core, self.namespace, self.limit, self.run_for = client.CoreV1Api(api), namespace, limit, run_for
        self.evicted: Counter[str] = Counter()
        self.rnd = random.Random(7)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="evictor", daemon=True)

    def _candidates(self) -> list[Any]:
        now = time.time()
        pods = self.core.list_namespaced_pod(self.namespace, label_selector="scavenger.dev/run").items
        return [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
                and p.status.start_time is not None and now - p.status.start_time.timestamp() < self.run_for / 2
                and p.metadata.labels["scavenger.dev/job-name"] not in self.evicted]

    def _run(self) -> None:
        while not self.stop.wait(self.rnd.uniform(0.5, 2.0)) and sum(self.evicted.values()) < self.limit:
            candidates = self._candidates()
            if not candidates:
                continue
            pod = self.rnd.choice(candidates)
            body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=self.namespace))
            try:
                self.core.create_namespaced_pod_eviction(pod.metadata.name, self.namespace, body)
            except client.ApiException:
                continue
            self.evicted[pod.metadata.labels["scavenger.dev/job-name"]] += 1


def test_sigkilled_twenty_times_during_preemptions_counts_every_interruption_once(api, namespace, crd, tmp_path,
                                                                                  recorder):
    # The same identity after every kill, as a container restarted in its pod keeps the pod's name: it
    # takes its own Lease back at once.
    env = {**os.environ, "POD_NAME": unique("killed")}
    specs = {f"sj-{i:03d}": sj_spec(run_for="30s", cpu="50m", memory="64Mi") for i in range(200)}
    rnd = random.Random(20)
    operator = _operator(tmp_path, env=env)
    evictor = _Evictor(api, namespace, limit=30, run_for=30)
    kills = 0
    try:
        _create_many(api, namespace, specs)
        evictor.thread.start()
        for _ in range(20):
            time.sleep(rnd.uniform(2.0, 6.0))
            operator.kill()
            kills += 1
            operator = _operator(tmp_path, env=env)
        statuses = _wait_all_terminal(api, namespace, len(specs), timeout=420)
    finally:
        evictor.stop.set()
        operator.stop()
    miscounted = {name: (st.get("interruptedCount", 0), evictor.evicted[name]) for name, st in statuses.items()
                  if st.get("interruptedCount", 0) != evictor.evicted[name]}
    lost = [name for name, st in statuses.items() if st.get("phase") != "Succeeded"]
    twice = _launched_twice(recorder, statuses)
    print(f"\nSIGKILL: {kills} kills, {sum(evictor.evicted.values())} preemptions; {len(specs)} SJs; "
          f"interruptions miscounted {len(miscounted)}; launched twice {twice}; lost {len(lost)}")
    assert kills == 20 and sum(evictor.evicted.values()) >= 10
    assert lost == [] and miscounted == {} and twice == 0, (lost, miscounted,
                                                            (tmp_path / "operator.log").read_text()[-4000:])


def test_a_pod_evicted_while_no_operator_runs_is_an_interruption_when_it_returns(api, namespace, crd, tmp_path,
                                                                                 recorder):
    # The operator is gone while the run's pod is evicted and removed; the Job must keep that on record
    # (its podFailurePolicy fails it) rather than start a replacement that hides it.
    env = {**os.environ, "POD_NAME": unique("away")}
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    operator = _operator(tmp_path, env=env)
    try:
        create_sj(api, namespace, "evicted", sj_spec(run_for="20s", cpu="50m", memory="64Mi"))
        wait_for("the SJ running", lambda: _phases(api, namespace)["evicted"].get("phase") == "Running", timeout=60)
        operator.kill()
        pod = core.list_namespaced_pod(namespace, label_selector="scavenger.dev/run").items[0]
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=namespace))
        core.create_namespaced_pod_eviction(pod.metadata.name, namespace, body)
        wait_for("the evicted pod gone", lambda: all(
            p.metadata.uid != pod.metadata.uid for p in core.list_namespaced_pod(namespace).items), timeout=60)
        job = batch.read_namespaced_job(pod.metadata.labels["scavenger.dev/run"], namespace)
        wait_for("the Job controller done with the run", lambda: batch.read_namespaced_job(
            job.metadata.name, namespace).status.conditions, timeout=30)
        replacements = [p.metadata.name for p in core.list_namespaced_pod(namespace).items]
        operator = _operator(tmp_path, env=env)
        statuses = _wait_all_terminal(api, namespace, 1, timeout=120)
    finally:
        operator.stop()
    st = statuses["evicted"]
    assert replacements == [], "the Job made a replacement that hides the eviction"
    assert (st.get("phase"), st.get("interruptedCount"), st.get("attempt")) == ("Succeeded", 1, 2), st
    assert st.get("lastInterruptionReason") == "Deleted", st
    assert _launched_twice(recorder, statuses) == 0


def _count(api: client.ApiClient, namespace: str, phase: str) -> int:
    return sum(st.get("phase") == phase for st in _phases(api, namespace).values())


def _restart_etcd() -> None:
    """Stops the local cluster's etcd and starts it again with the same command (as kwokctl does), keeping
    its data; its pid file is updated so `hack/cluster down` still stops it."""
    pid_file = CLUSTER_DIR / "pids" / "etcd.pid"
    pid = component_pid("etcd")
    command = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    cwd = os.readlink(f"/proc/{pid}/cwd")
    os.kill(pid, signal.SIGTERM)
    wait_for("etcd stopped", lambda: not Path(f"/proc/{pid}").exists(), timeout=30)
    time.sleep(3)  # the API server and everything watching through it see etcd gone
    with (CLUSTER_DIR / "logs" / "etcd.log").open("ab") as log:
        proc = subprocess.Popen([c.decode() for c in command], cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    pid_file.write_text(f"{proc.pid}\n")


def test_etcd_restarted_mid_run_converges(api, namespace, crd, tmp_path, recorder):
    specs = {f"sj-{i:03d}": sj_spec(run_for="15s", cpu="50m", memory="64Mi") for i in range(60)}
    operator = _operator(tmp_path)
    try:
        _create_many(api, namespace, specs)
        wait_for("some SJs running", lambda: _count(api, namespace, "Running") >= 20, timeout=60)
        _restart_etcd()
        statuses = _wait_all_terminal(api, namespace, len(specs), timeout=300)
    finally:
        operator.stop()
    lost = [name for name, st in statuses.items() if st.get("phase") != "Succeeded"]
    twice = _launched_twice(recorder, statuses)
    print(f"\netcd restart: {len(specs)} SJs; launched twice {twice}; lost {len(lost)}")
    assert lost == [] and twice == 0, (tmp_path / "operator.log").read_text()[-4000:]


@pytest.mark.timeout(1200)
def test_a_burst_of_a_thousand_sjs_is_all_accounted_for(api, namespace, crd, tmp_path, recorder):
    specs = {f"b-{i:04d}": sj_spec(run_for="2s", cpu="10m", memory="16Mi") for i in range(1000)}
    operator = _operator(tmp_path)
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda item: create_sj(api, namespace, *item), specs.items()))
        statuses = _wait_all_terminal(api, namespace, len(specs), timeout=900)
    finally:
        operator.stop()
    lost = [name for name, st in statuses.items() if st.get("phase") != "Succeeded"]
    twice = _launched_twice(recorder, statuses)
    print(f"\nburst: {len(specs)} SJs finished in {time.monotonic() - started:.0f}s; launched twice {twice}; "
          f"lost {len(lost)}")
    assert lost == [] and twice == 0
