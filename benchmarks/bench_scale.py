"""Scale and speed on the local cluster, side by side with the floor and with plain Jobs.

Run: ``make bench-scale`` (starts the local cluster when none runs), or with KUBECONFIG set:
``python benchmarks/bench_scale.py [--sjs 10000] [--nodes 1000] [--plot docs/bench-scale.png]``.

One workload, seeded: ``--sjs`` units of work, most one pod, ``--gang-share`` of them gangs of 2 to 16
pods (100m CPU, 64Mi each), on ``--nodes`` kwok nodes made for the run (8 CPU, 32Gi, tainted so nothing
else lands there). It goes through the same cluster in turn:

1. **The floor**: the work as plain low-priority Jobs created directly (Indexed for gangs), 8 client
   threads. The operator can never be faster than this. The creates are timed again after the
   operator's run (an A-B-A order: each run leaves the cluster older than it found it, and the first
   floor had it fresh), and the operator's throughput is a ratio of the mean of the two. Once the first
   floor's pods run, a stream of high-priority pods arrives (Poisson, ``--rate`` per second for
   ``--stream`` seconds, each needing most of a node for 20 s): the default scheduler alone picks the
   victims. A plain Job's preempted pod starts again from nothing, so the work it lost is how long it had
   run; for a gang, every member's (its app stops when one member goes), counted as the members times the
   preempted pod's run.
2. **The operator**: the same work as ScavengerJobs (checkpoint period ``--period``) created in one
   burst by 8 client threads, the operator running as its own process with its default settings
   (threshold 70 %, victim steering at protect level 1). Measured: SJs launched per second, from the
   first create to the last Job; each SJ's time from its create call to a watch seeing its Job (p50,
   p99); the operator's API calls per SJ by operation; its CPU until every Job exists (and the wall time
   its garbage collector took meanwhile); its peak RSS; its collections over the run by generation (seconds,
   how many, objects freed); the API server's CPU. Then the
   same stream of high-priority pods; an interrupted SJ lost the time since its checkpoint period
   began, for every pod of its gang (``policy.lifecycle.lost_work``, the operator's own estimate).
3. **The ceiling** (``--ceiling``, before the operator's run): the SJs created as for the operator, and
   each one's plain Job created by the benchmark (as many threads again) once its SJ exists, with no
   operator running. An operator must at least make the Job of every SJ it is given, so this is the most
   any operator could reach here: the users' SJs plus the floor's Jobs. With ``--standby``, the ceiling
   again while a replica of the operator watches on standby, as the operator does (another identity holds
   its Lease, so it decides and writes nothing): what watching costs, before any decision. Also measured: that
   replica's CPU while the units are created.
4. **Kueue** (``--kueue``; ``make bench-scale`` passes it): the same burst as plain Jobs through Kueue's
   manager (v0.17, built from its Go module by ``hack/build-binaries kueue``), running as its own process
   against the same cluster with a ClusterQueue whose quota is the operator's threshold of these nodes.
   Measured: from the first create until Kueue started (unsuspended) the last Job, each Job's time from
   create to started (p50, p99), Kueue's CPU and peak RSS, the API server's CPU. No stream: Kueue does
   not preempt for workloads outside its queues, so the default scheduler would pick the victims as for
   plain Jobs.
5. Side by side: throughput as a ratio of the floor (the mean of its two timings), and the work lost per
   high-priority pod.

Progress is printed as it goes; the result is a table, optionally a PNG plot (matplotlib) and the result as
data (``--json PATH``, ``--save``: ``benchmarks/harness/results.py``), with the goals beside the figures they
are set for (``GOALS``). ``--profile FILE`` samples the operator with py-spy while it runs (its collapsed stacks go to
FILE; the shares by package, function and API operation are logged); with ``--profile-burst``, only until
every SJ's Job exists. Everything the run made (nodes,
namespaces, PriorityClasses) is deleted at the end.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for path in (REPO, REPO / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench_e2e import (  # noqa: E402
    RawWatch,
    RecorderProcess,
    create_namespace,
    delete_namespace,
    ensure_crd,
    percentile,
    resource_version,
)
from kubernetes import client, config  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from benchmarks.harness import results  # noqa: E402
from sj_operator.api import parse_duration  # noqa: E402
from sj_operator.names import GROUP, PLURAL, VERSION  # noqa: E402
from sj_operator.observed import parse_time  # noqa: E402
from sj_operator.policy.lifecycle import lost_work  # noqa: E402
from tests.e2e.kube import unique  # noqa: E402

BENCH_LABEL = "scavenger.dev/bench"
TAINT = {"key": BENCH_LABEL, "value": "scale", "effect": "NoSchedule"}
SELECTOR = {BENCH_LABEL: "scale"}
TOLERATIONS = [{"key": BENCH_LABEL, "operator": "Equal", "value": "scale", "effect": "NoSchedule"}]
LOW, HIGH = "bench-scale-low", "bench-scale-high"
POD_CPU, POD_MEMORY = "100m", "64Mi"
WRITE_VERBS = ("create_", "patch_", "replace_", "delete_")
GANG_ANNOTATION = "bench.scavenger.dev/gang-size"
THRESHOLD = 0.70
"""The operator's default admission threshold; Kueue's ClusterQueue gets the same share as its quota."""
KUEUE_VERSION = "v0.17.0"  # hack/tools/kueue pins it; hack/build-binaries kueue builds .bin/kueue
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_NAMESPACE = "kueue-system"
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
"""Where Kueue reads its metrics server's pair when it does not manage certificates itself (fixed in its code)."""
NODE_MEMORY_GI = 32


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


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


def plain_job(name: str, pods: int, queue: str | None = None) -> dict[str, Any]:
    """What a user would otherwise submit: a low-priority Job (Indexed for a gang). With ``queue``, as a
    Kueue user submits it: suspended, labelled with its LocalQueue (Kueue's webhook would do both; it is
    not registered here, see ``kueue_process``)."""
    spec: dict[str, Any] = {"parallelism": pods, "completions": pods, "backoffLimit": 1000,
                            "template": {"metadata": {"labels": {BENCH_LABEL: "plain"},
                                                      "annotations": {GANG_ANNOTATION: str(pods)}},
                                         "spec": pod_spec(LOW)}}
    if pods > 1:
        spec["completionMode"] = "Indexed"
    meta: dict[str, Any] = {"name": name}
    if queue is not None:
        spec["suspend"] = True
        meta["labels"] = {KUEUE_QUEUE_LABEL: queue}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


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


# --- the cluster ----------------------------------------------------------------------------

def in_parallel(fn: Callable[[int], None], count: int, threads: int, what: str) -> float:
    """Runs ``fn(i)`` for every i, ``threads`` at a time, printing progress; the seconds it took."""
    done = [0]
    lock = threading.Lock()
    start = time.monotonic()

    def one(i: int) -> None:
        fn(i)
        with lock:
            done[0] += 1
            if done[0] % max(1, count // 10) == 0:
                log(f"  {what}: {done[0]}/{count} ({time.monotonic() - start:.0f}s)")

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(one, range(count)))
    return time.monotonic() - start


def retrying(call: Callable[[], Any]) -> Any:
    """A client call retried on 429/5xx and connection trouble (the API server is loaded here)."""
    for attempt in range(30):
        try:
            return call()
        except ApiException as exc:
            if exc.status not in (429, 500, 502, 503, 504) or attempt == 29:
                raise
        except OSError:
            if attempt == 29:
                raise
        time.sleep(min(0.2 * 2 ** attempt, 5))
    return None


def make_nodes(core: client.CoreV1Api, count: int, cpu: int, threads: int) -> list[str]:
    names = [f"scale-{i:04d}" for i in range(count)]

    def create(i: int) -> None:
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": names[i], "annotations": {"kwok.x-k8s.io/node": "fake"},
                             "labels": {**SELECTOR, "type": "kwok", "kubernetes.io/hostname": names[i]}},
                "spec": {"taints": [TAINT]},
                "status": {"allocatable": {"cpu": str(cpu), "memory": f"{NODE_MEMORY_GI}Gi", "pods": "110"},
                           "capacity": {"cpu": str(cpu), "memory": f"{NODE_MEMORY_GI}Gi", "pods": "110"}}}
        try:
            retrying(lambda: core.create_node(body))
        except ApiException as exc:
            if exc.status != 409:
                raise

    in_parallel(create, count, threads, "nodes created")
    deadline = time.monotonic() + 600
    while True:
        nodes = core.list_node(label_selector=f"{BENCH_LABEL}=scale").items
        ready = sum(1 for n in nodes if any(c.type == "Ready" and c.status == "True"
                                            for c in n.status.conditions or []))
        if ready >= count:
            return names
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {ready} of {count} nodes Ready after 600s")
        log(f"  {ready}/{count} nodes Ready")
        time.sleep(5)


def delete_nodes(core: client.CoreV1Api) -> None:
    try:
        core.delete_collection_node(label_selector=f"{BENCH_LABEL}=scale")
    except ApiException as exc:
        print(f"could not delete the benchmark's nodes: {exc.status} {exc.reason}", file=sys.stderr)


@contextmanager
def priority_classes(scheduling: client.SchedulingV1Api) -> Iterator[None]:
    for name, value in ((LOW, -100), (HIGH, 1000)):
        body = {"metadata": {"name": name}, "value": value, "globalDefault": False,
                "preemptionPolicy": "Never" if value < 0 else "PreemptLowerPriority"}
        try:
            scheduling.create_priority_class(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
    try:
        yield
    finally:
        for name in (LOW, HIGH):
            with suppress(ApiException):
                scheduling.delete_priority_class(name)


def process_cpu(pattern: str) -> float | None:
    """CPU seconds (user + system) of the first process whose command line contains ``pattern``."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if pattern in cmdline and "bench_scale" not in cmdline:
                return pid_cpu(int(pid))
        except OSError:
            continue
    return None


def pid_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# --- measuring ----------------------------------------------------------------------------------

@dataclass
class Stream:
    """High-priority pods arriving on schedule; the victims' lost work as the caller measures it."""
    core: client.CoreV1Api
    namespace: str
    arrivals: tuple[tuple[float, int], ...]
    made: list[str] = field(default_factory=list)

    def run(self) -> None:
        start = time.monotonic()
        for i, (at, cpu) in enumerate(self.arrivals):
            time.sleep(max(0.0, start + at - time.monotonic()))
            name = f"high-{i:04d}"
            retrying(lambda n=name, c=cpu: self.core.create_namespaced_pod(self.namespace, high_pod(n, c)))
            self.made.append(name)
        log(f"  {len(self.made)} high-priority pods arrived over {time.monotonic() - start:.0f}s")


def watch_namespace(list_fn: Callable[..., Any], namespace: str, stop: threading.Event,
                    on_object: Callable[[Any], None], name: str, **kwargs: Any) -> threading.Thread:
    """Hands every object ``list_fn`` lists in ``namespace`` (``kwargs``: its selector) to ``on_object`` as
    it changes, from now until ``stop``; resumes after timeouts, dropped connections and expired versions.
    ``list_fn`` should belong to an ApiClient of its own: the watch holds one of its connections."""
    def latest() -> str:
        return str(list_fn(namespace, limit=1, **kwargs).metadata.resource_version)

    rv = latest()

    def run() -> None:
        nonlocal rv
        while not stop.is_set():
            try:
                for event in RawWatch().stream(list_fn, namespace, resource_version=rv, timeout_seconds=20,
                                               **kwargs):
                    obj = event["object"]
                    rv = resource_version(obj)
                    on_object(obj)
                    if stop.is_set():
                        break
            except ApiException as exc:
                if exc.status == 410:
                    rv = latest()
            except Exception:  # a dropped connection: resume from the last version seen
                time.sleep(0.5)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def watch_preempted_pods(namespace: str, stop: threading.Event, lost: dict[str, float]) -> threading.Thread:
    """Records, for each plain pod the scheduler preempts, how long it had run (its lost work)."""
    def seen(pod: dict[str, Any]) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        cond = next((c for c in status.get("conditions") or []
                     if c["type"] == "DisruptionTarget" and c["status"] == "True"), None)
        started, stopped = parse_time(status.get("startTime")), parse_time((cond or {}).get("lastTransitionTime"))
        if started is not None and stopped is not None and meta["uid"] not in lost:
            # A gang's app stops when one member goes: every member lost what it had run.
            members = int((meta.get("annotations") or {}).get(GANG_ANNOTATION, "1"))
            lost[meta["uid"]] = members * max((stopped - started).total_seconds(), 0.0)

    return watch_namespace(client.CoreV1Api(client.ApiClient()).list_namespaced_pod, namespace, stop, seen,
                           "preempted pods", label_selector=f"{BENCH_LABEL}=plain")


def wait_until(what: str, probe: Callable[[], tuple[bool, str]], timeout: float, every: float = 5) -> float:
    start = time.monotonic()
    while True:
        ok, progress = probe()
        if ok:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{what}: not after {timeout:.0f}s ({progress})")
        log(f"  {what}: {progress}")
        time.sleep(every)


def job_sync_lag(batch: client.BatchV1Api, namespace: str) -> dict[str, float]:
    """p50 and p99 seconds from each Job's creation to the Job controller's first sync of it (its
    ``status.startTime``; both to the second): how far behind the controller-manager was in making pods, the
    cluster's side of a launch. Empty while no Job has been synced."""
    jobs = json.loads(retrying(lambda: batch.list_namespaced_job(namespace, resource_version="0",
                                                                 _preload_content=False)).data)["items"]
    lags = sorted((started - created).total_seconds() for job in jobs
                  if (created := parse_time(job["metadata"].get("creationTimestamp"))) is not None
                  and (started := parse_time((job.get("status") or {}).get("startTime"))) is not None)
    return {"job_sync_p50": percentile(lags, 0.5), "job_sync_p99": percentile(lags, 0.99)} if lags else {}


def ready_pods(batch: client.BatchV1Api, namespace: str) -> int:
    jobs = retrying(lambda: batch.list_namespaced_job(namespace, resource_version="0")).items
    return sum((j.status.ready or 0) for j in jobs)


def scrape(port: int) -> dict[str, float]:
    """The operator's metrics, ``name{labels}`` -> value."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        raw = b"".join(iter(lambda: sock.recv(65536), b""))
    out: dict[str, float] = {}
    for line in raw.split(b"\r\n\r\n", 1)[1].decode().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def loop_lag(metrics: dict[str, float]) -> dict[str, float]:
    """From ``scavenger_event_loop_lag_seconds``: the bucket bound the longest lag fell under (how long a
    stretch of work held the operator's loop at most; inf past the last bound), and how often it was over
    a second, over the whole run; the same of the garbage collector's full collections
    (``scavenger_gc_pause_seconds{generation="2"}``), and the seconds all its collections took, in all and by
    generation (with how many there were and the objects they freed)."""
    figures: dict[str, float] = {}
    for name, prefix in (("loop_lag", 'scavenger_event_loop_lag_seconds_bucket{le="'),
                         ("gc_full", 'scavenger_gc_pause_seconds_bucket{generation="2",le="')):
        buckets = sorted((float(k[len(prefix):-2]), v) for k, v in metrics.items() if k.startswith(prefix))
        if buckets:
            total = buckets[-1][1]
            figures[f"{name}_worst_le"] = next(le for le, count in buckets if count >= total)
            figures[f"{name}_over_1s"] = total - dict(buckets).get(1.0, total)
    figures["gc_seconds"] = sum(v for k, v in metrics.items() if k.startswith("scavenger_gc_pause_seconds_sum"))
    for generation in range(3):
        label = f'{{generation="{generation}"}}'
        figures[f"gc_seconds_gen{generation}"] = metrics.get(f"scavenger_gc_pause_seconds_sum{label}", 0.0)
        figures[f"gc_count_gen{generation}"] = metrics.get(f"scavenger_gc_pause_seconds_count{label}", 0.0)
        figures[f"gc_collected_gen{generation}"] = metrics.get(f"scavenger_gc_collected_objects_total{label}", 0.0)
    return figures


def calls_by_operation(metrics: dict[str, float]) -> dict[str, float]:
    prefix = 'scavenger_api_requests_total{operation="'
    return {k[len(prefix):-2]: v for k, v in metrics.items() if k.startswith(prefix)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def process(args: list[str], logfile: Path, ready: Callable[[], bool], what: str,
            timeout: float, env: Mapping[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """A process started with its output in ``logfile``, once ``ready()`` (connection errors are "not
    yet"); stopped with SIGTERM, then killed after 30 s. ``env`` is added to this process's environment."""
    with logfile.open("wb") as out:
        proc = subprocess.Popen(args, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + timeout
        while True:
            with suppress(OSError):
                if ready():
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start (log: {logfile})")
            time.sleep(0.5)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def profiled(pid: int, output: Path | None) -> Iterator[Callable[[], None]]:
    """With ``output``: py-spy samples the process (50 Hz, all threads, without pausing it: so threads blocked
    in C, such as workers waiting for a response, count as busy) until the block ends, writes its stacks to
    ``output`` (collapsed: one stack and its samples per line; flamegraph tools read it), and logs
    `profile_summary`. What it yields stops the sampling earlier (a second call does nothing)."""
    if output is None:
        yield lambda: None
        return
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        raise SystemExit("--profile needs py-spy: pip install -e '.[bench]'")
    output.parent.mkdir(parents=True, exist_ok=True)
    log(f"  profiling the operator (py-spy) into {output}")
    proc = subprocess.Popen([str(spy), "record", "--pid", str(pid), "--rate", "50", "--format", "raw",
                             "--output", str(output), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop() -> None:
        if proc.returncode is not None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if not output.exists():
            log(f"  py-spy wrote no profile: {err.decode(errors='replace').strip()[-300:]}")
        else:
            for line in profile_summary(output.read_text().splitlines()):
                log(f"  {line}")

    try:
        yield stop
    finally:
        stop()


def profile_summary(collapsed: list[str], top: int = 10) -> list[str]:
    """Shares of py-spy's samples from its collapsed stacks ("frame;frame;... count", a frame being
    "function (path:line)", the path relative to where Python found the module): the function each sample
    was in (its own time), by package and by function, and each Kubernetes API operation whose call was
    under way (the client's work and the wait for the API server together). Threads blocked in C, such as
    a worker waiting for a response, are sampled too."""
    own: dict[str, int] = {}
    packages: dict[str, int] = {}
    operations: dict[str, int] = {}
    total = 0
    for line in collapsed:
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        function, _, where = frames[-1].partition(" (")
        path = where.rsplit(":", 1)[0]
        name = f"{function} ({path})"
        own[name] = own.get(name, 0) + n
        package = path.split("/", 1)[0].removesuffix(".py")
        packages[package] = packages.get(package, 0) + n
        for frame in frames:
            function, _, where = frame.partition(" (")
            if where.startswith("kubernetes/client/api/") and "." in function and "_with_http_info" not in function:
                operation = function.rsplit(".", 1)[1]
                operations[operation] = operations.get(operation, 0) + n
                break
    if not total:
        return ["no samples"]

    def shares(counts: dict[str, int]) -> str:
        return ", ".join(f"{name} {100 * n / total:.1f}%" for name, n in
                         sorted(counts.items(), key=lambda kv: -kv[1])[:top])

    return [f"{total} samples; own time by package: {shares(packages)}",
            f"own time by function: {shares(own)}",
            f"under way, by API operation: {shares(operations)}"]


def operator_process(namespace: str, port: int, logfile: Path) -> AbstractContextManager[subprocess.Popen[bytes]]:
    args = [sys.executable, "-m", "sj_operator", "--namespaces", namespace, "--metrics-port", str(port),
            "--peering", unique("bench-scale"), "--tick", "2s"]
    # As the operator's image runs it (the Dockerfile's ENV).
    return process(args, logfile, lambda: scrape(port).get("scavenger_leader", 0) == 1, "the operator", 60,
                   env={"MALLOC_ARENA_MAX": "2"})


# --- the three runs -----------------------------------------------------------------------------

@dataclass
class Result:
    figures: dict[str, Any] = field(default_factory=dict)
    floor_created: list[float] = field(default_factory=list)
    """Seconds after the first create at which each plain Job existed."""
    ceiling_created: list[float] = field(default_factory=list)
    """Seconds after the first create at which each SJ and its plain Job existed (``--ceiling``)."""
    operator_jobs: list[float] = field(default_factory=list)
    """Seconds after the first SJ create at which a watch saw each SJ's Job."""
    latencies: list[float] = field(default_factory=list)
    """Per SJ: seconds from its create call returning to its Job seen."""
    lost_plain: list[float] = field(default_factory=list)
    lost_operator: list[float] = field(default_factory=list)
    kueue_started: list[float] = field(default_factory=list)
    """Seconds after the first create at which Kueue let each Job start (unsuspended it)."""
    kueue_latencies: list[float] = field(default_factory=list)


def creation_figures(result: Result, run: str, units: int, took: float, apiserver_cpu0: float | None) -> None:
    """``run``'s creation figures: its seconds, units per second, and the API server's cores meanwhile (from
    its CPU seconds at the start, ``apiserver_cpu0``, to now)."""
    cpu1 = process_cpu("bin/kube-apiserver")
    result.figures[f"{run}_seconds"] = took
    result.figures[f"{run}_per_second"] = units / took
    if apiserver_cpu0 is not None and cpu1 is not None:
        result.figures[f"{run}_apiserver_cores"] = (cpu1 - apiserver_cpu0) / took


def delete_run_namespace(api: client.ApiClient, namespace: str, whose: str, *, followed: bool) -> None:
    """Deletes a run's namespace: waited for when another run follows on this cluster (it must not share
    it with the deletion), only begun when nothing runs after it."""
    if followed:
        log(f"  deleting {whose} namespace")
        delete_namespace(api, namespace, timeout=1800)
    else:
        log(f"  deleting {whose} namespace (not waited for: nothing runs after it)")
        delete_namespace(api, namespace, timeout=5, collections=False)


def create_plain_jobs(batch: client.BatchV1Api, namespace: str, work: Workload, threads: int, result: Result,
                      run: str, created: list[float] | None = None) -> None:
    """The floor's creates: every unit as a plain Job, ``threads`` at a time; ``run``'s creation figures, and
    when each Job existed (seconds after the first create) in ``created``."""
    cpu0 = process_cpu("bin/kube-apiserver")
    start = time.monotonic()

    def create(i: int) -> None:
        retrying(lambda: batch.create_namespaced_job(namespace, plain_job(f"job-{i:05d}", work.gangs[i])))
        if created is not None:
            created.append(time.monotonic() - start)

    took = in_parallel(create, len(work.gangs), threads, "plain Jobs created")
    creation_figures(result, run, len(work.gangs), took, cpu0)
    log(f"  all {len(work.gangs)} Jobs created in {took:.1f}s ({len(work.gangs) / took:.0f}/s)")


def floor_run(api: client.ApiClient, work: Workload, threads: int, result: Result, settle: float) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    namespace = create_namespace(core)
    log(f"the floor: {len(work.gangs)} plain Jobs ({work.pods} pods) in {namespace}")
    try:
        start = time.monotonic()
        create_plain_jobs(batch, namespace, work, threads, result, "floor", result.floor_created)
        wait_until("plain pods running", lambda: ((n := ready_pods(batch, namespace)) >= 0.995 * work.pods,
                                                  f"{n}/{work.pods}"), timeout=3600, every=15)
        result.figures["floor_running_seconds"] = time.monotonic() - start
        result.figures.update({f"floor_{k}": v for k, v in job_sync_lag(batch, namespace).items()})
        time.sleep(settle)
        stop = threading.Event()
        lost: dict[str, float] = {}
        watcher = watch_preempted_pods(namespace, stop, lost)
        log(f"  the stream: {len(work.arrivals)} high-priority pods")
        Stream(core, namespace, work.arrivals).run()
        time.sleep(15)
        stop.set()
        watcher.join(30)
        result.lost_plain = sorted(lost.values())
        log(f"  {len(lost)} plain pods preempted, {sum(lost.values()):.0f} pod-seconds of work lost")
    finally:
        delete_run_namespace(api, namespace, "the floor's", followed=True)


def floor_again(api: client.ApiClient, work: Workload, threads: int, result: Result, *,
                followed: bool = False) -> None:
    """The floor's creates once more, after the operator's run (an A-B-A order): each run leaves the cluster
    older (thousands of objects made and deleted, etcd grown until its next compaction), and the first
    floor had it fresh. The ratio is taken against the mean of the two floors, which have aged as much as
    the operator's run between them, on average."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    namespace = create_namespace(core)
    log(f"the floor again: {len(work.gangs)} plain Jobs in {namespace}")
    try:
        create_plain_jobs(batch, namespace, work, threads, result, "floor_after")
        figures = result.figures
        if "floor_per_second" in figures:
            figures["floor_mean_per_second"] = (figures["floor_per_second"] + figures["floor_after_per_second"]) / 2
    finally:
        delete_run_namespace(api, namespace, "the floor's second", followed=followed)


def ceiling_run(api: client.ApiClient, work: Workload, threads: int, period: str, result: Result, *,
                standby: bool = False) -> None:
    """The most any operator could do on this cluster: the SJs created as in the operator's run (``threads``
    at a time), and each one's plain Job created as soon as its SJ exists, by as many threads again, with no
    operator running: an operator that costs nothing and writes nothing but the Jobs. The API server's work
    per unit is then the user's create plus the one write no operator can skip; the Jobs' pods follow as
    they do for the floor. Nothing runs after the creates (no stream).

    ``standby``: the same with a replica of the operator watching as the operator does and deciding
    nothing (`standby_replica`): what watching alone costs an operator, before any decision or
    write of its own."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)
    namespace = create_namespace(core)
    run = "ceiling_watched" if standby else "ceiling"
    log(f"the ceiling{' watched' if standby else ''}: {len(work.gangs)} SJs, each one's plain Job made once it exists, "
        f"in {namespace} ({'a standby replica of the operator watching' if standby else 'no operator'})")
    made: queue.Queue[int | None] = queue.Queue()
    created = result.ceiling_created if not standby else []
    try:
        with standby_replica(api, namespace) if standby else nullcontext() as replica:
            cpu0 = process_cpu("bin/kube-apiserver")
            replica_cpu0 = pid_cpu(replica.pid) if replica is not None else 0.0
            start = time.monotonic()

            def create_sj(i: int) -> None:
                retrying(lambda: custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, scavenger_job(f"sj-{i:05d}", work.gangs[i], period)))
                made.put(i)

            def create_jobs() -> None:
                while (i := made.get()) is not None:
                    retrying(lambda: batch.create_namespaced_job(namespace, plain_job(f"sj-{i:05d}-r1",
                                                                                      work.gangs[i])))
                    created.append(time.monotonic() - start)

            workers = [threading.Thread(target=create_jobs, daemon=True) for _ in range(threads)]
            for worker in workers:
                worker.start()
            try:
                in_parallel(create_sj, len(work.gangs), threads, "SJs created")
            finally:
                for _ in workers:
                    made.put(None)
                for worker in workers:
                    worker.join()
            took = time.monotonic() - start
            creation_figures(result, run, len(work.gangs), took, cpu0)
            note = ""
            if replica is not None:
                result.figures["standby_cpu_seconds"] = pid_cpu(replica.pid) - replica_cpu0
                note = f"; the standby replica's CPU meanwhile {result.figures['standby_cpu_seconds']:.1f}s"
            log(f"  all {len(work.gangs)} SJs' Jobs created {took:.1f}s after the first SJ "
                f"({len(work.gangs) / took:.0f} units/s){note}")
    finally:
        delete_run_namespace(api, namespace, f"the ceiling{' watched' if standby else ''}'s", followed=True)


@contextmanager
def standby_replica(api: client.ApiClient, namespace: str) -> Iterator[subprocess.Popen[bytes]]:
    """A replica of the operator for ``namespace`` (it watches what the operator watches: the SJs, and the
    Jobs, pods and nodes of every namespace), its caches complete, deciding nothing: the Lease it campaigns
    for is held by another identity for an hour, so it stays on standby, as a second replica of a
    deployment does."""
    peering = unique("bench-standby")
    coordination = client.CoordinationV1Api(api)
    renewed = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    coordination.create_namespaced_lease("default", {
        "metadata": {"name": peering},
        "spec": {"holderIdentity": "bench-scale", "leaseDurationSeconds": 3600, "renewTime": renewed}})
    logfile = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-scale-standby-{namespace}.log"
    args = [sys.executable, "-m", "sj_operator", "--namespaces", namespace, "--metrics-port", str(free_port()),
            "--peering", peering, "--lease-namespace", "default"]
    try:
        with process(args, logfile, lambda: "watch caches are complete" in logfile.read_text(),
                     "the standby replica", 60, env={"MALLOC_ARENA_MAX": "2"}) as proc:
            yield proc
    finally:
        with suppress(ApiException):
            coordination.delete_namespaced_lease(peering, "default")


def operator_run(api: client.ApiClient, work: Workload, threads: int, period: str, result: Result,
                 settle: float, *, followed: bool = False, profile: Path | None = None,
                 profile_burst: bool = False) -> None:
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    namespace = create_namespace(core)
    port = free_port()
    logfile = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-scale-operator-{namespace}.log"
    log(f"the operator: {len(work.gangs)} SJs ({work.pods} pods) in {namespace} (operator log {logfile})")
    rec = RecorderProcess(namespace)
    try:
        with operator_process(namespace, port, logfile) as proc, profiled(proc.pid, profile) as stop_profile:
            rec.start()
            cpu0 = process_cpu("bin/kube-apiserver")
            op0 = process_cpu("--peering bench-scale") or 0.0
            names = [f"sj-{i:05d}" for i in range(len(work.gangs))]
            created: dict[str, float] = {}
            start = time.monotonic()

            def create(i: int) -> None:
                retrying(lambda: custom.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, scavenger_job(names[i], work.gangs[i], period)))
                created[names[i]] = time.monotonic()

            took_create = in_parallel(create, len(names), threads, "SJs created")
            log(f"  all {len(names)} SJs created in {took_create:.1f}s; waiting for their Jobs")
            rec.wait(f"Jobs of all {len(names)} SJs", lambda: len(rec.job_seen) >= len(names), 3600)
            last = max(rec.job_seen[n] for n in names)
            if profile_burst:
                stop_profile()
            took = last - start
            cpu1 = process_cpu("bin/kube-apiserver")
            op1 = process_cpu("--peering bench-scale") or 0.0
            metrics = scrape(port)
            calls = calls_by_operation(metrics)
            result.operator_jobs = sorted(rec.job_seen[n] - start for n in names)
            result.latencies = sorted(rec.job_seen[n] - created[n] for n in names)
            writes = {op: n for op, n in calls.items() if op.startswith(WRITE_VERBS)}
            gangs = sum(1 for g in work.gangs if g > 1)
            result.figures.update({
                "operator_seconds": took, "operator_per_second": len(names) / took,
                "sj_create_seconds": took_create,
                "latency_p50": percentile(result.latencies, 0.5), "latency_p99": percentile(result.latencies, 0.99),
                "calls_per_sj": {op: n / len(names) for op, n in sorted(calls.items())},
                "writes_per_sj": sum(writes.values()) / len(names),
                "writes_per_sj_without_gang_services": (sum(writes.values())
                                                        - writes.get("create_namespaced_service", 0)) / len(names),
                "gangs": gangs, "operator_cpu_seconds": op1 - op0,
                "operator_gc_seconds_to_jobs": loop_lag(metrics)["gc_seconds"],
            })
            if cpu0 is not None and cpu1 is not None:
                result.figures["operator_apiserver_cores"] = (cpu1 - cpu0) / took
            log(f"  all {len(names)} Jobs after {took:.1f}s ({len(names) / took:.0f} SJs/s); create -> Job "
                f"p50 {result.figures['latency_p50']:.1f}s p99 {result.figures['latency_p99']:.1f}s")

            def running() -> tuple[bool, str]:
                try:
                    n = scrape(port).get('scavenger_sjs{phase="Running"}', 0)
                except OSError as exc:  # a pass over thousands of changed SJs can hold the operator's loop
                    return False, f"the operator's metrics did not answer ({exc!r}); asking again"
                return n >= 0.995 * len(names), f"{n:.0f}/{len(names)} SJs Running"

            wait_until("SJs running", running, timeout=3600, every=15)
            result.figures["operator_running_seconds"] = time.monotonic() - start
            result.figures.update({f"operator_{k}": v for k, v in
                                   job_sync_lag(client.BatchV1Api(api), namespace).items()})
            by_running = calls_by_operation(scrape(port))
            # Steering's writes for the SJs that ran a period by then included (the unit test of the controller
            # counts a single-pod SJ's own writes: four).
            result.figures["writes_per_sj_to_running"] = sum(
                n for op, n in by_running.items() if op.startswith(WRITE_VERBS)) / len(names)
            log(f"  99.5% of the SJs Running {result.figures['operator_running_seconds']:.0f}s after the first create")
            time.sleep(settle)
            before = scrape(port)
            log(f"  the stream: {len(work.arrivals)} high-priority pods")
            Stream(core, namespace, work.arrivals).run()
            time.sleep(60)  # the last victims stop (grace period 1 s) and their interruptions are recorded
            after = scrape(port)
            result.figures["operator_peak_rss_mib"] = peak_rss_mib(proc.pid)
            result.figures.update(loop_lag(after))
            interrupted = sum(v - before.get(k, 0) for k, v in after.items()
                              if k.startswith("scavenger_interruptions_total{"))
            result.figures["operator_interruptions"] = interrupted
            sjs = retrying(lambda: custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL))["items"]
            for sj in sjs:
                st = sj.get("status") or {}
                stamps = [parse_time(t) for t in st.get("interruptedTimestamps") or []]
                runs = [parse_time(t) for t in st.get("runningTimestamps") or []]
                duration = parse_duration(sj["spec"].get("duration", period))
                for lost in lost_work([r for r in runs if r], [t for t in stamps if t], duration):
                    result.lost_operator.append(lost.total_seconds() * int(sj["spec"].get("parallelism", 1)))
            log(f"  {interrupted:.0f} SJ runs interrupted, {sum(result.lost_operator):.0f} pod-seconds of work lost; "
                f"operator peak RSS {result.figures['operator_peak_rss_mib']:.0f} MiB")
    finally:
        rec.stop()
        delete_run_namespace(api, namespace, "the operator's", followed=followed)


# --- Kueue, side by side (--kueue) ----------------------------------------------------------------

def kueue_module() -> Path:
    """Kueue's module in the Go module cache (its CRDs come from there); `hack/build-binaries kueue` put
    it there when it built ``.bin/kueue``."""
    cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    return Path(cache) / "sigs.k8s.io" / f"kueue@{KUEUE_VERSION}"


def kubectl(*args: str) -> None:
    subprocess.run([str(REPO / ".bin/kubectl"), *args], check=True, stdout=subprocess.DEVNULL)


def self_signed(directory: Path, name: str) -> None:
    """A throwaway serving pair ``tls.crt``/``tls.key`` for ``name`` (openssl)."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}",
                    "-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt")],
                   check=True, capture_output=True)


@contextmanager
def kueue_process(workdir: Path, logfile: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Kueue's manager as its own process against the cluster, with its CRDs, managing batch/v1 Jobs.

    Its webhooks are not registered with the API server (they would need a route from the API server
    to this process and a CA in their configurations), so the Jobs are created as its webhook would leave
    them: suspended and labelled with their queue. Its job controller then makes a Workload for each,
    its scheduler admits them against the ClusterQueue and the controller starts the Job. Leader election
    is off, as the local control plane runs one instance of everything."""
    binary = REPO / ".bin" / "kueue"
    crds = kueue_module() / "config" / "components" / "crd" / "bases"
    if not binary.exists() or not crds.is_dir():
        raise SystemExit("--kueue: build Kueue first with hack/build-binaries kueue (a Go module, minutes cold)")
    health = free_port()
    config_file = workdir / "kueue-config.yaml"
    config_file.write_text(json.dumps({
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"}, "metrics": {"bindAddress": "0"},
        "webhook": {"port": free_port(), "certDir": str(workdir / "webhook-certs")},
        "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 300, "burst": 500},  # as Kueue's own manifests set them
        "integrations": {"frameworks": ["batch/job"]},
        # Its visibility API is an aggregated API server with certificates and an APIService of its own;
        # it shows the queues and has no part in admitting.
        "featureGates": {"VisibilityOnDemand": False},
    }))
    self_signed(workdir / "webhook-certs", "kueue-webhook")
    # The folders of that path this run makes, deepest first: removed again at the end.
    made = [d for d in (KUEUE_METRICS_CERTS, *KUEUE_METRICS_CERTS.parents) if not d.exists()]
    if made:
        self_signed(KUEUE_METRICS_CERTS, "kueue-metrics")
    forget_kueue(crds)  # what an interrupted run left
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))
    with suppress(ApiException):
        client.CoreV1Api().create_namespace({"metadata": {"name": KUEUE_NAMESPACE}})

    def ready() -> bool:
        with socket.create_connection(("127.0.0.1", health), timeout=5) as sock:
            sock.sendall(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n")
            return sock.recv(1024).split(b"\r\n", 1)[0].split(b" ")[1:2] == [b"200"]

    try:
        with process([str(binary), f"--config={config_file}"], logfile, ready, "Kueue", 120) as proc:
            yield proc
    finally:
        forget_kueue(crds)
        with suppress(ApiException):
            client.CoreV1Api().delete_namespace(KUEUE_NAMESPACE)
        if made:
            for f in ("tls.crt", "tls.key"):
                (KUEUE_METRICS_CERTS / f).unlink(missing_ok=True)
            for d in made:
                with suppress(OSError):
                    d.rmdir()


KUEUE_QUEUE_KINDS = ("localqueues", "clusterqueues", "resourceflavors")


def forget_kueue(crds: Path) -> None:
    """Kueue's queue objects and CRDs gone. Kueue puts finalizers on its objects and only a running Kueue
    takes them off, so what is left once it stopped has them stripped first: otherwise its CRDs would
    stay terminating, and the next run could not create anything of theirs."""
    custom = client.CustomObjectsApi()
    for plural in KUEUE_QUEUE_KINDS:
        with suppress(ApiException):  # 404: the CRD is not there
            for obj in custom.list_cluster_custom_object("kueue.x-k8s.io", "v1beta2", plural)["items"]:
                meta = obj["metadata"]
                with suppress(ApiException):
                    if "namespace" in meta:
                        custom.patch_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", meta["namespace"], plural,
                                                              meta["name"], {"metadata": {"finalizers": None}})
                    else:
                        custom.patch_cluster_custom_object("kueue.x-k8s.io", "v1beta2", plural, meta["name"],
                                                           {"metadata": {"finalizers": None}})
    subprocess.run([str(REPO / ".bin/kubectl"), "delete", "--ignore-not-found", "--timeout=120s", "-f", str(crds)],
                   check=False, capture_output=True)


def delete_kueue_queues(custom: client.CustomObjectsApi, namespace: str) -> None:
    """The benchmark's queues, deleted while Kueue runs (it takes its finalizers off them)."""
    group, version = "kueue.x-k8s.io", "v1beta2"
    with suppress(ApiException):
        custom.delete_namespaced_custom_object(group, version, namespace, "localqueues", "bench")
    for plural in KUEUE_QUEUE_KINDS[1:]:
        with suppress(ApiException):
            custom.delete_cluster_custom_object(group, version, plural, "bench-scale")


def kueue_queues(custom: client.CustomObjectsApi, namespace: str, nodes: int, node_cpu: int) -> None:
    """One flavor, one ClusterQueue whose quota is the operator's threshold of the benchmark's nodes,
    and the LocalQueue ``bench`` in ``namespace``."""
    group, version = "kueue.x-k8s.io", "v1beta2"
    retrying(lambda: custom.create_cluster_custom_object(group, version, "resourceflavors", {
        "apiVersion": f"{group}/{version}", "kind": "ResourceFlavor", "metadata": {"name": "bench-scale"},
        "spec": {}}))
    retrying(lambda: custom.create_cluster_custom_object(group, version, "clusterqueues", {
        "apiVersion": f"{group}/{version}", "kind": "ClusterQueue", "metadata": {"name": "bench-scale"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["cpu", "memory"],
            "flavors": [{"name": "bench-scale", "resources": [
                {"name": "cpu", "nominalQuota": str(int(THRESHOLD * nodes * node_cpu))},
                {"name": "memory", "nominalQuota": f"{int(THRESHOLD * nodes * NODE_MEMORY_GI)}Gi"}]}]}]}}))
    retrying(lambda: custom.create_namespaced_custom_object(group, version, namespace, "localqueues", {
        "apiVersion": f"{group}/{version}", "kind": "LocalQueue", "metadata": {"name": "bench"},
        "spec": {"clusterQueue": "bench-scale"}}))


def watch_started_jobs(namespace: str, stop: threading.Event, started: dict[str, float]) -> threading.Thread:
    """Records when each Job of ``namespace`` is first seen not suspended (Kueue admitted and started it)."""
    def seen(job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        if job["spec"].get("suspend") is False and name not in started:
            started[name] = time.monotonic()

    return watch_namespace(client.BatchV1Api(client.ApiClient()).list_namespaced_job, namespace, stop, seen,
                           "started jobs")


def kueue_run(api: client.ApiClient, work: Workload, threads: int, result: Result, nodes: int,
              node_cpu: int) -> None:
    """The same burst as plain Jobs through Kueue: from the first create until Kueue started the last."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / unique("bench-scale-kueue")
    workdir.mkdir(parents=True)
    logfile = workdir / "kueue.log"
    namespace = create_namespace(core)
    log(f"Kueue {KUEUE_VERSION}: {len(work.gangs)} Jobs ({work.pods} pods) in {namespace} (Kueue log {logfile})")
    try:
        with kueue_process(workdir, logfile) as proc:
            kueue_queues(custom, namespace, nodes, node_cpu)
            started: dict[str, float] = {}
            stop = threading.Event()
            watcher = watch_started_jobs(namespace, stop, started)
            names = [f"job-{i:05d}" for i in range(len(work.gangs))]
            created: dict[str, float] = {}
            cpu0, k0 = process_cpu("bin/kube-apiserver"), process_cpu("bin/kueue") or 0.0
            start = time.monotonic()

            def create(i: int) -> None:
                retrying(lambda: batch.create_namespaced_job(namespace, plain_job(names[i], work.gangs[i], "bench")))
                created[names[i]] = time.monotonic()

            took_create = in_parallel(create, len(names), threads, "Kueue's Jobs created")
            log(f"  all {len(names)} Jobs created in {took_create:.1f}s; waiting for Kueue to start them")
            wait_until("Jobs started by Kueue", lambda: (len(started) >= len(names),
                                                         f"{len(started)}/{len(names)}"), timeout=3600, every=5)
            took = max(started.values()) - start
            cpu1, k1 = process_cpu("bin/kube-apiserver"), process_cpu("bin/kueue") or 0.0
            stop.set()
            watcher.join(30)
            result.kueue_started = sorted(t - start for t in started.values())
            result.kueue_latencies = sorted(started[n] - created[n] for n in names)
            result.figures.update({
                "kueue_version": KUEUE_VERSION, "kueue_seconds": took, "kueue_per_second": len(names) / took,
                "kueue_create_seconds": took_create,
                "kueue_latency_p50": percentile(result.kueue_latencies, 0.5),
                "kueue_latency_p99": percentile(result.kueue_latencies, 0.99),
                "kueue_cpu_seconds": k1 - k0, "kueue_peak_rss_mib": peak_rss_mib(proc.pid),
            })
            if cpu0 is not None and cpu1 is not None:
                result.figures["kueue_apiserver_cores"] = (cpu1 - cpu0) / took
            log(f"  all {len(names)} Jobs started after {took:.1f}s ({len(names) / took:.0f}/s); create -> started "
                f"p50 {result.figures['kueue_latency_p50']:.1f}s p99 {result.figures['kueue_latency_p99']:.1f}s; "
                f"Kueue peak RSS {result.figures['kueue_peak_rss_mib']:.0f} MiB")
            log("  deleting Kueue's namespace and queues (Kueue removes its finalizers)")
            delete_namespace(api, namespace, timeout=1800)
            delete_kueue_queues(custom, namespace)
    finally:
        with suppress(ApiException):
            core.delete_namespace(namespace)


# --- reporting ------------------------------------------------------------------------------------

def report(work: Workload, result: Result, nodes: int) -> None:
    f = result.figures
    print()
    print(f"{len(work.gangs)} units of work ({f.get('gangs', 0)} gangs of 2-16, {work.pods} pods) on {nodes} kwok "
          f"nodes; {len(work.arrivals)} high-priority pods in the stream")
    floor = f.get("floor_mean_per_second")
    rows = [
        ("throughput (units/s)", _figure(f, "floor_mean_per_second", ".1f"), f"{f['operator_per_second']:.1f}",
         f"{f['operator_per_second'] / floor:.2f} of the floor (the mean of {f['floor_per_second']:.1f} before "
         f"the operator's run and {f['floor_after_per_second']:.1f} after it)" if floor else
         "no floor run (--no-floor)"),
        ("all Jobs exist after (s)", _figure(f, "floor_seconds", ".1f"), f"{f['operator_seconds']:.1f}", ""),
        *([("the ceiling: SJ + its Job, no operator", "-", f"{f['ceiling_per_second']:.1f} units/s",
            (f"{f['ceiling_per_second'] / floor:.2f} of the floor; " if floor else "")
            + f"the operator reached {f['operator_per_second'] / f['ceiling_per_second']:.2f} of it")]
          if "ceiling_per_second" in f else []),
        *([("the ceiling watched by a standby replica", "-", f"{f['ceiling_watched_per_second']:.1f} units/s",
            (f"{f['ceiling_watched_per_second'] / floor:.2f} of the floor; " if floor else "")
            + f"the replica's CPU {f['standby_cpu_seconds']:.1f} s; the operator reached "
            f"{f['operator_per_second'] / f['ceiling_watched_per_second']:.2f} of it")]
          if "ceiling_watched_per_second" in f else []),
        ("99.5% running after (s)", _figure(f, "floor_running_seconds", ".0f"),
         f"{f.get('operator_running_seconds', float('nan')):.0f}", "pods ready / SJs Running"),
        ("create -> Job p50 / p99 (s)", "-", f"{f['latency_p50']:.1f} / {f['latency_p99']:.1f}", ""),
        ("Job -> its first sync p50 / p99 (s)", _pair(f, "floor_job_sync"), _pair(f, "operator_job_sync"),
         "the Job controller's status.startTime"),
        ("API server CPU (cores)", _figure(f, "floor_apiserver_cores", ".2f"),
         f"{f.get('operator_apiserver_cores', float('nan')):.2f}", ""),
        ("operator CPU until every Job exists (s)", "-", _figure(f, "operator_cpu_seconds", ".1f"),
         f"{_figure(f, 'operator_gc_seconds_to_jobs', '.1f')} s of wall time in GC meanwhile"),
        ("client writes per unit", "1", f"1 + {f['writes_per_sj']:.2f} by the operator",
         f"{f['writes_per_sj_without_gang_services']:.2f} without gang Services"),
        ("operator writes per unit to 99.5% Running", "-", _figure(f, "writes_per_sj_to_running", ".2f"),
         "Events and steering included"),
        ("operator peak RSS (MiB)", "-", f"{f['operator_peak_rss_mib']:.0f}", ""),
        ("operator's loop held at most (s)", "-", f"<= {_figure(f, 'loop_lag_worst_le', 'g')}",
         f"{_figure(f, 'loop_lag_over_1s', '.0f')} lags over 1 s (scavenger_event_loop_lag_seconds)"),
        ("operator's full GC pauses at most (s)", "-", f"<= {_figure(f, 'gc_full_worst_le', 'g')}",
         f"{_figure(f, 'gc_full_over_1s', '.0f')} over 1 s; {_figure(f, 'gc_seconds', '.1f')} s in all collections"),
        ("operator's GC by generation (s in n)", "-", " / ".join(
            f"{_figure(f, f'gc_seconds_gen{g}', '.1f')} in {_figure(f, f'gc_count_gen{g}', '.0f')}" for g in range(3)),
         "young / middle / full; freed " + " / ".join(_figure(f, f"gc_collected_gen{g}", ".3g") for g in range(3))),
        ("pods preempted / SJ runs interrupted", f"{len(result.lost_plain)}" if floor else "-",
         f"{f['operator_interruptions']:.0f}", ""),
        ("work lost (pod-seconds)", f"{sum(result.lost_plain):.0f}" if floor else "-",
         f"{sum(result.lost_operator):.0f}",
         f"{_ratio(sum(result.lost_operator), sum(result.lost_plain))} of plain Jobs'" if floor else ""),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'':<{width}}  {'plain Jobs':>12}  {'operator':>28}  ")
    for label, plain, operator, note in rows:
        print(f"{label:<{width}}  {plain:>12}  {operator:>28}  {note}")
    print("operator API calls per SJ: " + ", ".join(f"{op} {n:.2f}" for op, n in f["calls_per_sj"].items()))
    if "kueue_seconds" in f:
        print(f"Kueue {f['kueue_version']}, the same burst as suspended Jobs: all started after "
              f"{f['kueue_seconds']:.1f}s "
              f"({f['kueue_per_second']:.1f}/s"
              + (f", {f['kueue_per_second'] / floor:.2f} of the floor" if floor else "") + "); "
              f"create -> started p50 {f['kueue_latency_p50']:.1f}s p99 {f['kueue_latency_p99']:.1f}s; API server "
              f"{f.get('kueue_apiserver_cores', float('nan')):.2f} cores; Kueue CPU {f['kueue_cpu_seconds']:.1f}s, "
              f"peak RSS {f['kueue_peak_rss_mib']:.0f} MiB")


GOALS: dict[str, results.Goal] = {
    "operator_to_floor": {"min": 0.5},
    "work_lost_to_plain": {"max": 0.3},
}
"""The project's goals: the operator launches at least half as fast as the floor (the mean of its two timings),
and loses at most 0.3 of the work plain Jobs lose to the same stream."""
RSS_GOAL_MIB = 500e6 / 2**20
"""Peak RSS under 500 MB (476.8 MiB), set for 10,000 units (``RSS_GOAL_UNITS``)."""
RSS_GOAL_UNITS = 10_000
UNITS = (("_per_second", "/s"), ("_seconds", "s"), ("_cores", "cores"), ("_mib", "MiB"), ("_p50", "s"), ("_p99", "s"),
         ("_le", "s"))


def _unit(key: str) -> str:
    return next((unit for suffix, unit in UNITS if key.endswith(suffix) or f"{suffix}_" in key), "")


def scale_figures(figures: Mapping[str, Any], units: int) -> list[dict[str, Any]]:
    """The run's figures (``Result.figures``) as the result's, with the ratios its goals are set on; names that are
    not numbers (Kueue's version) are left to the parameters."""
    out: list[dict[str, Any]] = []
    for key, value in figures.items():
        if isinstance(value, Mapping):
            out += [results.figure(f"{key}: {name}", n) for name, n in value.items()]
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            goal = {"max": RSS_GOAL_MIB} if key == "operator_peak_rss_mib" and units >= RSS_GOAL_UNITS else None
            out.append(results.figure(key, value, _unit(key), goal))
    if figures.get("floor_mean_per_second"):
        ratio = figures["operator_per_second"] / figures["floor_mean_per_second"]
        out.append(results.figure("operator_to_floor", ratio, "", GOALS["operator_to_floor"]))
    if figures.get("work_lost_plain_pod_seconds"):
        out.append(results.figure("work_lost_to_plain", figures["work_lost_operator_pod_seconds"]
                                  / figures["work_lost_plain_pod_seconds"], "", GOALS["work_lost_to_plain"]))
    return out


def _pair(figures: Mapping[str, Any], key: str) -> str:
    """``key``'s p50 / p99, or "-" when the run did not measure them."""
    if f"{key}_p50" not in figures:
        return "-"
    return f"{figures[f'{key}_p50']:.0f} / {figures[f'{key}_p99']:.0f}"


def _figure(figures: Mapping[str, Any], key: str, spec: str) -> str:
    return format(figures[key], spec) if key in figures else "-"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "n/a"


def plot(work: Workload, result: Result, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.5))
    n = len(work.gangs)
    if result.floor_created:
        left.plot(sorted(result.floor_created), range(1, len(result.floor_created) + 1), label="plain Jobs (the floor)")
    left.plot(result.operator_jobs, range(1, len(result.operator_jobs) + 1), label="ScavengerJobs' Jobs")
    if result.ceiling_created:
        left.plot(sorted(result.ceiling_created), range(1, len(result.ceiling_created) + 1),
                  label="SJ + Job, no operator (the ceiling)")
    if result.kueue_started:
        left.plot(result.kueue_started, range(1, len(result.kueue_started) + 1), label="Kueue: Jobs started")
    left.set(title=f"Jobs existing after a burst of {n}", xlabel="seconds after the first create", ylabel="Jobs")
    left.legend()
    middle.plot(result.latencies, [i / len(result.latencies) for i in range(1, len(result.latencies) + 1)],
                label="operator: SJ created -> its Job", color="tab:orange")
    if result.kueue_latencies:
        middle.plot(result.kueue_latencies, [i / len(result.kueue_latencies)
                                             for i in range(1, len(result.kueue_latencies) + 1)],
                    label="Kueue: Job created -> started", color="tab:green")
        middle.legend()
    middle.set(title="created -> running Job (after the burst)", xlabel="seconds", ylabel="fraction of units")
    middle.axvline(result.figures["latency_p99"], linestyle=":", color="grey")
    right.bar(["plain Jobs", "operator"], [sum(result.lost_plain) / 3600, sum(result.lost_operator) / 3600],
              color=["tab:blue", "tab:orange"])
    right.set(title=f"work lost to {len(work.arrivals)} high-priority pods", ylabel="pod-hours")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    log(f"plot written to {path}")


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
                        help="skip the floor and plain Jobs' run (the operator alone: at 10,000 units, deleting the "
                             "floor's 18,000 pods takes this cluster longer than the operator's run)")
    parser.add_argument("--ceiling", action="store_true",
                        help="after the floor, each unit's SJ and its Job created by the benchmark with no operator: "
                             "the most any operator could reach on this cluster")
    parser.add_argument("--standby", action="store_true",
                        help="then the ceiling again with a standby replica of the operator watching (deciding "
                             "nothing): what watching alone costs")
    parser.add_argument("--plot", type=Path, help="write the plot (PNG) here")
    results.add_arguments(parser)
    parser.add_argument("--profile", type=Path,
                        help="sample the operator with py-spy while it runs; its stacks go here (collapsed)")
    parser.add_argument("--profile-burst", action="store_true",
                        help="with --profile: sample only until every SJ's Job exists (the burst)")
    parser.add_argument("--kueue", action="store_true",
                        help=f"then the same burst through Kueue {KUEUE_VERSION} (hack/build-binaries kueue builds it)")
    args = parser.parse_args()
    if args.profile_burst and args.profile is None:
        parser.error("--profile-burst needs --profile FILE")
    if not os.environ.get("KUBECONFIG"):
        parser.error("no cluster: set KUBECONFIG (make bench-scale starts the local cluster)")
    config.load_kube_config()
    client.Configuration._default.connection_pool_maxsize = 32  # type: ignore[attr-defined]
    api = client.ApiClient()
    ensure_crd(api)
    work = workload(args.sjs, args.gang_share, args.rate, args.stream, args.node_cpu, args.seed)
    result = Result()
    core = client.CoreV1Api(api)
    log(f"{args.nodes} kwok nodes of {args.node_cpu} CPU for the run")
    try:
        make_nodes(core, args.nodes, args.node_cpu, args.threads)
        with priority_classes(client.SchedulingV1Api(api)):
            if not args.no_floor:
                floor_run(api, work, args.threads, result, args.settle)
            if args.ceiling:
                ceiling_run(api, work, args.threads, args.period, result)
            if args.standby:
                ceiling_run(api, work, args.threads, args.period, result, standby=True)
            operator_run(api, work, args.threads, args.period, result, args.settle,
                         followed=args.kueue or not args.no_floor, profile=args.profile,
                         profile_burst=args.profile_burst)
            if not args.no_floor:
                floor_again(api, work, args.threads, result, followed=args.kueue)
            if args.kueue:
                kueue_run(api, work, args.threads, result, args.nodes, args.node_cpu)
    finally:
        delete_nodes(core)
    report(work, result, args.nodes)
    result.figures["work_lost_operator_pod_seconds"] = sum(result.lost_operator)
    if not args.no_floor:
        result.figures["pods_preempted_plain"] = len(result.lost_plain)
        result.figures["work_lost_plain_pod_seconds"] = sum(result.lost_plain)
    params = results.parameters(args, units_pods=work.pods, high_priority_pods=len(work.arrivals),
                                **{k: v for k, v in result.figures.items() if isinstance(v, str)})
    results.save(args, results.result("bench_scale", params, scale_figures(result.figures, args.sjs)))
    if args.plot:
        plot(work, result, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
